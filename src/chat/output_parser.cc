// The OutputParser facade, format names and detection, and the reasoning splitter that sits
// in front of the format parsers.
#include "chat/output_parser.h"

#include <array>
#include <utility>

#include "chat/output_parser_impl.h"

namespace ferrox {

namespace {

using namespace output_detail;

constexpr std::array<std::pair<ToolCallFormat, const char*>, 11> kFormatNames = {{
    {ToolCallFormat::kNone, "none"},
    {ToolCallFormat::kHermes, "hermes"},
    {ToolCallFormat::kQwen3Coder, "qwen3_coder"},
    {ToolCallFormat::kLlama3, "llama3"},
    {ToolCallFormat::kMistral, "mistral"},
    {ToolCallFormat::kDeepSeekV3, "deepseek_v3"},
    {ToolCallFormat::kDeepSeekV31, "deepseek_v3_1"},
    {ToolCallFormat::kHarmony, "harmony"},
    {ToolCallFormat::kFunctionaryV32, "functionary_v3_2"},
    {ToolCallFormat::kCommandR7B, "command_r7b"},
    {ToolCallFormat::kGeneric, "generic"},
}};

bool contains(std::string_view s, std::string_view what) {
    return s.find(what) != std::string_view::npos;
}

// Splits think blocks out of the text and feeds the rest to the format parser. A think
// marker inside a tool-call construct is content; a think block anywhere else (also after
// text, or several) is reasoning. Whitespace right after the opening and around the closing
// marker is dropped.
class ReasoningSplitter {
  public:
    ReasoningSplitter(const OutputFormat& f, FormatParser* next)
        : start_(f.think_start),
          end_(f.think_end),
          next_(next),
          initial_(f.starts_in_reasoning ? State::kOpening : State::kText),
          state_(initial_) {}

    void push(std::string_view text, Emitter& e) {
        buf_.append(text);
        while (step(false, e)) {
        }
        buf_.compact();
    }

    void finish(Emitter& e) {
        while (step(true, e)) {
        }
        buf_.clear();
        next_->end_run(e);
        state_ = initial_;
    }

  private:
    enum class State { kText, kOpening, kReasoning, kClosed };

    bool step(bool eof, Emitter& e) {
        std::string_view r = buf_.rest();
        switch (state_) {
            case State::kText:
                return step_text(r, eof, e);
            case State::kOpening:
                return skip_space(r, State::kReasoning);
            case State::kReasoning:
                return step_reasoning(r, eof, e);
            case State::kClosed:
                return skip_space(r, State::kText);
        }
        return false;
    }

    bool step_text(std::string_view r, bool eof, Emitter& e) {
        std::array<std::string_view, 1> markers = {start_};
        TextScan scan = scan_text(r, markers, eof);
        if (scan.n_text > 0) {
            next_->push(r.substr(0, scan.n_text), e);
            buf_.consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        buf_.consume(start_.size());
        if (next_->in_construct()) {
            next_->push(start_, e);
        } else {
            next_->end_run(e);  // what it held back comes before the reasoning
            state_ = State::kOpening;
        }
        return true;
    }

    bool skip_space(std::string_view r, State next) {
        size_t n = count_leading_space(r);
        if (n > 0) {
            buf_.consume(n);
            return true;
        }
        if (r.empty()) return false;
        state_ = next;
        return true;
    }

    // Trailing whitespace is held until more reasoning follows: it is dropped before the
    // closing marker and at the end.
    bool step_reasoning(std::string_view r, bool eof, Emitter& e) {
        size_t close = r.find(end_);
        if (close != std::string_view::npos) {
            e.reasoning(r.substr(0, trimmed_length(r.substr(0, close))));
            buf_.consume(close + end_.size());
            state_ = State::kClosed;
            return true;
        }
        if (eof) {
            e.reasoning(r.substr(0, trimmed_length(r)));
            buf_.consume(r.size());
            return false;
        }
        std::array<std::string_view, 1> markers = {end_};
        size_t n = trimmed_length(r.substr(0, held_suffix_start(r, markers)));
        if (n == 0) return false;
        e.reasoning(r.substr(0, n));
        buf_.consume(n);
        return true;
    }

    std::string start_, end_;
    FormatParser* next_;
    State initial_;
    State state_;
    StreamBuffer buf_;
};

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
    for (const auto& [format, name] : kFormatNames) {
        if (format == f) return name;
    }
    return "none";
}

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
    for (const auto& [format, n] : kFormatNames) {
        if (name == n) return format;
    }
    return std::nullopt;
}

ToolCallFormat detect_tool_call_format(std::string_view t) {
    // Order matters where families share markers: Qwen3-Coder also writes <tool_call>, and
    // functionary and Hermes-on-Llama templates are Llama 3 underneath.
    if (contains(t, "<|channel|>")) return ToolCallFormat::kHarmony;
    if (contains(t, "<|START_ACTION|>")) return ToolCallFormat::kCommandR7B;
    if (contains(t, "<｜tool▁calls▁begin｜>")) {
        // V3 and R1 wrap the arguments in a ```json fence; V3.1 writes them bare.
        return contains(t, "```json") ? ToolCallFormat::kDeepSeekV3 : ToolCallFormat::kDeepSeekV31;
    }
    if (contains(t, "<function=")) return ToolCallFormat::kQwen3Coder;
    if (contains(t, "[TOOL_CALLS]")) return ToolCallFormat::kMistral;
    if (contains(t, ">>>all")) return ToolCallFormat::kFunctionaryV32;
    if (contains(t, "<tool_call>")) return ToolCallFormat::kHermes;
    if (contains(t, "<|python_tag|>") || contains(t, "ipython")) return ToolCallFormat::kLlama3;
    return ToolCallFormat::kGeneric;
}

OutputFormat detect_output_format(std::string_view t) {
    OutputFormat f;
    f.tools = detect_tool_call_format(t);
    f.family = f.tools;
    if (contains(t, "<|START_THINKING|>")) {
        f.think_start = "<|START_THINKING|>";
        f.think_end = "<|END_THINKING|>";
    } else if (contains(t, "[THINK]")) {
        f.think_start = "[THINK]";
        f.think_end = "[/THINK]";
    }
    return f;
}

bool prompt_opens_reasoning(std::string_view prompt, const OutputFormat& f) {
    if (!f.split_reasoning || f.think_start.empty()) return false;
    if (f.tools == ToolCallFormat::kHarmony || f.family == ToolCallFormat::kHarmony) return false;
    prompt = prompt.substr(0, trimmed_length(prompt));
    return prompt.size() >= f.think_start.size() &&
           prompt.substr(prompt.size() - f.think_start.size()) == f.think_start;
}

struct OutputParser::Impl {
    std::unique_ptr<FormatParser> format;
    std::unique_ptr<ReasoningSplitter> reasoning;  // null: think blocks are not split here
    int n_tool_calls = 0;
};

OutputParser::OutputParser(OutputFormat f) : impl_(std::make_unique<Impl>()) {
    bool parse_tools = f.tools != ToolCallFormat::kNone;
    ToolCallFormat syntax = parse_tools ? f.tools : f.family;
    impl_->format = make_format_parser(syntax, parse_tools, f.split_reasoning);
    // Harmony carries reasoning in its analysis channel, not in think blocks.
    bool split = f.split_reasoning && syntax != ToolCallFormat::kHarmony &&
                 !f.think_start.empty() && !f.think_end.empty();
    if (split) impl_->reasoning = std::make_unique<ReasoningSplitter>(f, impl_->format.get());
}

OutputParser::~OutputParser() = default;
OutputParser::OutputParser(OutputParser&&) noexcept = default;
OutputParser& OutputParser::operator=(OutputParser&&) noexcept = default;

void OutputParser::push(std::string_view text, std::vector<ChatDelta>* out) {
    if (!impl_) return;
    std::vector<ChatDelta> scratch;  // a null `out` still advances the parser
    Emitter e(out != nullptr ? out : &scratch);
    if (impl_->reasoning) {
        impl_->reasoning->push(text, e);
    } else {
        impl_->format->push(text, e);
    }
    impl_->n_tool_calls += e.n_calls();
}

void OutputParser::finish(std::vector<ChatDelta>* out) {
    if (!impl_) return;
    std::vector<ChatDelta> scratch;
    Emitter e(out != nullptr ? out : &scratch);
    if (impl_->reasoning) {
        impl_->reasoning->finish(e);
    } else {
        impl_->format->end_run(e);
    }
    impl_->n_tool_calls += e.n_calls();
}

int OutputParser::n_tool_calls() const { return impl_ ? impl_->n_tool_calls : 0; }

}  // namespace ferrox

// gpt-oss's harmony format: a stream of messages
//   [<|start|>assistant][ to=functions.f]<|channel|>CHANNEL[ to=functions.f][ <|constrain|>json]
//   <|message|>CONTENT (<|end|> | <|call|> | <|return|> | nothing at the end of the stream)
// The analysis channel is reasoning, final (and commentary preambles) text, and a message with
// a recipient a tool call whose content is the JSON arguments.
#include <algorithm>
#include <array>

#include "chat/output_parser_impl.h"

namespace ferrox::output_detail {

namespace {

constexpr auto npos = std::string_view::npos;
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>";
// The first three end a message (consumed); the last two begin the next one, which also ends
// a message whose end marker is missing.
constexpr std::array<std::string_view, 5> kContentMarkers = {"<|end|>", "<|call|>", "<|return|>",
                                                             kStart, kChannel};
constexpr size_t kNumEnds = 3;
// A header longer than this is not one: what was held becomes text.
constexpr size_t kMaxHeader = 512;

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

// The value after `key` in a header, up to whitespace or the next "<|".
std::string_view header_field(std::string_view h, std::string_view key) {
    size_t p = h.find(key);
    if (p == npos) return {};
    p += key.size();
    size_t q = p;
    while (q < h.size() && !is_space(h[q]) && h[q] != '<') ++q;
    return h.substr(p, q - p);
}

enum class HeaderCheck { kWait, kOk, kBad };

// `h` is the text before <|message|> (complete) or all that could precede it so far. Every
// kBad condition stays true as h grows, which keeps the decision independent of chunking.
HeaderCheck check_header(std::string_view h, bool complete) {
    std::string_view t = h.substr(count_leading_space(h));
    if (h.size() > kMaxHeader || t.find('\n') != npos) return HeaderCheck::kBad;
    for (size_t i = 0; i < kNumEnds; ++i) {
        if (t.find(kContentMarkers[i]) != npos) return HeaderCheck::kBad;
    }
    if (t.find(kStart, 1) != npos) return HeaderCheck::kBad;
    static constexpr std::array<std::string_view, 4> kHeads = {kStart, kChannel, "assistant",
                                                               "to="};
    bool may_become = false;
    for (std::string_view head : kHeads) {
        if (starts_with(t, head)) return complete ? HeaderCheck::kOk : HeaderCheck::kWait;
        if (starts_with(head, t)) may_become = true;
    }
    return may_become && !complete ? HeaderCheck::kWait : HeaderCheck::kBad;
}

class HarmonyParser final : public FormatParser {
  public:
    HarmonyParser(bool parse_tools, bool split_reasoning)
        : parse_tools_(parse_tools), split_reasoning_(split_reasoning) {}
    bool in_construct() const override { return state_ != State::kContent; }

  protected:
    bool step(bool eof, Emitter& e) override {
        switch (state_) {
            case State::kHeader:
                return step_header(eof, e);
            case State::kContent:
                return step_content(eof, e);
            case State::kToolContent:
                return step_tool_content(eof, e);
        }
        return false;
    }
    void restart() override { state_ = State::kHeader; }

  private:
    enum class State { kHeader, kContent, kToolContent };

    bool step_header(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t found = r.find(kMessage);
        std::array<std::string_view, 1> message = {kMessage};
        std::string_view h = r.substr(0, found != npos ? found : held_suffix_start(r, message));
        HeaderCheck check = check_header(h, found != npos);
        if (check == HeaderCheck::kWait) {
            if (!eof) return false;
            check = HeaderCheck::kBad;  // cut off before <|message|>
        }
        if (check == HeaderCheck::kBad) return not_a_header(r, e);
        std::string_view recipient = header_field(h, "to=");
        std::string_view channel = header_field(h, kChannel);
        size_t after = found + kMessage.size();
        reasoning_ = false;
        verbatim_ = false;
        if (!recipient.empty() && parse_tools_) {
            name_ = std::string(recipient);
            if (starts_with(name_, "functions.")) name_.erase(0, 10);
            body_ = after;
            search_from_ = after;
            state_ = State::kToolContent;  // the header stays in rest() for a verbatim fallback
            return true;
        }
        if (!recipient.empty() || (channel == "analysis" && !split_reasoning_)) {
            verbatim_ = true;  // tool calls not parsed / reasoning not split: markup stays
            sink_.text(r.substr(0, after), e);
        } else {
            reasoning_ = channel == "analysis";
        }
        consume(after);
        state_ = State::kContent;
        return true;
    }

    // Not a header: the text is read as final-channel content. A marker at the front is
    // consumed as text, so that the content state cannot hand the same text straight back.
    bool not_a_header(std::string_view r, Emitter& e) {
        for (std::string_view m : {kStart, kChannel}) {
            if (starts_with(r, m)) {
                sink_.text(m, e);
                consume(m.size());
                break;
            }
        }
        reasoning_ = false;
        verbatim_ = false;
        state_ = State::kContent;
        return true;
    }

    bool step_content(bool eof, Emitter& e) {
        std::string_view r = rest();
        TextScan scan = scan_text(r, kContentMarkers, eof);
        if (scan.n_text > 0) {
            std::string_view s = r.substr(0, scan.n_text);
            if (reasoning_) {
                sink_.reasoning(s, e);
            } else {
                sink_.text(s, e);
            }
            consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        if (static_cast<size_t>(scan.marker) < kNumEnds) {
            std::string_view m = kContentMarkers[scan.marker];
            if (verbatim_) sink_.text(m, e);
            consume(m.size());
        }
        state_ = State::kHeader;
        return true;
    }

    // rest() holds the header, then the arguments from body_.
    bool step_tool_content(bool eof, Emitter& e) {
        std::string_view r = rest();
        MarkerHit hit = find_marker(r, kContentMarkers, search_from_);
        if (hit.pos == npos && !eof) {
            size_t keep = kChannel.size() - 1;  // the longest marker could have begun there
            search_from_ = std::max(body_, r.size() - std::min(r.size(), keep));
            return false;
        }
        size_t end = hit.pos == npos ? r.size() : hit.pos;
        size_t stop = end;
        if (hit.pos != npos && hit.which < kNumEnds) stop += kContentMarkers[hit.which].size();
        if (auto args = json_object_text(r.substr(body_, end - body_))) {
            sink_.call(ToolCall{name_, *args}, e);
        } else {
            sink_.text(r.substr(0, stop), e);
        }
        consume(stop);
        state_ = State::kHeader;
        return true;
    }

    bool parse_tools_;
    bool split_reasoning_;
    State state_ = State::kHeader;
    bool reasoning_ = false;  // kContent: the message is reasoning
    bool verbatim_ = false;   // kContent: its end marker is text too
    size_t body_ = 0;
    size_t search_from_ = 0;
    std::string name_;
};

}  // namespace

std::unique_ptr<FormatParser> make_harmony_parser(bool parse_tools, bool split_reasoning) {
    return std::make_unique<HarmonyParser>(parse_tools, split_reasoning);
}

}  // namespace ferrox::output_detail

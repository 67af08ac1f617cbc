// The tool-call formats other than harmony: one parser class per family (tag delimited,
// Llama 3, Mistral, functionary), with the content parsers that turn a complete call's text
// into ToolCalls. A content parser that fails makes the whole construct text, verbatim.
#include <algorithm>
#include <array>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "chat/output_parser_impl.h"

namespace ferrox::output_detail {

namespace {

using Json = nlohmann::ordered_json;
constexpr auto npos = std::string_view::npos;

bool starts_with(std::string_view s, std::string_view prefix) {
    return s.substr(0, prefix.size()) == prefix;
}

// Depth-limited and non-throwing: too deep, invalid or trailing garbage -> nullopt.
std::optional<Json> parse_json(std::string_view text) {
    bool too_deep = false;
    auto cb = [&too_deep](int depth, Json::parse_event_t event, Json&) {
        bool opens =
            event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
        if (opens && depth >= static_cast<int>(kMaxJsonDepth)) too_deep = true;
        return !too_deep;
    };
    try {
        Json j = Json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
        if (too_deep || j.is_discarded()) return std::nullopt;
        return j;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// Raw model text may hold invalid UTF-8 (Qwen3-Coder's string values): replace, never throw.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// Arguments as an object, a JSON string holding one, or absent/null/"" (no arguments).
std::optional<std::string> arguments_text(const Json* args) {
    if (args == nullptr || args->is_null()) return "{}";
    if (args->is_object()) return dump(*args);
    if (args->is_string()) {
        const auto& s = args->get_ref<const std::string&>();
        if (trim(s).empty()) return "{}";
        return json_object_text(s);
    }
    return std::nullopt;
}

const Json* find_key(const Json& obj, std::initializer_list<const char*> keys) {
    for (const char* k : keys) {
        auto it = obj.find(k);
        if (it != obj.end()) return &*it;
    }
    return nullptr;
}

// {"name", "arguments"|"parameters"} (also OpenAI's {"function": {...}} nesting).
// need_args: bare JSON answers must carry arguments, so {"name": "Bob"} stays text.
std::optional<ToolCall> call_from_json(const Json& v, bool need_args = false) {
    if (!v.is_object()) return std::nullopt;
    const Json* obj = &v;
    auto fn = v.find("function");
    if (!v.contains("name") && fn != v.end() && fn->is_object()) obj = &*fn;
    auto name = obj->find("name");
    if (name == obj->end() || !name->is_string()) return std::nullopt;
    const std::string& name_text = name->get_ref<const std::string&>();
    if (trim(name_text).empty()) return std::nullopt;
    const Json* args = find_key(*obj, {"arguments", "parameters"});
    if (need_args && args == nullptr) return std::nullopt;
    auto args_text = arguments_text(args);
    if (!args_text) return std::nullopt;
    return ToolCall{name_text, *args_text};
}

// ---- content parsers: the text between a call's markers -> calls (false: malformed) ----

using ContentParser = bool (*)(std::string_view content, std::vector<ToolCall>* calls);

// Hermes / Qwen2.5 / Qwen3 / generic <tool_call>: one call object (or a list of them).
bool parse_json_calls(std::string_view content, std::vector<ToolCall>* calls) {
    auto j = parse_json(content);
    if (!j) return false;
    if (!j->is_array()) {
        auto c = call_from_json(*j);
        if (!c) return false;
        calls->push_back(std::move(*c));
        return true;
    }
    for (const Json& el : *j) {
        auto c = call_from_json(el);
        if (!c) return false;
        calls->push_back(std::move(*c));
    }
    return !calls->empty();
}

// Qwen3-Coder parameter value: one leading and one trailing newline are framing.
Json qwen3_coder_value(std::string_view v) {
    if (starts_with(v, "\n")) v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    if (auto j = parse_json(v)) return *j;
    return Json(std::string(v));
}

// "<function=NAME>" (<parameter=K>V</parameter>)* "</function>" from c[*i]; advances *i.
std::optional<ToolCall> parse_qwen3_coder_function(std::string_view c, size_t* i) {
    constexpr std::string_view kFunction = "<function=", kParameter = "<parameter=";
    constexpr std::string_view kEndParameter = "</parameter>", kEndFunction = "</function>";
    size_t p = *i + kFunction.size();
    size_t gt = c.find('>', p);
    if (gt == npos) return std::nullopt;
    std::string_view name = trim(c.substr(p, gt - p));
    if (name.empty() || name.find('\n') != npos) return std::nullopt;
    Json args = Json::object();
    p = gt + 1;
    while (true) {
        p += count_leading_space(c.substr(p));
        if (starts_with(c.substr(p), kEndFunction)) break;
        if (!starts_with(c.substr(p), kParameter)) return std::nullopt;
        size_t key_at = p + kParameter.size();
        gt = c.find('>', key_at);
        if (gt == npos) return std::nullopt;
        std::string key(trim(c.substr(key_at, gt - key_at)));
        if (key.empty()) return std::nullopt;
        // The value ends at </parameter>, or (leniently, as vLLM) where the next one begins.
        size_t end = std::min({c.find(kEndParameter, gt + 1), c.find(kParameter, gt + 1),
                               c.find(kEndFunction, gt + 1)});
        if (end == npos) return std::nullopt;
        args[key] = qwen3_coder_value(c.substr(gt + 1, end - gt - 1));
        p = end;
        if (starts_with(c.substr(p), kEndParameter)) p += kEndParameter.size();
    }
    *i = p + kEndFunction.size();
    return ToolCall{std::string(name), dump(args)};
}

bool parse_qwen3_coder_calls(std::string_view c, std::vector<ToolCall>* calls) {
    size_t i = 0;
    while (true) {
        i += count_leading_space(c.substr(i));
        if (i == c.size()) break;
        if (!starts_with(c.substr(i), "<function=")) return false;
        auto call = parse_qwen3_coder_function(c, &i);
        if (!call) return false;
        calls->push_back(std::move(*call));
    }
    return !calls->empty();
}

// DeepSeek V3/R1: "function<｜tool▁sep｜>NAME\n```json\n{...}\n```";
// V3.1: "NAME<｜tool▁sep｜>{...}". Either shape is accepted for both formats.
bool parse_deepseek_call(std::string_view c, std::vector<ToolCall>* calls) {
    constexpr std::string_view kSep = "<｜tool▁sep｜>";
    size_t sep = c.find(kSep);
    if (sep == npos) return false;
    std::string_view before = trim(c.substr(0, sep));
    std::string_view after = c.substr(sep + kSep.size());
    std::string_view name, args;
    if (trim(after).substr(0, 1) == "{") {
        name = before;
        args = after;
    } else {
        size_t nl = after.find('\n');
        if (nl == npos) return false;
        name = trim(after.substr(0, nl));
        args = trim(after.substr(nl + 1));
        if (starts_with(args, "```json")) {
            args.remove_prefix(7);
        } else if (starts_with(args, "```")) {
            args.remove_prefix(3);
        }
        if (args.size() >= 3 && args.substr(args.size() - 3) == "```") args.remove_suffix(3);
    }
    if (name.empty() || name.find('\n') != npos) return false;
    auto args_text = json_object_text(args);
    if (!args_text) return false;
    calls->push_back(ToolCall{std::string(name), *args_text});
    return true;
}

// Command R7B: [{"tool_call_id": "0", "tool_name": "f", "parameters": {...}}, ...].
bool parse_command_r7b_calls(std::string_view c, std::vector<ToolCall>* calls) {
    auto j = parse_json(c);
    if (!j || !j->is_array()) return false;
    for (const Json& el : *j) {
        if (!el.is_object()) return false;
        const Json* name = find_key(el, {"tool_name", "name"});
        if (name == nullptr || !name->is_string()) return false;
        const std::string& name_text = name->get_ref<const std::string&>();
        auto args = arguments_text(find_key(el, {"parameters", "arguments"}));
        if (trim(name_text).empty() || !args) return false;
        calls->push_back(ToolCall{name_text, *args});
    }
    return !calls->empty();
}

// kGeneric's whole-answer shapes: {"tool_calls": [...]}, {"tool_call": {...}} or one call.
bool parse_generic_answer(std::string_view text, std::vector<ToolCall>* calls) {
    auto j = parse_json(text);
    if (!j || !j->is_object()) return false;
    auto list = j->find("tool_calls");
    if (list != j->end()) {
        if (!list->is_array()) return false;
        for (const Json& el : *list) {
            auto c = call_from_json(el);
            if (!c) return false;
            calls->push_back(std::move(*c));
        }
        return !calls->empty();
    }
    auto one = j->find("tool_call");
    auto c = one != j->end() ? call_from_json(*one) : call_from_json(*j, /*need_args=*/true);
    if (!c) return false;
    calls->push_back(std::move(*c));
    return true;
}

bool is_ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One Python literal of Llama 3's f.call(k=v, ...) at s[*i]; advances *i.
std::optional<Json> parse_python_value(std::string_view s, size_t* i) {
    char c = s[*i];
    if (c == '\'') {
        std::string out;
        for (size_t k = *i + 1; k < s.size(); ++k) {
            if (s[k] == '\'') {
                *i = k + 1;
                return Json(out);
            }
            if (s[k] == '\\' && k + 1 < s.size()) {
                char x = s[++k];
                out.push_back(x == 'n' ? '\n' : x == 't' ? '\t' : x);
            } else {
                out.push_back(s[k]);
            }
        }
        return std::nullopt;
    }
    size_t end = *i;
    if (c == '"' || c == '{' || c == '[') {
        BracketScanner scan(/*python=*/false);
        if (c == '"') {  // a JSON string: find its closing quote
            bool esc = false;
            for (end = *i + 1; end < s.size(); ++end) {
                if (esc) {
                    esc = false;
                } else if (s[end] == '\\') {
                    esc = true;
                } else if (s[end] == '"') {
                    break;
                }
            }
            if (end == s.size()) return std::nullopt;
            ++end;
        } else {
            if (scan.feed(s.substr(*i)) != BracketScanner::State::kDone) return std::nullopt;
            end = *i + scan.end();
        }
    } else {
        while (end < s.size() && s[end] != ',') ++end;
    }
    std::string_view token = trim(s.substr(*i, end - *i));
    *i = end;
    if (token == "True") return Json(true);
    if (token == "False") return Json(false);
    if (token == "None") return Json(nullptr);
    return parse_json(token);
}

// "k=v, k2=v2" (the text between f.call's parentheses) -> a JSON object text.
std::optional<std::string> parse_python_kwargs(std::string_view s) {
    Json args = Json::object();
    size_t i = 0;
    while (true) {
        i += count_leading_space(s.substr(i));
        if (i == s.size()) break;
        size_t key_end = i;
        while (key_end < s.size() && is_ident_char(s[key_end])) ++key_end;
        if (key_end == i) return std::nullopt;
        std::string key(s.substr(i, key_end - i));
        i = key_end + count_leading_space(s.substr(key_end));
        if (i == s.size() || s[i] != '=') return std::nullopt;
        ++i;
        i += count_leading_space(s.substr(i));
        if (i == s.size()) return std::nullopt;
        auto value = parse_python_value(s, &i);
        if (!value) return std::nullopt;
        args[key] = std::move(*value);
        i += count_leading_space(s.substr(i));
        if (i == s.size()) break;
        if (s[i] != ',') return std::nullopt;
        ++i;
    }
    return dump(args);
}

// ---- parsers ----

// kNone: every byte is text, as it comes.
class PlainParser final : public FormatParser {
  public:
    bool in_construct() const override { return false; }

  protected:
    bool step(bool, Emitter& e) override {
        std::string_view r = rest();
        if (r.empty()) return false;
        e.text(r);
        consume(r.size());
        return true;
    }
    void restart() override {}
};

struct TagSpec {
    std::string_view open, close;
    ContentParser parse;
};

struct TaggedSpec {
    std::vector<TagSpec> tags;
    std::vector<std::string_view> removed;        // dropped wherever they appear
    std::vector<std::string_view> section_open;   // dropped when a call follows, else text
    std::vector<std::string_view> section_close;  // dropped right after a call, else text
    bool whole_answer_json = false;               // kGeneric: an answer that is one object
};

// Formats whose calls sit between an opening and a closing marker: Hermes, Qwen3-Coder,
// DeepSeek V3/V3.1, Command R7B, and the generic format (plus its whole-answer JSON).
class TaggedParser final : public FormatParser {
  public:
    explicit TaggedParser(TaggedSpec spec) : spec_(std::move(spec)) {
        for (size_t i = 0; i < spec_.tags.size(); ++i) {
            add_marker(spec_.tags[i].open, Kind::kOpen, i);
            opens_.push_back(spec_.tags[i].open);
        }
        for (auto m : spec_.removed) add_marker(m, Kind::kRemoved, 0);
        for (auto m : spec_.section_open) add_marker(m, Kind::kSectionOpen, 0);
        for (auto m : spec_.section_close) add_marker(m, Kind::kSectionClose, 0);
    }
    bool in_construct() const override { return state_ != State::kStart && state_ != State::kText; }

  protected:
    bool step(bool eof, Emitter& e) override {
        switch (state_) {
            case State::kStart:
                return step_start(e);
            case State::kText:
                return step_text(eof, e);
            case State::kTag:
                return step_tag(eof, e);
            case State::kAnswer:
                return step_answer(eof);
            case State::kAnswerEnd:
                return step_answer_end(eof, e);
        }
        return false;
    }
    void restart() override { state_ = State::kStart; }

  private:
    enum class State { kStart, kText, kTag, kAnswer, kAnswerEnd };
    enum class Kind { kOpen, kRemoved, kSectionOpen, kSectionClose };
    struct MarkerInfo {
        Kind kind;
        size_t tag;
    };

    void add_marker(std::string_view m, Kind kind, size_t tag) {
        markers_.push_back(m);
        info_.push_back({kind, tag});
    }

    bool step_start(Emitter& e) {
        std::string_view r = rest();
        size_t n = count_leading_space(r);
        if (n > 0) {  // held by the sink: dropped if a call comes first
            sink_.text(r.substr(0, n), e);
            consume(n);
            return true;
        }
        if (r.empty()) return false;
        if (spec_.whole_answer_json && r[0] == '{') {
            scanner_.reset();
            state_ = State::kAnswer;
        } else {
            state_ = State::kText;
        }
        return true;
    }

    bool step_text(bool eof, Emitter& e) {
        std::string_view r = rest();
        TextScan scan = scan_text(r, markers_, eof);
        if (scan.n_text > 0) {
            sink_.text(r.substr(0, scan.n_text), e);
            consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        std::string_view m = markers_[scan.marker];
        const MarkerInfo& info = info_[scan.marker];
        switch (info.kind) {
            case Kind::kOpen:
                tag_ = info.tag;
                search_from_ = 0;
                state_ = State::kTag;
                return true;
            case Kind::kRemoved:
                break;
            case Kind::kSectionOpen:
                sink_.markup(m);
                break;
            case Kind::kSectionClose:
                if (!sink_.after_call()) sink_.text(m, e);
                break;
        }
        consume(m.size());
        return true;
    }

    // rest() starts with the open marker of tags[tag_].
    bool step_tag(bool eof, Emitter& e) {
        const TagSpec& tag = spec_.tags[tag_];
        std::string_view r = rest();
        size_t from = std::max(tag.open.size(), search_from_);
        size_t close = r.find(tag.close, from);
        MarkerHit again = find_marker(r, opens_, from);
        if (again.pos < close) {  // a new call opened before this one closed: this one is text
            sink_.text(r.substr(0, again.pos), e);
            consume(again.pos);
            state_ = State::kText;
            return true;
        }
        if (close == npos && !eof) {
            size_t longest = tag.close.size();
            for (auto o : opens_) longest = std::max(longest, o.size());
            search_from_ = std::max(from, r.size() - std::min(r.size(), longest - 1));
            return false;
        }
        size_t end = close == npos ? r.size() : close + tag.close.size();
        size_t body_end = close == npos ? r.size() : close;
        std::string_view body = r.substr(tag.open.size(), body_end - tag.open.size());
        emit_calls_or_text(r.substr(0, end), body, tag.parse, e);
        consume(end);
        state_ = State::kText;
        return true;
    }

    void emit_calls_or_text(std::string_view verbatim, std::string_view body, ContentParser parse,
                            Emitter& e) {
        std::vector<ToolCall> calls;
        if (parse(body, &calls) && !calls.empty()) {
            for (auto& c : calls) sink_.call(std::move(c), e);
        } else {
            sink_.text(verbatim, e);
        }
    }

    bool step_answer(bool eof) {
        BracketScanner::State st = scanner_.feed(rest());
        if (st == BracketScanner::State::kOpen && !eof) return false;
        state_ = st == BracketScanner::State::kDone ? State::kAnswerEnd : State::kText;
        return true;
    }

    // The object is complete; it is the answer only if nothing but whitespace follows.
    bool step_answer_end(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t end = scanner_.end();
        if (count_leading_space(r.substr(end)) < r.size() - end) {
            state_ = State::kText;
            return true;
        }
        if (!eof) return false;
        state_ = State::kText;
        std::vector<ToolCall> calls;
        if (!parse_generic_answer(r.substr(0, end), &calls)) return true;
        for (auto& c : calls) sink_.call(std::move(c), e);
        consume(r.size());
        return true;
    }

    TaggedSpec spec_;
    std::vector<std::string_view> markers_;  // everything the text state looks for
    std::vector<MarkerInfo> info_;           // parallel to markers_
    std::vector<std::string_view> opens_;
    State state_ = State::kStart;
    size_t tag_ = 0;
    size_t search_from_ = 0;  // where the search for the close marker resumes
    BracketScanner scanner_;
};

constexpr std::string_view kToolCallOpen = "<tool_call>", kToolCallClose = "</tool_call>";

TaggedSpec hermes_spec() { return {{{kToolCallOpen, kToolCallClose, parse_json_calls}}}; }

TaggedSpec qwen3_coder_spec() {
    return {{{kToolCallOpen, kToolCallClose, parse_qwen3_coder_calls}}};
}

TaggedSpec generic_spec() {
    TaggedSpec s = hermes_spec();
    s.whole_answer_json = true;
    return s;
}

TaggedSpec deepseek_spec() {
    TaggedSpec s;
    s.tags = {{"<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", parse_deepseek_call}};
    s.section_open = {"<｜tool▁calls▁begin｜>"};
    s.section_close = {"<｜tool▁calls▁end｜>"};
    return s;
}

TaggedSpec command_r7b_spec(bool parse_tools) {
    TaggedSpec s;
    if (parse_tools) s.tags = {{"<|START_ACTION|>", "<|END_ACTION|>", parse_command_r7b_calls}};
    s.removed = {"<|START_RESPONSE|>", "<|END_RESPONSE|>"};
    return s;
}

// Llama 3.x: an answer that starts with a {"name", "parameters"} object; "<|python_tag|>"
// before an object or a built-in call f.call(k=v); calls separated by ';'.
class Llama3Parser final : public FormatParser {
  public:
    bool in_construct() const override { return state_ != State::kStart && state_ != State::kText; }

  protected:
    bool step(bool eof, Emitter& e) override {
        switch (state_) {
            case State::kStart:
                return step_start(e);
            case State::kText:
                return step_text(eof, e);
            case State::kTagged:
                return step_tagged(eof, e);
            case State::kJson:
                return step_json(eof, e);
            case State::kCall:
                return step_call(eof, e);
        }
        return false;
    }
    void restart() override { state_ = State::kStart; }

  private:
    enum class State { kStart, kText, kTagged, kJson, kCall };
    static constexpr std::string_view kTag = "<|python_tag|>";

    bool step_start(Emitter& e) {
        std::string_view r = rest();
        if (!r.empty() && r[0] == ';' && sink_.after_call()) {  // between two calls: dropped
            consume(1);
            return true;
        }
        size_t n = count_leading_space(r);
        if (n > 0) {
            sink_.text(r.substr(0, n), e);
            consume(n);
            return true;
        }
        if (r.empty()) return false;
        if (r[0] == '{') {
            begin_body(State::kJson, 0, 0);
        } else {
            state_ = State::kText;
        }
        return true;
    }

    bool step_text(bool eof, Emitter& e) {
        std::string_view r = rest();
        std::array<std::string_view, 1> markers = {kTag};
        TextScan scan = scan_text(r, markers, eof);
        if (scan.n_text > 0) {
            sink_.text(r.substr(0, scan.n_text), e);
            consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        state_ = State::kTagged;
        return true;
    }

    // rest() starts with the python tag: an object or NAME.call( must follow.
    bool step_tagged(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t i = kTag.size() + count_leading_space(r.substr(kTag.size()));
        if (i == r.size()) return eof ? fallback(e) : false;
        if (r[i] == '{') {
            begin_body(State::kJson, i, kTag.size());
            return true;
        }
        size_t j = i;
        while (j < r.size() && is_ident_char(r[j])) ++j;
        constexpr std::string_view kCall = ".call(";
        std::string_view tail = r.substr(j, kCall.size());
        if (j == i || tail != kCall.substr(0, tail.size())) return fallback(e);
        if (tail.size() < kCall.size()) return eof ? fallback(e) : false;
        name_ = std::string(r.substr(i, j - i));
        begin_body(State::kCall, j + kCall.size() - 1, kTag.size());
        return true;
    }

    void begin_body(State s, size_t body, size_t markup) {
        state_ = s;
        body_ = body;
        markup_ = markup;
        scanner_ = BracketScanner(/*python=*/s == State::kCall);
    }

    // Not a call after all: the markup is text, and what follows is read as text.
    bool fallback(Emitter& e) {
        size_t n = state_ == State::kTagged ? kTag.size() : markup_;
        sink_.text(rest().substr(0, n), e);
        consume(n);
        state_ = State::kText;
        return true;
    }

    bool step_json(bool eof, Emitter& e) {
        std::string_view r = rest();
        BracketScanner::State st = scanner_.feed(r.substr(body_));
        if (st == BracketScanner::State::kOpen && !eof) return false;
        if (st != BracketScanner::State::kDone) return fallback(e);
        size_t end = body_ + scanner_.end();
        std::optional<ToolCall> call;
        if (auto j = parse_json(r.substr(body_, end - body_))) {
            call = call_from_json(*j, /*need_args=*/true);
        }
        return finish_call(std::move(call), end, e);
    }

    bool step_call(bool eof, Emitter& e) {
        std::string_view r = rest();
        BracketScanner::State st = scanner_.feed(r.substr(body_));
        if (st == BracketScanner::State::kOpen && !eof) return false;
        if (st != BracketScanner::State::kDone) return fallback(e);
        size_t end = body_ + scanner_.end();
        std::optional<ToolCall> call;
        if (auto args = parse_python_kwargs(r.substr(body_ + 1, end - body_ - 2))) {
            call = ToolCall{name_, *args};
        }
        return finish_call(std::move(call), end, e);
    }

    bool finish_call(std::optional<ToolCall> call, size_t end, Emitter& e) {
        if (call) {
            sink_.call(std::move(*call), e);
            state_ = State::kStart;  // another call may follow after ';'
        } else {
            sink_.text(rest().substr(0, end), e);
            state_ = State::kText;
        }
        consume(end);
        return true;
    }

    State state_ = State::kStart;
    size_t body_ = 0;    // where the object or the '(' begins in rest()
    size_t markup_ = 0;  // bytes of markup before the body (the python tag)
    std::string name_;
    BracketScanner scanner_;
};

bool is_name_char(char c) { return is_ident_char(c) || c == '-' || c == '.'; }

// Mistral: [TOOL_CALLS][{...}, ...] and the v11 form [TOOL_CALLS]NAME[ARGS]{...}.
class MistralParser final : public FormatParser {
  public:
    bool in_construct() const override { return state_ != State::kText; }

  protected:
    bool step(bool eof, Emitter& e) override {
        switch (state_) {
            case State::kText:
                return step_text(eof, e);
            case State::kTagged:
                return step_tagged(eof, e);
            case State::kName:
                return step_name(eof, e);
            case State::kList:
            case State::kArgs:
                return step_body(eof, e);
        }
        return false;
    }
    void restart() override { state_ = State::kText; }

  private:
    enum class State { kText, kTagged, kName, kList, kArgs };
    static constexpr std::string_view kTag = "[TOOL_CALLS]", kArgsTag = "[ARGS]";
    static constexpr size_t kMaxName = 256;

    bool step_text(bool eof, Emitter& e) {
        std::string_view r = rest();
        std::array<std::string_view, 1> markers = {kTag};
        TextScan scan = scan_text(r, markers, eof);
        if (scan.n_text > 0) {
            sink_.text(r.substr(0, scan.n_text), e);
            consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        state_ = State::kTagged;
        return true;
    }

    bool step_tagged(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t i = kTag.size() + count_leading_space(r.substr(kTag.size()));
        if (i == r.size()) return eof ? fallback(e) : false;
        body_ = i;
        scanner_.reset();
        state_ = r[i] == '[' ? State::kList : State::kName;
        return true;
    }

    // body_ is where the name starts; it ends at [ARGS], after which the object begins.
    bool step_name(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t j = body_;
        while (j < r.size() && is_name_char(r[j])) ++j;
        if (j - body_ > kMaxName) return fallback(e);
        std::string_view tail = r.substr(j, kArgsTag.size());
        if (tail != kArgsTag.substr(0, tail.size())) return fallback(e);
        if (tail.size() < kArgsTag.size()) return eof ? fallback(e) : false;
        if (j == body_) return fallback(e);
        name_ = std::string(r.substr(body_, j - body_));
        body_ = j + kArgsTag.size();
        state_ = State::kArgs;
        return true;
    }

    bool step_body(bool eof, Emitter& e) {
        std::string_view r = rest();
        // The object may follow [ARGS] after whitespace; the scanner only starts at its '{'.
        size_t at = body_ + count_leading_space(r.substr(body_));
        if (at == r.size()) return eof ? fallback(e) : false;
        if (state_ == State::kArgs && r[at] != '{') return fallback(e);
        BracketScanner::State st = scanner_.feed(r.substr(at));
        if (st == BracketScanner::State::kOpen && !eof) return false;
        if (st != BracketScanner::State::kDone) return fallback(e);
        size_t end = at + scanner_.end();
        std::vector<ToolCall> calls;
        std::string_view body = r.substr(at, end - at);
        if (state_ == State::kArgs) {
            if (auto args = json_object_text(body)) calls.push_back(ToolCall{name_, *args});
        } else if (!parse_json_calls(body, &calls)) {  // body is a list: it starts with '['
            calls.clear();
        }
        if (calls.empty()) {
            sink_.text(r.substr(0, end), e);
        } else {
            for (auto& c : calls) sink_.call(std::move(c), e);
        }
        consume(end);
        state_ = State::kText;
        return true;
    }

    bool fallback(Emitter& e) {
        sink_.text(kTag, e);
        consume(kTag.size());
        state_ = State::kText;
        return true;
    }

    State state_ = State::kText;
    size_t body_ = 0;
    std::string name_;
    BracketScanner scanner_;
};

// Functionary v3.2: ">>>NAME\n{...}" calls and ">>>all\ntext"; the generation prompt ends
// with ">>>", so the first recipient comes without it.
class FunctionaryParser final : public FormatParser {
  public:
    explicit FunctionaryParser(bool parse_tools) : parse_tools_(parse_tools) {}
    bool in_construct() const override { return state_ != State::kText; }

  protected:
    bool step(bool eof, Emitter& e) override {
        switch (state_) {
            case State::kHeader:
                return step_header(eof, e);
            case State::kText:
                return step_text(eof, e);
            case State::kCall:
                return step_call(eof, e);
            case State::kPython:
                return step_python(eof, e);
        }
        return false;
    }
    void restart() override {
        state_ = State::kHeader;
        explicit_ = false;
    }

  private:
    enum class State { kHeader, kText, kCall, kPython };
    static constexpr std::string_view kTag = ">>>";
    static constexpr size_t kMaxName = 256;

    // rest() starts with the recipient (after ">>>" when explicit_).
    bool step_header(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t h = explicit_ ? kTag.size() : 0;
        size_t j = h;
        while (j < r.size() && is_ident_char(r[j])) ++j;
        if (j - h > kMaxName) return not_a_header(e);
        if (j == r.size()) return eof ? not_a_header(e) : false;
        if (j == h || r[j] != '\n') return not_a_header(e);
        std::string_view name = r.substr(h, j - h);
        if (name == "all") {
            consume(j + 1);
            state_ = State::kText;
            return true;
        }
        if (!parse_tools_) return not_a_header(e);
        size_t k = j + 1 + count_leading_space(r.substr(j + 1));
        if (k == r.size()) return eof ? not_a_header(e) : false;
        name_ = std::string(name);
        scanner_.reset();
        if (r[k] == '{') {
            body_ = k;
            state_ = State::kCall;
        } else if (name == "python") {  // raw code for the code interpreter
            body_ = j + 1;
            search_from_ = body_;
            state_ = State::kPython;
        } else {
            return not_a_header(e);
        }
        return true;
    }

    bool not_a_header(Emitter& e) {
        if (explicit_) {
            sink_.text(kTag, e);
            consume(kTag.size());
        }
        state_ = State::kText;
        return true;
    }

    bool step_text(bool eof, Emitter& e) {
        std::string_view r = rest();
        std::array<std::string_view, 1> markers = {kTag};
        TextScan scan = scan_text(r, markers, eof);
        if (scan.n_text > 0) {
            sink_.text(r.substr(0, scan.n_text), e);
            consume(scan.n_text);
            return true;
        }
        if (scan.marker < 0) return false;
        explicit_ = true;
        state_ = State::kHeader;
        return true;
    }

    bool step_call(bool eof, Emitter& e) {
        std::string_view r = rest();
        BracketScanner::State st = scanner_.feed(r.substr(body_));
        if (st == BracketScanner::State::kOpen && !eof) return false;
        std::optional<std::string> args;
        if (st == BracketScanner::State::kDone)
            args = json_object_text(r.substr(body_, scanner_.end()));
        if (!args) return not_a_header(e);
        sink_.call(ToolCall{name_, *args}, e);
        consume(body_ + scanner_.end());
        state_ = State::kText;
        return true;
    }

    // The code runs to the next ">>>" or the end of the stream.
    bool step_python(bool eof, Emitter& e) {
        std::string_view r = rest();
        size_t end = r.find(kTag, search_from_);
        if (end == npos) {
            if (!eof) {
                search_from_ = std::max(body_, r.size() - std::min(r.size(), kTag.size() - 1));
                return false;
            }
            end = r.size();
        }
        Json args = {{"code", std::string(r.substr(body_, end - body_))}};
        sink_.call(ToolCall{name_, dump(args)}, e);
        consume(end);
        state_ = State::kText;
        return true;
    }

    bool parse_tools_;
    State state_ = State::kHeader;
    bool explicit_ = false;  // the header began with ">>>"
    size_t body_ = 0;
    size_t search_from_ = 0;
    std::string name_;
    BracketScanner scanner_;
};

}  // namespace

std::optional<std::string> json_object_text(std::string_view text) {
    auto j = parse_json(text);
    if (!j || !j->is_object()) return std::nullopt;
    return dump(*j);
}

std::unique_ptr<FormatParser> make_format_parser(ToolCallFormat syntax, bool parse_tools,
                                                 bool split_reasoning) {
    using F = ToolCallFormat;
    switch (syntax) {  // families whose syntax matters even without tools
        case F::kHarmony:
            return make_harmony_parser(parse_tools, split_reasoning);
        case F::kFunctionaryV32:
            return std::make_unique<FunctionaryParser>(parse_tools);
        case F::kCommandR7B:
            return std::make_unique<TaggedParser>(command_r7b_spec(parse_tools));
        default:
            break;
    }
    if (!parse_tools) return std::make_unique<PlainParser>();
    switch (syntax) {
        case F::kHermes:
            return std::make_unique<TaggedParser>(hermes_spec());
        case F::kQwen3Coder:
            return std::make_unique<TaggedParser>(qwen3_coder_spec());
        case F::kLlama3:
            return std::make_unique<Llama3Parser>();
        case F::kMistral:
            return std::make_unique<MistralParser>();
        case F::kDeepSeekV3:
        case F::kDeepSeekV31:
            return std::make_unique<TaggedParser>(deepseek_spec());
        case F::kGeneric:
            return std::make_unique<TaggedParser>(generic_spec());
        default:
            return std::make_unique<PlainParser>();
    }
}

}  // namespace ferrox::output_detail

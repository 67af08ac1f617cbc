// Anthropic Messages: POST /v1/messages and /v1/messages/count_tokens. The request becomes
// the neutral Conversation; the answer's deltas become content blocks (thinking, text,
// tool_use) with Anthropic's event framing. Lenient where real clients (Claude Code) send
// what others refused: role "system" inside messages, thinking blocks in history, server tools
// without input_schema, unknown fields.
#include <algorithm>

#include "server/anthropic/anthropic.h"
#include "server/context.h"
#include "server/generation.h"
#include "server/request_fields.h"
#include "server/router.h"
#include "server/structured.h"
#include "server/workers.h"

namespace ferrox {

namespace {

void send(HttpResponder& res, const ApiError& e) { Router::send_error(res, Protocol::kAnthropic, e); }

// Claude Code's per-request billing line (x-anthropic-billing-header: ...cch=XXXXX;) changes
// on every request and would defeat the prefix cache; it means nothing to the model.
std::string strip_billing_lines(const std::string& text) {
    static const std::string kKey = "x-anthropic-billing-header:";
    if (text.find(kKey) == std::string::npos) return text;
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find('\n', i);
        const size_t end = j == std::string::npos ? text.size() : j + 1;
        if (text.compare(i, kKey.size(), kKey) != 0) out.append(text, i, end - i);
        i = end;
    }
    return out;
}

// Text of a block list; images inside tool results become a marker (the model reads text only).
bool blocks_text(const json& content, const std::string& where, bool images_ok, std::string* out, ApiError* err) {
    if (content.is_string()) {
        *out += content.get<std::string>();
        return true;
    }
    if (!content.is_array()) {
        *err = wrong_type(where, "a string or an array of content blocks", content);
        return false;
    }
    for (size_t k = 0; k < content.size(); ++k) {
        const std::string bw = where + "[" + std::to_string(k) + "]";
        const json& b = content[k];
        std::string type;
        if (!b.is_object()) {
            *err = wrong_type(bw, "an object", b);
            return false;
        }
        if (!Fields{b, bw + "."}.string("type", &type, err)) return false;
        if (type == "text") {
            std::string t;
            if (!Fields{b, bw + "."}.string("text", &t, err)) return false;
            if (!out->empty() && !t.empty()) *out += "\n";
            *out += t;
        } else if (type == "image" && images_ok) {
            *out += "[image]";
        } else {
            *err = bad_param(bw + ".type", "Content blocks of type '" + type + "' are not supported in '" + bw + "'.");
            return false;
        }
    }
    return true;
}

struct Parsed {
    Conversation conv;
    GenerationParams params;
    bool stream = false;
    std::string model;
    // The cache_control breakpoints: the index in conv.messages of the message each ends (the
    // system message for one on the system prompt or the tools) with its ttl in seconds, in
    // order; cache_upto is the last one's index (-1: none).
    std::vector<std::pair<int, double>> breakpoints;
    int cache_upto = -1;
};

// The longest cache_control ttl a request value (a message, a content block list, a tool list,
// the system prompt) carries, in seconds: 0 without one, 300 for "5m" (the default), 3600 for
// "1h"; -1 (and `err`) for another ttl.
double cache_control_ttl(const json& v, const std::string& where, ApiError* err) {
    double ttl = 0;
    const auto one = [&](const json& o) {
        const auto it = o.find("cache_control");
        if (it == o.end() || it->is_null()) return true;
        double t = 300;
        if (it->is_object()) {
            if (const auto tt = it->find("ttl"); tt != it->end() && !tt->is_null()) {
                if (tt->is_string() && *tt == "1h") t = 3600;
                else if (!(tt->is_string() && *tt == "5m")) {
                    *err = bad_param(where + ".cache_control.ttl", "cache_control.ttl: Input should be '5m' or '1h'");
                    return false;
                }
            }
        }
        ttl = std::max(ttl, t);
        return true;
    };
    if (v.is_object()) {
        if (!one(v)) return -1;
        if (const auto c = v.find("content"); c != v.end() && c->is_array()) {
            const double t = cache_control_ttl(*c, where + ".content", err);
            if (t < 0) return -1;
            ttl = std::max(ttl, t);
        }
    } else if (v.is_array()) {
        for (const json& b : v) {
            if (b.is_object() && !one(b)) return -1;
        }
    }
    return ttl;
}

bool parse_tools(const Fields& f, Conversation* conv, ApiError* err) {
    const json* tools = nullptr;
    if (!f.array("tools", &tools, err)) return false;
    if (tools) {
        for (size_t k = 0; k < tools->size(); ++k) {
            const std::string tw = "tools[" + std::to_string(k) + "]";
            const json& t = (*tools)[k];
            if (!t.is_object()) {
                *err = wrong_type(tw, "an object", t);
                return false;
            }
            const Fields tf{t, tw + "."};
            const json* schema = nullptr;
            if (!tf.object("input_schema", &schema, err)) return false;
            if (!schema) continue;  // server tools (web_search_*, bash_*, ...) run elsewhere
            ToolSpec spec;
            if (!tf.string("name", &spec.name, err) || !tf.string("description", &spec.description, err)) return false;
            if (spec.name.empty()) {
                *err = bad_param(tw + ".name", "Missing required parameter: '" + tw + ".name'.");
                return false;
            }
            spec.parameters = dump(*schema);
            conv->tools.push_back(std::move(spec));
        }
    }
    const json* tc = nullptr;
    if (!f.object("tool_choice", &tc, err)) return false;
    if (tc) {
        const Fields cf{*tc, "tool_choice."};
        std::string type, name;
        bool no_parallel = false;
        if (!cf.string("type", &type, err) || !cf.string("name", &name, err) ||
            !cf.boolean("disable_parallel_tool_use", &no_parallel, err))
            return false;
        conv->parallel_tool_calls = !no_parallel;
        if (type == "auto") {
            conv->tool_choice = ToolChoice::kAuto;
        } else if (type == "any") {
            conv->tool_choice = ToolChoice::kRequired;
        } else if (type == "none") {
            conv->tool_choice = ToolChoice::kNone;
        } else if (type == "tool") {
            const bool known = std::any_of(conv->tools.begin(), conv->tools.end(),
                                           [&](const ToolSpec& t) { return t.name == name; });
            if (!known) {
                *err = bad_param("tool_choice.name", "Invalid 'tool_choice': no tool named '" + name + "' in 'tools'.");
                return false;
            }
            conv->tool_choice = ToolChoice::kNamed;
            conv->tool_choice_name = name;
        } else {
            *err = bad_param("tool_choice.type", "Invalid 'tool_choice.type': '" + type +
                                                     "'. Expected 'auto', 'any', 'tool' or 'none'.");
            return false;
        }
    }
    return true;
}

bool parse_message(const json& m, const std::string& where, Conversation* conv, std::vector<std::string>* call_ids,
                   ApiError* err) {
    if (!m.is_object()) {
        *err = wrong_type(where, "an object", m);
        return false;
    }
    const Fields mf{m, where + "."};
    std::string role;
    if (!mf.string("role", &role, err)) return false;
    if (role == "ctx" || role == "msg") role = "user";  // as vLLM does
    if (role != "user" && role != "assistant" && role != "system") {
        *err = bad_param(where + ".role", "Invalid '" + where + ".role': '" + role + "'. Expected 'user' or 'assistant'.");
        return false;
    }
    const json* content = mf.find("content");
    if (!content) {
        *err = bad_param(where + ".content", "Missing required parameter: '" + where + ".content'.");
        return false;
    }
    ChatMessage msg;
    msg.role = role;
    if (content->is_string()) {
        msg.content = role == "system" ? strip_billing_lines(content->get<std::string>()) : content->get<std::string>();
        conv->messages.push_back(std::move(msg));
        return true;
    }
    if (!content->is_array()) {
        *err = wrong_type(where + ".content", "a string or an array of content blocks", *content);
        return false;
    }
    for (size_t k = 0; k < content->size(); ++k) {
        const std::string bw = where + ".content[" + std::to_string(k) + "]";
        const json& b = (*content)[k];
        if (!b.is_object()) {
            *err = wrong_type(bw, "an object", b);
            return false;
        }
        const Fields bf{b, bw + "."};
        std::string type;
        if (!bf.string("type", &type, err)) return false;
        if (type == "text") {
            std::string t;
            if (!bf.string("text", &t, err)) return false;
            if (role == "system") t = strip_billing_lines(t);
            msg.content += t;
        } else if (type == "thinking" && role == "assistant") {
            std::string t;
            if (!bf.string("thinking", &t, err)) return false;
            msg.reasoning += t;
        } else if (type == "redacted_thinking") {
            // Encrypted by Anthropic: nothing a local model can read.
        } else if (type == "tool_use" && role == "assistant") {
            ToolCall call;
            const json* input = nullptr;
            if (!bf.string("id", &call.id, err) || !bf.string("name", &call.name, err) ||
                !bf.object("input", &input, err))
                return false;
            call.arguments = input ? dump(*input) : "{}";
            call_ids->push_back(call.id);
            msg.tool_calls.push_back(std::move(call));
        } else if (type == "tool_result" && role == "user") {
            ChatMessage result;
            result.role = "tool";
            if (!bf.string("tool_use_id", &result.tool_call_id, err)) return false;
            if (std::find(call_ids->begin(), call_ids->end(), result.tool_call_id) == call_ids->end()) {
                *err = bad_param(bw + ".tool_use_id", "Invalid '" + bw + ".tool_use_id': '" + result.tool_call_id +
                                                          "' does not answer any tool_use block of an earlier assistant turn.");
                return false;
            }
            for (const ChatMessage& prev : conv->messages)
                for (const ToolCall& c : prev.tool_calls)
                    if (c.id == result.tool_call_id) result.name = c.name;
            if (const json* rc = bf.find("content")) {
                if (!blocks_text(*rc, bw + ".content", /*images_ok=*/true, &result.content, err)) return false;
            }
            // Results come first in a user turn; the turn's text follows them.
            conv->messages.push_back(std::move(result));
        } else if (type == "image" || type == "document") {
            *err = bad_param(bw + ".type", "'" + bw + "': " + type + " blocks are not supported: this model reads text only.");
            return false;
        } else if (type == "server_tool_use" || type == "web_search_tool_result" || type == "search_result" ||
                   type == "container_upload") {
            // Results of tools that ran on Anthropic's side: nothing to show a local model.
        } else {
            *err = bad_param(bw + ".type", "Unsupported content block type '" + type + "' in '" + bw + "'.");
            return false;
        }
    }
    if (!msg.content.empty() || !msg.tool_calls.empty() || !msg.reasoning.empty() || role != "user") {
        conv->messages.push_back(std::move(msg));
    }
    return true;
}

bool parse_request(const json& body, bool need_max_tokens, int default_max_tokens, const SamplingDefaults* defaults,
                   Parsed* out, ApiError* err) {
    const Fields f{body, ""};
    if (!f.string("model", &out->model, err)) return false;
    int64_t max_tokens = -1;
    if (!f.integer("max_tokens", 1, 1 << 24, &max_tokens, err)) return false;
    if (need_max_tokens && !f.find("max_tokens")) {
        *err = bad_param("max_tokens", "max_tokens: Field required");
        return false;
    }
    out->params.max_tokens = max_tokens > 0 ? static_cast<int>(max_tokens) : default_max_tokens;
    bool seeded = false;
    if (!read_sampling(f, SamplingLimits{.max_temperature = 1, .defaults = defaults}, &out->params, &seeded, err)) {
        return false;
    }
    if (!f.strings("stop_sequences", 16, &out->params.stop, err)) return false;
    if (!f.boolean("stream", &out->stream, err)) return false;
    Conversation& conv = out->conv;
    if (const json* sys = f.find("system")) {
        ChatMessage m;
        m.role = "system";
        if (!blocks_text(*sys, "system", false, &m.content, err)) return false;
        m.content = strip_billing_lines(m.content);
        if (!m.content.empty()) conv.messages.push_back(std::move(m));
    }
    const json* messages = nullptr;
    if (!f.array("messages", &messages, err)) return false;
    if (!messages || messages->empty()) {
        *err = bad_param("messages", "messages: at least one message is required");
        return false;
    }
    // Breakpoints by message, as indices before the leading system messages are merged (-1: the
    // system prompt or the tools), with their ttl.
    std::vector<std::pair<int, double>> breakpoints;
    for (const char* key : {"system", "tools"}) {
        if (const json* v = f.find(key)) {
            const double ttl = cache_control_ttl(*v, key, err);
            if (ttl < 0) return false;
            if (ttl > 0) breakpoints.push_back({-1, ttl});
        }
    }
    std::vector<std::string> call_ids;
    for (size_t i = 0; i < messages->size(); ++i) {
        const std::string where = "messages." + std::to_string(i);
        if (!parse_message((*messages)[i], where, &conv, &call_ids, err)) return false;
        const double ttl = cache_control_ttl((*messages)[i], where, err);
        if (ttl < 0) return false;
        if (ttl > 0 && !conv.messages.empty()) breakpoints.push_back({static_cast<int>(conv.messages.size()) - 1, ttl});
    }
    int n_leading = 0;
    while (n_leading < static_cast<int>(conv.messages.size()) && conv.messages[n_leading].role == "system") ++n_leading;
    // The leading system messages (the top-level system plus role:"system" entries before the
    // first other message) become one: most templates accept a single leading system message.
    // A system message later in the conversation (a hook's reminder) stays where it is, as
    // Anthropic keeps it, so the history before it stays a cached prefix (the prompt builder
    // folds it into a neighbouring turn where the template refuses it there).
    std::vector<ChatMessage> merged;
    std::string system;
    bool leading = true;
    for (ChatMessage& m : conv.messages) {
        if (m.role == "system" && leading) {
            system += (system.empty() ? "" : "\n\n") + m.content;
        } else {
            leading = leading && m.role == "system";
            merged.push_back(std::move(m));
        }
    }
    if (!system.empty()) merged.insert(merged.begin(), ChatMessage{.role = "system", .content = system});
    conv.messages = std::move(merged);
    const bool has_system = !conv.messages.empty() && conv.messages[0].role == "system";
    for (const auto& [index, ttl] : breakpoints) {
        const int at = index < n_leading ? (has_system ? 0 : -1) : index - n_leading + (has_system ? 1 : 0);
        if (at < 0) continue;  // tools alone, without a system prompt: nothing to end at
        if (!out->breakpoints.empty() && out->breakpoints.back().first >= at) {
            out->breakpoints.back().second = std::max(out->breakpoints.back().second, ttl);
            continue;
        }
        out->breakpoints.push_back({at, ttl});
    }
    if (!out->breakpoints.empty()) out->cache_upto = out->breakpoints.back().first;
    if (!parse_tools(f, &conv, err)) return false;
    const json* thinking = nullptr;
    if (!f.object("thinking", &thinking, err)) return false;
    if (thinking) {
        std::string type;
        if (!Fields{*thinking, "thinking."}.string("type", &type, err)) return false;
        conv.template_kwargs = dump(json{{"enable_thinking", type != "disabled"}});
    }
    return true;
}

class MessagesSink final : public GenerationSink {
  public:
    MessagesSink(ModelLease model, bool stream, int n_prompt)
        : model_(std::move(model)), stream_(stream), n_prompt_(n_prompt), id_(random_id("msg_")) {}
    // Prompt tokens up to the request's last cache_control breakpoint.
    void set_cache_breakpoint(int n_tokens) { cache_upto_ = n_tokens; }

    void start(HttpResponder& res) override {
        if (!stream_) return;
        res.start_stream(200);
        json msg = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_->info().id},
                    {"content", json::array()}, {"stop_reason", nullptr}, {"stop_sequence", nullptr},
                    {"usage", {{"input_tokens", n_prompt_}, {"output_tokens", 0}}}};
        event(res, "message_start", {{"type", "message_start"}, {"message", msg}});
    }

    void delta(HttpResponder& res, int, const ChatDelta& d, std::span<const TokenLogprob>) override {
        switch (d.kind) {
            case ChatDelta::Kind::kText:
                if (d.text.empty()) return;
                open(res, "text");
                blocks_.back()["text"] = blocks_.back()["text"].get<std::string>() + d.text;
                event(res, "content_block_delta", {{"type", "content_block_delta"}, {"index", index()},
                                                   {"delta", {{"type", "text_delta"}, {"text", d.text}}}});
                return;
            case ChatDelta::Kind::kReasoning:
                if (d.text.empty()) return;
                open(res, "thinking");
                blocks_.back()["thinking"] = blocks_.back()["thinking"].get<std::string>() + d.text;
                event(res, "content_block_delta", {{"type", "content_block_delta"}, {"index", index()},
                                                   {"delta", {{"type", "thinking_delta"}, {"thinking", d.text}}}});
                return;
            case ChatDelta::Kind::kToolCall: {
                close(res);
                json input = json::parse(d.arguments, nullptr, false);
                if (!input.is_object()) input = json::object();
                json block = {{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", d.name}, {"input", input}};
                blocks_.push_back(block);
                if (stream_) {
                    json start = block;
                    start["input"] = json::object();  // the arguments come as input_json_delta
                    event(res, "content_block_start", {{"type", "content_block_start"}, {"index", index()},
                                                       {"content_block", start}});
                    event(res, "content_block_delta",
                          {{"type", "content_block_delta"}, {"index", index()},
                           {"delta", {{"type", "input_json_delta"}, {"partial_json", dump(input)}}}});
                    event(res, "content_block_stop", {{"type", "content_block_stop"}, {"index", index()}});
                }
                open_ = false;
                return;
            }
        }
    }

    void choice_end(HttpResponder&, int, const ChoiceEnd& end) override { end_ = end; }

    void progress(HttpResponder& res) override {
        if (stream_) event(res, "ping", {{"type", "ping"}});
    }

    void finish(HttpResponder& res, const Usage& u) override {
        std::string stop_reason = "end_turn";
        json stop_sequence = nullptr;
        if (end_.tool_calls) {
            stop_reason = "tool_use";
        } else if (end_.finish == FinishReason::kLength) {
            stop_reason = "max_tokens";
        } else if (!end_.stop_word.empty()) {
            stop_reason = "stop_sequence";
            stop_sequence = end_.stop_word;
        }
        // Anthropic's accounting: with a cache_control breakpoint, the prompt up to the last one is
        // read from the cache (the prefix cache's hit, up to there) or written to it this turn;
        // input_tokens is the rest. Without one, both cache fields are 0.
        const int upto = std::min(cache_upto_, u.n_prompt);
        const int read = upto > 0 ? std::min(u.n_cached, upto) : 0;
        const int created = upto > 0 ? upto - read : 0;
        json usage = {{"input_tokens", u.n_prompt - read - created},
                      {"output_tokens", u.n_completion},
                      {"cache_creation_input_tokens", created},
                      {"cache_read_input_tokens", read}};
        if (stream_) {
            close(res);
            event(res, "message_delta", {{"type", "message_delta"},
                                         {"delta", {{"stop_reason", stop_reason}, {"stop_sequence", stop_sequence}}},
                                         {"usage", usage}});
            event(res, "message_stop", {{"type", "message_stop"}});
            res.end();
            return;
        }
        for (auto& b : blocks_) {
            if (b["type"] == "thinking") b["signature"] = signature();
        }
        json out = {{"id", id_}, {"type", "message"}, {"role", "assistant"}, {"model", model_->info().id},
                    {"content", blocks_}, {"stop_reason", stop_reason}, {"stop_sequence", stop_sequence},
                    {"usage", usage}};
        res.send(200, dump(out));
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !stream_) {
            send(res, e);
            return;
        }
        res.write(sse_event(error_body(Protocol::kAnthropic, e), "error"));
        res.end();
    }

  private:
    int index() const { return static_cast<int>(blocks_.size()) - 1; }

    // Local servers invent the signature (vLLM: a uuid4 hex); clients only require one.
    static std::string signature() { return random_id("ferrox-sig-"); }

    void event(HttpResponder& res, const char* name, const json& data) {
        if (stream_) res.write(sse_event(dump(data), name));
    }

    // Makes the open block one of `type` ("text" or "thinking"), closing another first.
    void open(HttpResponder& res, const char* type) {
        if (open_ && blocks_.back()["type"] == type) return;
        close(res);
        json block = {{"type", type}};
        block[std::string(type) == "text" ? "text" : "thinking"] = "";
        blocks_.push_back(block);
        open_ = true;
        json start = block;
        if (std::string(type) == "thinking") start["signature"] = "";
        event(res, "content_block_start", {{"type", "content_block_start"}, {"index", index()}, {"content_block", start}});
    }

    void close(HttpResponder& res) {
        if (!open_) return;
        if (blocks_.back()["type"] == "thinking") {
            event(res, "content_block_delta", {{"type", "content_block_delta"}, {"index", index()},
                                               {"delta", {{"type", "signature_delta"}, {"signature", signature()}}}});
        }
        event(res, "content_block_stop", {{"type", "content_block_stop"}, {"index", index()}});
        open_ = false;
    }

    ModelLease model_;
    bool stream_;
    int n_prompt_;
    int cache_upto_ = 0;  // prompt tokens up to the last cache_control breakpoint (0: none)
    std::string id_;
    json blocks_ = json::array();
    bool open_ = false;  // the last block takes more deltas
    ChoiceEnd end_;
};

void route_messages(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    Parsed p;
    ApiError err;
    if (!parse_request(req.body, true, ctx.opts.default_max_tokens, &ctx.opts.sampling, &p, &err)) return send(*res, err);
    GenerationJob job;
    if (!ctx.acquire(p.model, &job.model, &err)) return send(*res, err);
    auto prompt = job.model->prompt().build(p.conv);
    if (!prompt.has_value()) return send(*res, from_status(prompt.status(), "messages"));
    if (prompt->tokens.empty()) return send(*res, bad_param("messages", "The prompt is empty after tokenization."));
    job.prompt = std::move(prompt->tokens);
    job.params = std::move(p.params);
    job.params.render_special = prompt->special_markup;
    job.output = prompt->output;
    job.stream = p.stream;
    job.fingerprint = fingerprint_of(p.conv);
    // Output constraints: a forced tool call (tool_choice any / tool) wins over output_format.
    if (!read_anthropic_constraint(Fields{req.body, ""}, &job.params.grammar, &err) ||
        !forced_tool_call_constraint(p.conv, job.output->tools, "tool_choice", &job.params.grammar, &err)) {
        return send(*res, err);
    }
    const int n_prompt = static_cast<int>(job.prompt.size());
    auto sink = std::make_unique<MessagesSink>(job.model, job.stream, n_prompt);
    // Each breakpoint's position: the conversation up to it, rendered alone. The prompt up to
    // each stays cached for its ttl (pinned), and usage counts up to the last.
    for (const auto& [index, ttl] : p.breakpoints) {
        Conversation upto = p.conv;
        upto.messages.resize(static_cast<size_t>(index) + 1);
        if (auto text = job.model->prompt().render(upto, /*add_generation_prompt=*/false); text.has_value()) {
            const int n = std::min(n_prompt, static_cast<int>(job.model->prompt().tokenize(*text).size()));
            job.params.cache_pins.push_back({.n_tokens = n, .ttl_s = ttl});
            if (index == p.cache_upto) sink->set_cache_breakpoint(n);
        }
    }
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

void route_count_tokens(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    Parsed p;
    ApiError err;
    if (!parse_request(req.body, false, -1, nullptr, &p, &err)) return send(*res, err);
    ModelLease m;
    if (!ctx.acquire(p.model, &m, &err)) return send(*res, err);
    auto prompt = m->prompt().build(p.conv);
    if (!prompt.has_value()) return send(*res, from_status(prompt.status(), "messages"));
    res->send(200, dump(json{{"input_tokens", prompt->tokens.size()}}));
}

}  // namespace

void add_anthropic_routes(Router& router, ServerContext& ctx) {
    router.add({.method = "POST",
                .path = "/v1/messages",
                .protocol = Protocol::kAnthropic,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    route_messages(ctx, req, std::move(res));
                },
                .json_body = true});
    router.add({.method = "POST",
                .path = "/v1/messages/count_tokens",
                .protocol = Protocol::kAnthropic,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    route_count_tokens(ctx, req, std::move(res));
                },
                .json_body = true});
}

}  // namespace ferrox

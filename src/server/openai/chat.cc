// OpenAI Chat Completions: POST /v1/chat/completions (and /chat/completions).
#include <algorithm>
#include <random>

#include "server/context.h"
#include "server/generation.h"
#include "server/json_body.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"
#include "server/structured.h"
#include "server/workers.h"

namespace ferrox {

namespace {

constexpr const char* kFingerprint = "fp_ferrox_0_1";

bool parse_content(const json& content, const std::string& where, std::string* out, ApiError* err) {
    if (content.is_string()) {
        *out = content.get<std::string>();
        return true;
    }
    if (!content.is_array()) {
        *err = wrong_type(where, "a string or an array of content parts", content);
        return false;
    }
    for (size_t k = 0; k < content.size(); ++k) {
        const json& part = content[k];
        const std::string pw = where + "[" + std::to_string(k) + "]";
        if (!part.is_object()) {
            *err = wrong_type(pw, "an object", part);
            return false;
        }
        std::string type;
        if (!Fields{part, pw + "."}.string("type", &type, err)) return false;
        if (type == "image_url" || type == "input_image" || type == "input_audio" || type == "file") {
            *err = bad_param(pw, "'" + pw + "': content of type '" + type + "' is not supported: this model reads text only.");
            return false;
        }
        if (type != "text" && type != "input_text" && type != "output_text" && type != "refusal") {
            *err = bad_param(pw + ".type", "Unsupported content part type '" + type + "' in '" + pw +
                                               "': expected 'text'.");
            return false;
        }
        const char* key = type == "refusal" ? "refusal" : "text";
        std::string text;
        const json* t = Fields{part, pw + "."}.find(key);
        if (!t || !t->is_string()) {
            *err = bad_param(pw + "." + key, "Missing or invalid '" + pw + "." + key + "': expected a string.");
            return false;
        }
        *out += t->get<std::string>();
    }
    return true;
}

bool parse_tool_calls(const json& tc, const std::string& where, std::vector<ToolCall>* out, ApiError* err) {
    if (!tc.is_array()) {
        *err = wrong_type(where, "an array", tc);
        return false;
    }
    for (size_t k = 0; k < tc.size(); ++k) {
        const std::string cw = where + "[" + std::to_string(k) + "]";
        const json& c = tc[k];
        if (!c.is_object()) {
            *err = wrong_type(cw, "an object", c);
            return false;
        }
        ToolCall call;
        const json* fn = nullptr;
        if (!Fields{c, cw + "."}.string("id", &call.id, err) || !Fields{c, cw + "."}.object("function", &fn, err))
            return false;
        if (!fn) {
            *err = bad_param(cw + ".function", "Missing required parameter: '" + cw + ".function'.");
            return false;
        }
        const Fields ff{*fn, cw + ".function."};
        if (!ff.string("name", &call.name, err)) return false;
        if (call.name.empty()) {
            *err = bad_param(ff.name("name"), "Missing required parameter: '" + ff.name("name") + "'.");
            return false;
        }
        const json* args = ff.find("arguments");
        if (!args) {
            call.arguments = "{}";
        } else if (args->is_object()) {
            call.arguments = dump(*args);  // lenient: some clients send the object itself
        } else if (args->is_string()) {
            // JSON inside a string escapes the body's depth scan: the template copies it recursively.
            const std::string& text = args->get_ref<const std::string&>();
            json parsed = json_nesting_depth(text) > kMaxJsonDepth ? json() : json::parse(text, nullptr, false);
            if (parsed.is_discarded() || !parsed.is_object()) {
                *err = bad_param(ff.name("arguments"), "Invalid '" + ff.name("arguments") +
                                                           "': expected a JSON object encoded as a string.");
                return false;
            }
            call.arguments = args->get<std::string>();
        } else {
            *err = wrong_type(ff.name("arguments"), "a string", *args);
            return false;
        }
        out->push_back(std::move(call));
    }
    return true;
}

bool parse_tools(const json& body, Conversation* conv, ApiError* err) {
    const Fields f{body, ""};
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
            std::string type = "function";
            if (!Fields{t, tw + "."}.string("type", &type, err)) return false;
            if (type != "function") continue;  // custom and server tools never reach the prompt
            const json* fn = nullptr;
            if (!Fields{t, tw + "."}.object("function", &fn, err)) return false;
            if (!fn) {
                *err = bad_param(tw + ".function", "Missing required parameter: '" + tw + ".function'.");
                return false;
            }
            const Fields ff{*fn, tw + ".function."};
            ToolSpec spec;
            const json* params = nullptr;
            if (!ff.string("name", &spec.name, err) || !ff.string("description", &spec.description, err) ||
                !ff.object("parameters", &params, err))
                return false;
            if (spec.name.empty()) {
                *err = bad_param(ff.name("name"), "Missing required parameter: '" + ff.name("name") + "'.");
                return false;
            }
            spec.parameters = params ? dump(*params) : "{}";
            conv->tools.push_back(std::move(spec));
        }
    }
    if (const json* tc = f.find("tool_choice")) {
        if (tc->is_string()) {
            const std::string s = tc->get<std::string>();
            if (s == "none") {
                conv->tool_choice = ToolChoice::kNone;
            } else if (s == "auto") {
                conv->tool_choice = ToolChoice::kAuto;
            } else if (s == "required") {
                conv->tool_choice = ToolChoice::kRequired;
            } else {
                *err = bad_param("tool_choice", "Invalid value for 'tool_choice': '" + s +
                                                    "'. Supported values are: 'none', 'auto' and 'required'.");
                return false;
            }
        } else if (tc->is_object()) {
            const json* fn = nullptr;
            std::string name;
            if (!Fields{*tc, "tool_choice."}.object("function", &fn, err)) return false;
            if (fn && !Fields{*fn, "tool_choice.function."}.string("name", &name, err)) return false;
            if (name.empty()) {
                *err = bad_param("tool_choice", "Invalid 'tool_choice': expected {\"type\": \"function\", \"function\": {\"name\": ...}}.");
                return false;
            }
            const bool known = std::any_of(conv->tools.begin(), conv->tools.end(),
                                           [&](const ToolSpec& t) { return t.name == name; });
            if (!known) {
                *err = bad_param("tool_choice", "Invalid 'tool_choice': no tool named '" + name + "' in 'tools'.");
                return false;
            }
            conv->tool_choice = ToolChoice::kNamed;
            conv->tool_choice_name = name;
        } else {
            *err = wrong_type("tool_choice", "a string or an object", *tc);
            return false;
        }
    }
    if (!f.boolean("parallel_tool_calls", &conv->parallel_tool_calls, err)) return false;
    const json* kwargs = nullptr;
    if (!f.object("chat_template_kwargs", &kwargs, err)) return false;
    if (kwargs) conv->template_kwargs = dump(*kwargs);
    return true;
}

}  // namespace

std::string openai_call_id() { return random_id("call_"); }

// vLLM's continue_final_message and add_generation_prompt. A trailing assistant message is
// continued whatever they say (llama-server's prefill); continue_final_message true insists on
// one, and with add_generation_prompt true too is a 400, as in vLLM (a continued turn opens no
// new one). add_generation_prompt false ends the prompt right after the last message.
bool parse_continuation(const Fields& f, Conversation* conv, ApiError* err) {
    bool cont = false, gen = true;
    if (!f.boolean("continue_final_message", &cont, err) || !f.boolean("add_generation_prompt", &gen, err)) {
        return false;
    }
    if (cont && gen && f.find("add_generation_prompt")) {
        *err = bad_param("continue_final_message",
                         "'continue_final_message' and 'add_generation_prompt' cannot both be true: a continued "
                         "final message opens no new turn.");
        return false;
    }
    if (cont && conv->messages.back().role != "assistant") {
        *err = bad_param("continue_final_message",
                         "'continue_final_message' needs a final assistant message to continue.");
        return false;
    }
    conv->add_generation_prompt = gen;
    return true;
}

bool parse_openai_conversation(const json& body, Conversation* conv, ApiError* err) {
    const Fields f{body, ""};
    const json* messages = nullptr;
    if (!f.array("messages", &messages, err)) return false;
    if (!messages) {
        *err = bad_param("messages", "Missing required parameter: 'messages'.");
        return false;
    }
    if (messages->empty()) {
        *err = bad_param("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1.");
        return false;
    }
    std::vector<std::string> call_ids;  // of earlier assistant turns, for tool results
    for (size_t i = 0; i < messages->size(); ++i) {
        const json& m = (*messages)[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) {
            *err = wrong_type(where, "an object", m);
            return false;
        }
        const Fields mf{m, where + "."};
        ChatMessage msg;
        if (!mf.string("role", &msg.role, err)) return false;
        if (msg.role == "developer") msg.role = "system";
        if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
            *err = bad_param(where + ".role", "Invalid value for '" + where + ".role': '" + msg.role +
                                                  "'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.");
            return false;
        }
        const json* content = mf.find("content");
        if (!content) {
            if (msg.role != "assistant") {
                *err = bad_param(where + ".content", "Missing required parameter: '" + where + ".content'.");
                return false;
            }
        } else if (!parse_content(*content, where + ".content", &msg.content, err)) {
            return false;
        }
        if (const json* tc = mf.find("tool_calls"); tc && msg.role == "assistant") {
            if (!parse_tool_calls(*tc, where + ".tool_calls", &msg.tool_calls, err)) return false;
            for (const ToolCall& c : msg.tool_calls) call_ids.push_back(c.id);
        }
        if (!mf.string("name", &msg.name, err)) return false;
        if (msg.role == "assistant") {
            // Both names are accepted: clients disagree (see PROTOCOLS.md, "Where reasoning goes").
            if (!mf.string("reasoning_content", &msg.reasoning, err)) return false;
            if (msg.reasoning.empty() && !mf.string("reasoning", &msg.reasoning, err)) return false;
        }
        if (msg.role == "tool") {
            if (!mf.string("tool_call_id", &msg.tool_call_id, err)) return false;
            if (msg.tool_call_id.empty()) {
                *err = bad_param(where + ".tool_call_id", "Missing required parameter: '" + where + ".tool_call_id'.");
                return false;
            }
            if (std::find(call_ids.begin(), call_ids.end(), msg.tool_call_id) == call_ids.end()) {
                *err = bad_param(where + ".tool_call_id",
                                 "Invalid '" + where + ".tool_call_id': '" + msg.tool_call_id +
                                     "' does not answer any tool call of an earlier assistant message.");
                return false;
            }
            // The name of the function, for templates that print it.
            if (msg.name.empty()) {
                for (const ChatMessage& prev : conv->messages)
                    for (const ToolCall& c : prev.tool_calls)
                        if (c.id == msg.tool_call_id) msg.name = c.name;
            }
        }
        conv->messages.push_back(std::move(msg));
    }
    return parse_tools(body, conv, err) && parse_continuation(f, conv, err);
}

namespace {

// Choice-by-choice state of one chat answer, and its two wire forms (one JSON or chunks).
class ChatSink final : public GenerationSink {
  public:
    ChatSink(ModelLease model, const ApiServerOptions& opts, int n, bool stream, bool include_usage,
             bool logprobs, bool prompt_logprobs)
        : model_(std::move(model)), opts_(opts), stream_(stream), include_usage_(include_usage),
          logprobs_(logprobs), prompt_logprobs_(prompt_logprobs), choices_(n) {
        id_ = random_id("chatcmpl-");
        created_ = unix_now();
        if (prompt_logprobs_) prompt_lp_ = json::array({nullptr});  // vLLM: the first token has none
    }

    // vLLM's prompt_logprobs: one top-level list for the prompt all choices share (choice 0's),
    // each entry {token_id: {logprob, rank, decoded_token}} for the token and its alternatives.
    void prompt_logprobs(HttpResponder&, int i, std::span<const TokenLogprob> lps) override {
        if (!prompt_logprobs_ || i != 0) return;
        for (const TokenLogprob& t : lps) prompt_lp_.push_back(vllm_prompt_logprob(t, *model_));
    }

    void start(HttpResponder& res) override {
        if (!stream_) return;
        res.start_stream(200);
        for (size_t i = 0; i < choices_.size(); ++i) {
            write_chunk(res, i, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
        }
    }

    void delta(HttpResponder& res, int i, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        Choice& ch = choices_[i];
        json lp = nullptr;
        if (logprobs_ && !lps.empty()) {
            lp = json::array();
            for (const TokenLogprob& t : lps) lp.push_back(logprob_entry(t));
            if (!stream_) for (auto& e : lp) ch.logprobs.push_back(e);
        }
        if (d.kind == ChatDelta::Kind::kText && !d.text.empty() && lp.is_null()) {
            ch.text += d.text;
            if (!stream_) return;
            if (text_chunks_.size() <= static_cast<size_t>(i)) text_chunks_.resize(i + 1);
            ChunkTemplate& t = text_chunks_[i];
            if (t.empty()) t = ChunkTemplate(chunk(i, {{"content", ChunkTemplate::marker()}}, nullptr, nullptr));
            res.write(t.render(d.text));
            return;
        }
        json delta = json::object();
        switch (d.kind) {
            case ChatDelta::Kind::kText:
                ch.text += d.text;
                if (!d.text.empty() || !lp.is_null()) delta["content"] = d.text;
                break;
            case ChatDelta::Kind::kReasoning:
                ch.reasoning += d.text;
                put_reasoning(delta, d.text);
                break;
            case ChatDelta::Kind::kToolCall: {
                json call = {{"id", openai_call_id()}, {"type", "function"},
                             {"function", {{"name", d.name}, {"arguments", d.arguments}}}};
                json streamed = call;
                streamed["index"] = static_cast<int>(ch.tool_calls.size());
                ch.tool_calls.push_back(std::move(call));
                delta["tool_calls"] = json::array({streamed});
                break;
            }
        }
        if (stream_ && (!delta.empty() || !lp.is_null())) write_chunk(res, i, delta, lp, nullptr);
    }

    void choice_end(HttpResponder& res, int i, const ChoiceEnd& end) override {
        Choice& ch = choices_[i];
        ch.finish = end.tool_calls ? "tool_calls" : end.finish == FinishReason::kLength ? "length" : "stop";
        if (stream_ && end.finish != FinishReason::kCancelled && end.finish != FinishReason::kError) {
            write_chunk(res, i, json::object(), nullptr, ch.finish.c_str());
        }
    }

    void progress(HttpResponder& res) override {
        if (stream_) res.write(": keep-alive\n\n");
    }

    void finish(HttpResponder& res, const Usage& usage) override {
        if (stream_) {
            if (include_usage_) {
                json c = chunk_base();
                c["choices"] = json::array();
                c["usage"] = usage_json(usage);
                res.write(sse_event(dump(c)));
            }
            res.write("data: [DONE]\n\n");
            res.end();
            return;
        }
        json arr = json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
            const Choice& ch = choices_[i];
            json msg = {{"role", "assistant"}};
            msg["content"] = ch.text.empty() && !ch.tool_calls.empty() ? json(nullptr) : json(ch.text);
            if (!ch.reasoning.empty()) put_reasoning(msg, ch.reasoning);
            if (!ch.tool_calls.empty()) msg["tool_calls"] = ch.tool_calls;
            json c = {{"index", i}, {"message", msg}};
            c["logprobs"] = logprobs_ ? json{{"content", ch.logprobs}} : json(nullptr);
            c["finish_reason"] = ch.finish;
            arr.push_back(c);
        }
        json out = {{"id", id_}, {"object", "chat.completion"}, {"created", created_},
                    {"model", model_->info().id}, {"system_fingerprint", kFingerprint}};
        out["choices"] = arr;
        out["usage"] = usage_json(usage);
        if (prompt_logprobs_) out["prompt_logprobs"] = prompt_lp_;
        res.send(200, dump(out));
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !stream_) {
            Router::send_error(res, Protocol::kOpenAI, e);
            return;
        }
        res.write(sse_event(error_body(Protocol::kOpenAI, e)));
        res.write("data: [DONE]\n\n");
        res.end();
    }

  private:
    struct Choice {
        std::string text, reasoning, finish;
        json tool_calls = json::array();
        json logprobs = json::array();
    };

    void put_reasoning(json& obj, const std::string& text) const {
        if (opts_.reasoning_field != ReasoningField::kReasoning) obj["reasoning_content"] = text;
        if (opts_.reasoning_field != ReasoningField::kReasoningContent) obj["reasoning"] = text;
    }

    json chunk_base() const {
        return json{{"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_},
                    {"model", model_->info().id}, {"system_fingerprint", kFingerprint}};
    }

    json chunk(size_t i, const json& delta, const json& lp, const char* finish) const {
        json c = chunk_base();
        json choice = {{"index", i}, {"delta", delta}};
        choice["logprobs"] = lp.is_null() ? json(nullptr) : json{{"content", lp}};
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        c["choices"] = json::array({choice});
        return c;
    }

    void write_chunk(HttpResponder& res, size_t i, const json& delta, const json& lp, const char* finish) {
        res.write(sse_event(dump(chunk(i, delta, lp, finish))));
    }

    json logprob_entry(const TokenLogprob& lp) const {
        auto entry = [&](int32_t id, float l) {
            const std::string piece = model_->token_piece(id);
            json bytes = json::array();
            for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
            return json{{"token", piece}, {"logprob", l}, {"bytes", bytes}};
        };
        json e = entry(lp.token, lp.logprob);
        json top = json::array();
        for (const auto& [id, l] : lp.top) top.push_back(entry(id, l));
        e["top_logprobs"] = top;
        return e;
    }

    static json usage_json(const Usage& u) {
        return json{{"prompt_tokens", u.n_prompt},
                    {"completion_tokens", u.n_completion},
                    {"total_tokens", u.n_prompt + u.n_completion},
                    {"prompt_tokens_details", {{"cached_tokens", u.n_cached}}},
                    {"completion_tokens_details", {{"reasoning_tokens", u.n_reasoning}}}};
    }

    ModelLease model_;
    const ApiServerOptions& opts_;
    bool stream_, include_usage_, logprobs_, prompt_logprobs_;
    json prompt_lp_;  // with prompt_logprobs: null, then one object per prompt token
    std::string id_;
    int64_t created_ = 0;
    std::vector<Choice> choices_;
    std::vector<ChunkTemplate> text_chunks_;  // per choice: the chunk of a text delta alone
};

void route_chat(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const json& body = req.body;
    const Fields f{body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kOpenAI, e); };
    GenerationJob job;
    bool include_usage = false;
    if (!read_openai_job(ctx, f, /*chat=*/true, &job, &include_usage, &err)) return fail(err);
    bool logprobs = false;
    int64_t top_logprobs = 0;
    if (!f.boolean("logprobs", &logprobs, &err) || !f.integer("top_logprobs", 0, 20, &top_logprobs, &err))
        return fail(err);
    if (f.find("top_logprobs") && !logprobs) {
        return fail(bad_param("top_logprobs", "'top_logprobs' requires 'logprobs' to be true."));
    }
    job.params.top_logprobs = logprobs ? static_cast<int>(top_logprobs) : -1;
    // vLLM's prompt_logprobs: each prompt token's logprob and that many alternatives, in a
    // top-level list of the (non-streamed) response; vLLM refuses it with stream.
    int64_t prompt_lp = -1;
    if (!f.integer("prompt_logprobs", 0, 20, &prompt_lp, &err)) return fail(err);
    const bool want_prompt_lp = f.find("prompt_logprobs") != nullptr;
    if (want_prompt_lp && job.stream) {
        return fail(bad_param("prompt_logprobs", "'prompt_logprobs' are not available when 'stream' is true."));
    }
    if (want_prompt_lp) job.params.prompt_logprobs = static_cast<int>(prompt_lp);

    Conversation conv;
    if (!parse_openai_conversation(body, &conv, &err)) return fail(err);
    auto prompt = job.model->prompt().build(conv);
    if (!prompt.has_value()) return fail(from_status(prompt.status(), "messages"));
    if (prompt->tokens.empty()) return fail(bad_param("messages", "The prompt is empty after tokenization."));
    job.prompt = std::move(prompt->tokens);
    job.output = prompt->output;
    job.params.render_special = prompt->special_markup;
    job.prompt_param = "messages";
    job.fingerprint = fingerprint_of(conv);
    // Output constraints: a forced tool call wins over response_format.
    if (!read_openai_constraint(f, &job.params.grammar, &err) ||
        !forced_tool_call_constraint(conv, job.output->tools, "tool_choice", &job.params.grammar, &err)) {
        return fail(err);
    }
    auto sink =
        std::make_unique<ChatSink>(job.model, ctx.opts, job.n, job.stream, include_usage, logprobs, want_prompt_lp);
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

}  // namespace

void add_chat_routes(Router& router, ServerContext& ctx) {
    for (const char* path : {"/v1/chat/completions", "/chat/completions"}) {
        router.add({.method = "POST",
                    .path = path,
                    .protocol = Protocol::kOpenAI,
                    .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        route_chat(ctx, req, std::move(res));
                    },
                    .json_body = true});
    }
}

}  // namespace ferrox

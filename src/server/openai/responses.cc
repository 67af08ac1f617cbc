// OpenAI Responses: POST /v1/responses, GET and DELETE /v1/responses/{id},
// GET /v1/responses/{id}/input_items, POST /v1/responses/{id}/cancel. Input items become the
// neutral Conversation; the answer's deltas become output items (reasoning, message,
// function_call) with strictly increasing sequence numbers, and exactly one terminal event.
// Item ids and call_ids streamed in output_item.done are those of the final response (the
// Codex CLI builds its history from output_item.done).
#include <algorithm>
#include <cmath>

#include "server/context.h"
#include "server/generation.h"
#include "server/json_body.h"
#include "server/openai/openai.h"
#include "server/openai/reasoning_seal.h"
#include "server/openai/responses_tools.h"
#include "server/responder.h"
#include "server/request_fields.h"
#include "server/response_store.h"
#include "server/router.h"
#include "server/structured.h"
#include "server/workers.h"

namespace ferrox {

namespace {

void send(HttpResponder& res, const ApiError& e) { Router::send_error(res, Protocol::kOpenAI, e); }

ApiError not_found(const std::string& id) {
    ApiError e;
    e.status = 404;
    e.code = "not_found";
    e.type = "invalid_request_error";
    e.message = "No response found with id '" + id + "'.";
    return e;
}

// What was left out of the prompt, said in the response's `ferrox` object.
struct Notes {
    json skipped_items = json::array();  // {index, type, reason}
    json skipped_parts = json::array();  // {index, type, reason}: content parts of kept items
    void item(size_t i, const std::string& type, const std::string& reason) {
        skipped_items.push_back({{"index", i}, {"type", type}, {"reason", reason}});
    }
};

// The text of a content list (input_text / output_text / refusal parts) or a string. Parts this
// text-only server cannot read (images, files, audio, unknown types) are left out and noted.
bool content_text(const json& content, const std::string& where, size_t i_item, std::string* out, Notes* notes,
                  ApiError* err) {
    if (content.is_string()) {
        *out += content.get<std::string>();
        return true;
    }
    if (!content.is_array()) {
        *err = wrong_type(where, "a string or an array of content parts", content);
        return false;
    }
    for (size_t k = 0; k < content.size(); ++k) {
        const std::string pw = where + "[" + std::to_string(k) + "]";
        const json& part = content[k];
        if (!part.is_object()) {
            *err = wrong_type(pw, "an object", part);
            return false;
        }
        const Fields pf{part, pw + "."};
        std::string type;
        if (!pf.string("type", &type, err)) return false;
        if (type == "input_text" || type == "output_text" || type == "text" || type == "summary_text" ||
            type == "reasoning_text") {
            std::string t;
            if (!pf.string("text", &t, err)) return false;
            *out += t;
        } else if (type == "refusal") {
            std::string t;
            if (!pf.string("refusal", &t, err)) return false;
            *out += t;
        } else if (notes) {
            const bool media = type == "input_image" || type == "input_file" || type == "input_audio";
            notes->skipped_parts.push_back(
                {{"index", i_item}, {"part", pw}, {"type", type},
                 {"reason", media ? "this model reads text only" : "not a content part type ferrox reads"}});
        }
    }
    return true;
}

// The assistant message a call joins: the last one, unless a tool result followed it.
ChatMessage& assistant_for_call(std::vector<ChatMessage>& msgs) {
    if (msgs.empty() || msgs.back().role != "assistant") msgs.push_back({.role = "assistant"});
    return msgs.back();
}

// Why an item type that cannot reach the prompt is left out.
std::string skip_reason(const std::string& type) {
    if (type == "item_reference") return "items are not looked up by reference; resend the item itself";
    if (type == "compaction" || type == "compaction_summary" || type == "context_compaction")
        return "an opaque compaction made by another server";
    if (type == "compaction_trigger") return "a request control ferrox does not act on";
    if (type.size() > 5 && type.compare(type.size() - 5, 5, "_call") == 0)
        return "a call of a hosted tool ferrox does not run";
    return "not an item type ferrox renders into the prompt";
}

// Replayed reasoning: a sealed blob of ours that verifies, else its readable text (content,
// then summary). Returns false when the item carries a blob that does not verify and nothing else.
bool reasoning_text(const Fields& f, const std::string& where, std::string* out, ApiError* err, bool* blob_failed) {
    *blob_failed = false;
    if (const json* enc = f.find("encrypted_content"); enc && enc->is_string()) {
        if (auto text = reasoning_unseal(enc->get_ref<const std::string&>())) {
            *out = std::move(*text);
            return true;
        }
        *blob_failed = true;
    }
    for (const char* key : {"content", "summary"}) {
        if (const json* c = f.find(key); c && c->is_array() && out->empty()) {
            if (!content_text(*c, where + "." + key, 0, out, nullptr, err)) return false;
        }
    }
    return true;
}

// Input items into messages; every item also goes to `items` with an id, for input_items.
bool parse_input(const json& input, std::vector<ChatMessage>* msgs, json* items, Notes* notes, ApiError* err) {
    if (input.is_string()) {
        msgs->push_back({.role = "user", .content = input.get<std::string>()});
        items->push_back({{"id", random_id("msg_")}, {"type", "message"}, {"role", "user"},
                          {"content", json::array({{{"type", "input_text"}, {"text", input}}})}});
        return true;
    }
    if (!input.is_array()) {
        *err = wrong_type("input", "a string or an array of input items", input);
        return false;
    }
    std::vector<std::string> call_ids;
    for (const ChatMessage& m : *msgs)
        for (const ToolCall& c : m.tool_calls) call_ids.push_back(c.id);
    std::string pending_reasoning;  // a replayed reasoning item joins the next assistant turn
    auto add_call = [&](ToolCall c) {
        ChatMessage& a = assistant_for_call(*msgs);
        if (a.reasoning.empty()) a.reasoning = std::move(pending_reasoning);
        pending_reasoning.clear();
        call_ids.push_back(c.id);
        a.tool_calls.push_back(std::move(c));
    };
    for (size_t i = 0; i < input.size(); ++i) {
        const std::string where = "input[" + std::to_string(i) + "]";
        const json& it = input[i];
        if (!it.is_object()) {
            *err = wrong_type(where, "an object", it);
            return false;
        }
        const Fields f{it, where + "."};
        std::string type = "message";
        if (!f.string("type", &type, err)) return false;
        json item = it;
        if (!item.contains("id") || !item["id"].is_string()) item["id"] = random_id(type == "message" ? "msg_" : "item_");
        if (type == "message") {
            ChatMessage m;
            if (!f.string("role", &m.role, err)) return false;
            if (m.role == "developer") m.role = "system";
            if (m.role != "user" && m.role != "system" && m.role != "assistant") {
                *err = bad_param(where + ".role", "Invalid '" + where + ".role': '" + m.role +
                                                      "'. Expected 'user', 'system', 'developer' or 'assistant'.");
                return false;
            }
            const json* content = f.find("content");
            if (!content) {
                *err = bad_param(where + ".content", "Missing required parameter: '" + where + ".content'.");
                return false;
            }
            if (!content_text(*content, where + ".content", i, &m.content, notes, err)) return false;
            if (m.role == "assistant") {
                m.reasoning = std::move(pending_reasoning);
                pending_reasoning.clear();
            }
            msgs->push_back(std::move(m));
        } else if (type == "local_shell_call") {
            // Codex's shell calls (the local_shell tool): a call of "local_shell" whose arguments
            // are the action ({command, working_directory, timeout_ms, env, user}), so a resumed
            // session's outputs pair with it and the history renders as the turns it was.
            ToolCall c;
            if (!f.string("call_id", &c.id, err)) return false;
            if (c.id.empty() && !f.string("id", &c.id, err)) return false;
            if (c.id.empty()) {
                *err = bad_param(where, "'" + where + "' needs 'call_id'.");
                return false;
            }
            c.name = "local_shell";
            const json* action = f.find("action");
            c.arguments = local_shell_arguments(action ? *action : json::object());
            add_call(std::move(c));
        } else if (type == "function_call" || type == "custom_tool_call") {
            ToolCall c;
            std::string ns;
            if (!f.string("call_id", &c.id, err) || !f.string("name", &c.name, err) || !f.string("namespace", &ns, err))
                return false;
            if (c.id.empty() || c.name.empty()) {
                *err = bad_param(where, "'" + where + "' needs 'call_id' and 'name'.");
                return false;
            }
            c.name = namespaced_tool_name(ns, c.name);  // as the tool was offered
            if (type == "function_call") {
                std::string args;
                if (!f.string("arguments", &args, err)) return false;
                // JSON inside a string escapes the body's depth scan: the template copies it recursively.
                json parsed = json_nesting_depth(args) > kMaxJsonDepth ? json()
                                                                       : json::parse(args.empty() ? "{}" : args, nullptr, false);
                if (parsed.is_discarded() || !parsed.is_object()) {
                    *err = bad_param(where + ".arguments", "Invalid '" + where + ".arguments': expected a JSON object encoded as a string.");
                    return false;
                }
                c.arguments = args.empty() ? "{}" : args;
            } else {
                std::string in;
                if (!f.string("input", &in, err)) return false;
                c.arguments = custom_tool_arguments(in);
            }
            add_call(std::move(c));
        } else if (type == "function_call_output" || type == "custom_tool_call_output" ||
                   type == "local_shell_call_output") {
            ChatMessage m;
            m.role = "tool";
            if (!f.string("call_id", &m.tool_call_id, err)) return false;
            // local_shell_call_output names its call by "id" in OpenAI's schema.
            if (m.tool_call_id.empty() && type == "local_shell_call_output" && !f.string("id", &m.tool_call_id, err)) {
                return false;
            }
            if (std::find(call_ids.begin(), call_ids.end(), m.tool_call_id) == call_ids.end()) {
                *err = bad_param(where + ".call_id", "Invalid '" + where + ".call_id': no function_call with call_id '" +
                                                         m.tool_call_id + "' comes before it.");
                return false;
            }
            const json* out = f.find("output");
            if (out && !content_text(*out, where + ".output", i, &m.content, notes, err)) return false;
            for (const ChatMessage& prev : *msgs)
                for (const ToolCall& c : prev.tool_calls)
                    if (c.id == m.tool_call_id) m.name = c.name;
            msgs->push_back(std::move(m));
        } else if (type == "reasoning") {
            std::string text;
            bool blob_failed = false;
            if (!reasoning_text(f, where, &text, err, &blob_failed)) return false;
            if (blob_failed && text.empty())
                notes->item(i, type, "its encrypted_content does not verify here (another server's key, or altered) "
                                     "and it has no readable text");
            if (!text.empty() && pending_reasoning.empty()) pending_reasoning = std::move(text);
        } else {
            notes->item(i, type, skip_reason(type));
        }
        items->push_back(std::move(item));
    }
    return true;
}

bool parse_tool_choice(const Fields& f, Conversation* conv, ApiError* err) {
    const json* tc = f.find("tool_choice");
    if (!tc) return true;
    if (tc->is_string()) {
        const std::string s = tc->get<std::string>();
        if (s == "none") conv->tool_choice = ToolChoice::kNone;
        else if (s == "required") conv->tool_choice = ToolChoice::kRequired;
        else if (s == "auto") conv->tool_choice = ToolChoice::kAuto;
        else {
            *err = bad_param("tool_choice", "Invalid value for 'tool_choice': '" + s + "'.");
            return false;
        }
        return true;
    }
    if (!tc->is_object()) {
        *err = wrong_type("tool_choice", "a string or an object", *tc);
        return false;
    }
    const Fields cf{*tc, "tool_choice."};
    std::string type, name, ns;
    if (!cf.string("type", &type, err) || !cf.string("name", &name, err) || !cf.string("namespace", &ns, err))
        return false;
    if ((type == "function" || type == "custom") && !name.empty()) {
        conv->tool_choice = ToolChoice::kNamed;
        conv->tool_choice_name = namespaced_tool_name(ns, name);
    } else if (type == "local_shell") {
        conv->tool_choice = ToolChoice::kNamed;
        conv->tool_choice_name = "local_shell";
    }  // allowed_tools, hosted tool choices: left to the model
    return true;
}

struct Request {
    Conversation conv;
    GenerationParams params;
    bool stream = false, store = true;
    bool seal_reasoning = false;  // include: ["reasoning.encrypted_content"]
    std::string model, instructions, previous_id;
    std::string owner;  // RouteRequest::key_scope: stored under it, previous_id read under it
    std::string prompt_cache_key, verbosity, effort, summary;
    json input_items = json::array();
    json tools = json::array();
    ResponsesTools tool_set;
    json text_format = {{"type", "text"}};
    json tool_choice = "auto";
    json metadata = json::object();
    Notes notes;
    json grammar_notes = json::array();  // custom tools' grammars: constrained or why not
    std::vector<ChatMessage> history;  // previous turns plus this input (no instructions)
    double temperature = 1, top_p = 1;
    int64_t max_output_tokens = -1;
};

// One of `allowed` (or absent); anything else is a 400 naming the field.
bool enum_field(const Fields& f, const char* key, std::initializer_list<const char*> allowed, std::string* out,
                ApiError* err) {
    if (!f.string(key, out, err)) return false;
    if (out->empty()) return true;
    std::string list;
    for (const char* a : allowed) {
        if (*out == a) return true;
        list += std::string(list.empty() ? "'" : ", '") + a + "'";
    }
    *err = bad_param(f.name(key), "Invalid value for '" + f.name(key) + "': '" + *out + "'. Supported values are: " +
                                      list + ".");
    return false;
}

bool parse_options(const Fields& f, Request* r, ApiError* err) {
    std::vector<std::string> include;
    if (!f.strings("include", 64, &include, err) || !f.string("prompt_cache_key", &r->prompt_cache_key, err))
        return false;
    r->seal_reasoning = std::find(include.begin(), include.end(), "reasoning.encrypted_content") != include.end();
    if (const json* text = f.find("text"); text && text->is_object()) {
        const Fields tf{*text, "text."};
        if (!enum_field(tf, "verbosity", {"low", "medium", "high"}, &r->verbosity, err)) return false;
        if (const json* fmt = tf.find("format"); fmt && fmt->is_object()) r->text_format = *fmt;
    }
    if (const json* reasoning = f.find("reasoning"); reasoning && reasoning->is_object()) {
        const Fields rf{*reasoning, "reasoning."};
        if (!rf.string("effort", &r->effort, err) ||
            !enum_field(rf, "summary", {"auto", "concise", "detailed", "none"}, &r->summary, err))
            return false;
        if (r->summary.empty() && !enum_field(rf, "generate_summary", {"auto", "concise", "detailed"}, &r->summary, err))
            return false;
        if (!r->effort.empty()) r->conv.template_kwargs = dump(json{{"reasoning_effort", r->effort}});
    }
    return true;
}

bool parse_request(ServerContext& ctx, const json& body, Request* r, ApiError* err) {
    const Fields f{body, ""};
    if (!f.string("model", &r->model, err) || !f.string("instructions", &r->instructions, err) ||
        !f.string("previous_response_id", &r->previous_id, err) || !f.boolean("stream", &r->stream, err) ||
        !f.boolean("store", &r->store, err))
        return false;
    bool seeded = false;
    if (!read_sampling(f, {.defaults = &ctx.opts.sampling}, &r->params, &seeded, err)) return false;
    r->temperature = echo_float(r->params.sampling.temperature);
    r->top_p = echo_float(r->params.sampling.top_p);
    if (!f.integer("max_output_tokens", 1, 1 << 24, &r->max_output_tokens, err)) return false;
    r->params.max_tokens = r->max_output_tokens > 0 ? static_cast<int>(r->max_output_tokens) : ctx.opts.default_max_tokens;
    if (const json* md = f.find("metadata"); md && md->is_object()) r->metadata = *md;
    if (const json* tc = f.find("tool_choice")) r->tool_choice = *tc;
    if (!parse_options(f, r, err)) return false;
    if (!r->previous_id.empty()) {
        auto prev = ctx.responses->get(r->previous_id, r->owner);
        if (!prev) {
            *err = not_found(r->previous_id);
            err->param = "previous_response_id";
            return false;
        }
        r->history = std::move(prev->history);
    }
    const json* input = f.find("input");
    if (!input) {
        *err = bad_param("input", "Missing required parameter: 'input'.");
        return false;
    }
    if (!parse_input(*input, &r->history, &r->input_items, &r->notes, err)) return false;
    const json* tools = nullptr;
    if (!f.array("tools", &tools, err)) return false;
    r->tools = tools ? *tools : json::array();
    if (!read_responses_tools(tools, &r->conv, &r->tool_set, err) || !parse_tool_choice(f, &r->conv, err) ||
        !f.boolean("parallel_tool_calls", &r->conv.parallel_tool_calls, err))
        return false;
    if (!r->instructions.empty()) r->conv.messages.push_back({.role = "system", .content = r->instructions});
    for (const ChatMessage& m : r->history) r->conv.messages.push_back(m);
    if (r->conv.messages.empty()) {
        // Codex probes with an empty input: a one-turn prompt still answers.
        r->conv.messages.push_back({.role = "user", .content = ""});
    }
    return true;
}

class ResponsesSink final : public GenerationSink {
  public:
    ResponsesSink(ServerContext& ctx, ModelLease model, Request req)
        : ctx_(ctx), model_(std::move(model)), req_(std::move(req)), id_(random_id("resp_")), created_(unix_now()) {}

    void start(HttpResponder& res) override {
        if (!req_.stream) return;
        res.start_stream(200);
        json r = response("in_progress");
        event(res, "response.created", {{"response", r}});
        event(res, "response.in_progress", {{"response", r}});
    }

    void delta(HttpResponder& res, int, const ChatDelta& d, std::span<const TokenLogprob>) override {
        switch (d.kind) {
            case ChatDelta::Kind::kText:
                if (d.text.empty()) return;
                open(res, "message");
                text_ += d.text;
                event(res, "response.output_text.delta", {{"item_id", item_id()}, {"output_index", index()},
                                                          {"content_index", 0}, {"delta", d.text},
                                                          {"logprobs", json::array()}});
                return;
            case ChatDelta::Kind::kReasoning:
                if (d.text.empty()) return;
                open(res, "reasoning");
                text_ += d.text;
                event(res, "response.reasoning_text.delta", {{"item_id", item_id()}, {"output_index", index()},
                                                             {"content_index", 0}, {"delta", d.text}});
                if (summarize()) {
                    event(res, "response.reasoning_summary_text.delta",
                          {{"item_id", item_id()}, {"output_index", index()}, {"summary_index", 0}, {"delta", d.text}});
                }
                return;
            case ChatDelta::Kind::kToolCall: {
                close(res);
                const ResponsesTool* t = req_.tool_set.find(d.name);
                const auto kind = t ? t->kind : ResponsesTool::Kind::kFunction;
                if (kind == ResponsesTool::Kind::kCustom) return custom_call(res, *t, d);
                if (kind == ResponsesTool::Kind::kLocalShell) return local_shell_call(res, d);
                return function_call(res, t, d);
            }
        }
    }

    void choice_end(HttpResponder&, int, const ChoiceEnd& end) override { end_ = end; }

    void finish(HttpResponder& res, const Usage& u) override {
        close(res);
        usage_ = {{"input_tokens", u.n_prompt},
                  {"input_tokens_details", {{"cached_tokens", u.n_cached}}},
                  {"output_tokens", u.n_completion},
                  {"output_tokens_details", {{"reasoning_tokens", u.n_reasoning}}},
                  {"total_tokens", u.n_prompt + u.n_completion}};
        const bool incomplete = end_.finish == FinishReason::kLength && !end_.tool_calls;
        json r = response(incomplete ? "incomplete" : "completed");
        if (incomplete) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
        if (req_.store) {
            StoredResponse s;
            s.id = id_;
            s.response_json = dump(r);
            s.input_items_json = dump(req_.input_items);
            s.history = req_.history;
            if (!assistant_.content.empty() || !assistant_.tool_calls.empty()) s.history.push_back(assistant_);
            s.model = model_->info().id;
            s.owner = req_.owner;
            ctx_.responses->put(std::move(s));
        }
        if (req_.stream) {
            event(res, incomplete ? "response.incomplete" : "response.completed", {{"response", r}});
            res.end();
        } else {
            res.send(200, dump(r));
        }
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !req_.stream) {
            send(res, e);
            return;
        }
        close(res);
        json r = response("failed");
        r["error"] = {{"code", e.code.empty() ? "server_error" : e.code}, {"message", e.message}};
        event(res, "response.failed", {{"response", r}});
        res.end();
    }

  private:
    int index() const { return static_cast<int>(output_.size()) - 1; }
    std::string item_id() const { return output_.back()["id"].get<std::string>(); }
    bool summarize() const { return !req_.summary.empty() && req_.summary != "none"; }

    void event(HttpResponder& res, const char* type, json fields) {
        if (!req_.stream) return;
        json e = {{"type", type}};
        for (auto& [k, v] : fields.items()) e[k] = std::move(v);
        e["sequence_number"] = seq_++;
        res.write(sse_event(dump(e), type));
    }

    // The call as the history keeps it: what a client replaying this output item maps it to
    // (parse_input), so stored and replayed sessions render the same prompt.
    void remember_call(const json& item, const std::string& model_name, std::string arguments) {
        assistant_.tool_calls.push_back({item["call_id"].get<std::string>(), model_name, std::move(arguments)});
    }

    void function_call(HttpResponder& res, const ResponsesTool* t, const ChatDelta& d) {
        json item = {{"id", random_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                     {"arguments", ""}, {"call_id", openai_call_id()}, {"name", t ? t->name : d.name}};
        if (t && !t->ns.empty()) item["namespace"] = t->ns;
        output_.push_back(item);
        event(res, "response.output_item.added", {{"output_index", index()}, {"item", item}});
        event(res, "response.function_call_arguments.delta",
              {{"item_id", item_id()}, {"output_index", index()}, {"delta", d.arguments}});
        event(res, "response.function_call_arguments.done",
              {{"item_id", item_id()}, {"output_index", index()}, {"arguments", d.arguments}, {"name", item["name"]}});
        json& done = output_.back();
        done["arguments"] = d.arguments;
        done["status"] = "completed";
        event(res, "response.output_item.done", {{"output_index", index()}, {"item", done}});
        remember_call(done, d.name, d.arguments);
    }

    // A freeform tool's call: custom_tool_call with the raw input, streamed as OpenAI does
    // (custom_tool_call_input.delta / .done).
    void custom_call(HttpResponder& res, const ResponsesTool& t, const ChatDelta& d) {
        const std::string input = custom_tool_input(d.arguments);
        json item = {{"id", random_id("ctc_")}, {"type", "custom_tool_call"}, {"status", "in_progress"},
                     {"call_id", openai_call_id()}, {"name", t.name}, {"input", ""}};
        output_.push_back(item);
        event(res, "response.output_item.added", {{"output_index", index()}, {"item", item}});
        event(res, "response.custom_tool_call_input.delta",
              {{"item_id", item_id()}, {"output_index", index()}, {"delta", input}});
        event(res, "response.custom_tool_call_input.done",
              {{"item_id", item_id()}, {"output_index", index()}, {"input", input}});
        json& done = output_.back();
        done["input"] = input;
        done["status"] = "completed";
        event(res, "response.output_item.done", {{"output_index", index()}, {"item", done}});
        remember_call(done, t.model_name, custom_tool_arguments(input));
    }

    void local_shell_call(HttpResponder& res, const ChatDelta& d) {
        json item = {{"id", random_id("lsh_")}, {"type", "local_shell_call"}, {"call_id", openai_call_id()},
                     {"status", "in_progress"}, {"action", local_shell_action(d.arguments)}};
        output_.push_back(item);
        event(res, "response.output_item.added", {{"output_index", index()}, {"item", item}});
        json& done = output_.back();
        done["status"] = "completed";
        event(res, "response.output_item.done", {{"output_index", index()}, {"item", done}});
        remember_call(done, "local_shell", local_shell_arguments(done["action"]));
    }

    // Makes the open item a `type` ("message" or "reasoning"), closing another first.
    void open(HttpResponder& res, const char* type) {
        if (open_ && output_.back()["type"] == type) return;
        close(res);
        text_.clear();
        const bool msg = std::string(type) == "message";
        json item = msg ? json{{"id", random_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
                               {"role", "assistant"}, {"content", json::array()}}
                        : json{{"id", random_id("rs_")}, {"type", "reasoning"}, {"summary", json::array()},
                               {"content", json::array({{{"type", "reasoning_text"}, {"text", ""}}})}};
        output_.push_back(item);
        open_ = true;
        event(res, "response.output_item.added", {{"output_index", index()}, {"item", item}});
        if (msg) {
            event(res, "response.content_part.added",
                  {{"item_id", item_id()}, {"output_index", index()}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
        } else if (summarize()) {
            event(res, "response.reasoning_summary_part.added",
                  {{"item_id", item_id()}, {"output_index", index()}, {"summary_index", 0},
                   {"part", {{"type", "summary_text"}, {"text", ""}}}});
        }
    }

    void close(HttpResponder& res) {
        if (!open_) return;
        open_ = false;
        json& item = output_.back();
        if (item["type"] == "message") {
            json part = {{"type", "output_text"}, {"text", text_}, {"annotations", json::array()}, {"logprobs", json::array()}};
            event(res, "response.output_text.done", {{"item_id", item_id()}, {"output_index", index()},
                                                     {"content_index", 0}, {"text", text_}, {"logprobs", json::array()}});
            event(res, "response.content_part.done",
                  {{"item_id", item_id()}, {"output_index", index()}, {"content_index", 0}, {"part", part}});
            item["content"] = json::array({part});
            item["status"] = "completed";
            assistant_.content += text_;
        } else {
            event(res, "response.reasoning_text.done", {{"item_id", item_id()}, {"output_index", index()},
                                                        {"content_index", 0}, {"text", text_}});
            item["content"] = json::array({{{"type", "reasoning_text"}, {"text", text_}}});
            if (summarize()) {
                // ferrox has no summarizer: the summary is the reasoning itself.
                const json part = {{"type", "summary_text"}, {"text", text_}};
                event(res, "response.reasoning_summary_text.done",
                      {{"item_id", item_id()}, {"output_index", index()}, {"summary_index", 0}, {"text", text_}});
                event(res, "response.reasoning_summary_part.done",
                      {{"item_id", item_id()}, {"output_index", index()}, {"summary_index", 0}, {"part", part}});
                item["summary"] = json::array({part});
            }
            if (req_.seal_reasoning) item["encrypted_content"] = reasoning_seal(text_);
            assistant_.reasoning += text_;
        }
        event(res, "response.output_item.done", {{"output_index", index()}, {"item", item}});
    }

    json response(const char* status) const {
        json r = {{"id", id_}, {"object", "response"}, {"created_at", created_}, {"status", status},
                  {"error", nullptr}, {"incomplete_details", nullptr}};
        r["instructions"] = req_.instructions.empty() ? json(nullptr) : json(req_.instructions);
        r["max_output_tokens"] = req_.max_output_tokens > 0 ? json(req_.max_output_tokens) : json(nullptr);
        r["model"] = model_->info().id;
        r["output"] = std::string(status) == "in_progress" ? json::array() : output_;
        r["parallel_tool_calls"] = req_.conv.parallel_tool_calls;
        r["previous_response_id"] = req_.previous_id.empty() ? json(nullptr) : json(req_.previous_id);
        r["prompt_cache_key"] = req_.prompt_cache_key.empty() ? json(nullptr) : json(req_.prompt_cache_key);
        r["reasoning"] = {{"effort", req_.effort.empty() ? json(nullptr) : json(req_.effort)},
                          {"summary", req_.summary.empty() ? json(nullptr) : json(req_.summary)}};
        r["store"] = req_.store;
        r["temperature"] = req_.temperature;
        r["text"] = {{"format", req_.text_format}, {"verbosity", req_.verbosity.empty() ? "medium" : req_.verbosity}};
        r["tool_choice"] = req_.tool_choice;
        r["tools"] = req_.tools;
        r["top_p"] = req_.top_p;
        r["truncation"] = "disabled";
        r["usage"] = usage_;
        r["user"] = nullptr;
        r["metadata"] = req_.metadata;
        // What the prompt left out, beside the OpenAI fields (SDKs keep unknown fields).
        json notes = json::object();
        if (!req_.notes.skipped_items.empty()) notes["skipped_input_items"] = req_.notes.skipped_items;
        if (!req_.notes.skipped_parts.empty()) notes["skipped_content_parts"] = req_.notes.skipped_parts;
        if (!req_.tool_set.skipped.empty()) notes["skipped_tools"] = req_.tool_set.skipped;
        if (!req_.grammar_notes.empty()) notes["custom_tool_grammars"] = req_.grammar_notes;
        if (!notes.empty()) r["ferrox"] = std::move(notes);
        return r;
    }

    ServerContext& ctx_;
    ModelLease model_;
    Request req_;
    std::string id_;
    int64_t created_;
    int64_t seq_ = 0;
    json output_ = json::array();
    json usage_ = nullptr;
    std::string text_;  // of the open item
    bool open_ = false;
    ChatMessage assistant_{.role = "assistant"};  // this answer, for the stored history
    ChoiceEnd end_;
};

void route_create(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    Request r;
    r.owner = req.key_scope;
    ApiError err;
    if (!parse_request(ctx, req.body, &r, &err)) return send(*res, err);
    GenerationJob job;
    if (!ctx.acquire(r.model, &job.model, &err)) return send(*res, err);
    auto prompt = job.model->prompt().build(r.conv);
    if (!prompt.has_value()) return send(*res, from_status(prompt.status(), "input"));
    if (prompt->tokens.empty()) return send(*res, bad_param("input", "The prompt is empty after tokenization."));
    job.prompt = std::move(prompt->tokens);
    job.params = r.params;
    job.params.render_special = prompt->special_markup;
    job.output = prompt->output;
    job.stream = r.stream;
    job.prompt_param = "input";
    job.fingerprint = fingerprint_of(r.conv);
    // Output constraints: custom tools' grammars (with every call in the model's format), else a
    // forced tool call, which wins over text.format.
    std::shared_ptr<const grammar::Grammar> tools_grammar;
    if (!read_responses_constraint(Fields{req.body, ""}, &job.params.grammar, &err) ||
        !custom_tools_constraint(r.conv, r.tool_set, job.output->tools, job.params.grammar != nullptr, &tools_grammar,
                                 &r.grammar_notes, &err)) {
        return send(*res, err);
    }
    if (tools_grammar) {
        job.params.grammar = std::move(tools_grammar);
    } else if (!forced_tool_call_constraint(r.conv, job.output->tools, "tool_choice", &job.params.grammar, &err)) {
        return send(*res, err);
    }
    if (req.record && !r.prompt_cache_key.empty()) {
        std::lock_guard<std::mutex> lk(req.record->mu);
        req.record->cache_key = r.prompt_cache_key;
    }
    auto sink = std::make_unique<ResponsesSink>(ctx, job.model, std::move(r));
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

void route_get(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    auto r = ctx.responses->get(req.params[0], req.key_scope);
    if (!r) return send(*res, not_found(req.params[0]));
    res->send(200, r->response_json);
}

void route_delete(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    if (!ctx.responses->erase(req.params[0], req.key_scope)) return send(*res, not_found(req.params[0]));
    res->send(200, dump(json{{"id", req.params[0]}, {"object", "response"}, {"deleted", true}}));
}

void route_input_items(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    auto r = ctx.responses->get(req.params[0], req.key_scope);
    if (!r) return send(*res, not_found(req.params[0]));
    json items = json::parse(r->input_items_json, nullptr, false);
    if (!items.is_array()) items = json::array();
    json out = {{"object", "list"}, {"data", items}, {"has_more", false}};
    out["first_id"] = items.empty() ? json(nullptr) : items.front()["id"];
    out["last_id"] = items.empty() ? json(nullptr) : items.back()["id"];
    res->send(200, dump(out));
}

// Responses here finish before they are stored, so there is nothing left to cancel: the
// stored response comes back as it is, as OpenAI answers for a finished one.
void route_cancel(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    route_get(ctx, req, std::move(res));
}

}  // namespace

void add_responses_routes(Router& router, ServerContext& ctx) {
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    for (const std::string base : {"/v1/responses", "/responses"}) {  // (llama-server has both)
        router.add({.method = "POST", .path = base, .fn = bind(route_create), .json_body = true});
        router.add({.method = "GET", .path = base + "/{id}", .fn = bind(route_get)});
        router.add({.method = "DELETE", .path = base + "/{id}", .fn = bind(route_delete)});
        router.add({.method = "GET", .path = base + "/{id}/input_items", .fn = bind(route_input_items)});
        router.add({.method = "POST", .path = base + "/{id}/cancel", .fn = bind(route_cancel)});
    }
}

}  // namespace ferrox

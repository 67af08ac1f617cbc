#include "server/api_server.h"

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "core/log.h"
#include "server/json_body.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* kFingerprint = "fp_ferrox_0_1";
constexpr size_t kMaxPendingBytes = 16 << 20;
constexpr const char* kChatMlTemplate =
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

std::string dump(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_id(const char* prefix) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    static const char* hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id.push_back(hex[rng() & 15]);
    return id;
}

// An error in OpenAI's shape, carrying the HTTP status it maps to.
struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // empty: null
    std::string code;   // empty: null
};

std::string error_body(const ApiError& e) {
    json err = {{"message", e.message}, {"type", e.type}};
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    return dump(json{{"error", err}});
}

void send_error(HttpResponder& res, const ApiError& e) {
    HttpHeaders extra;
    if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
    res.send(e.status, error_body(e), "application/json", std::move(extra));
}

// The one place where a Status becomes an HTTP status.
ApiError from_status(const Status& s, std::string param = "") {
    ApiError e;
    e.message = s.message();
    e.param = std::move(param);
    switch (s.code()) {
        case StatusCode::kInvalidArgument:
        case StatusCode::kOutOfRange:
        case StatusCode::kUnimplemented: e.status = 400; break;
        case StatusCode::kNotFound: e.status = 404; e.type = "not_found_error"; break;
        case StatusCode::kResourceExhausted: e.status = 429; e.type = "rate_limit_error"; break;
        case StatusCode::kCancelled: e.status = 503; e.type = "server_error"; break;
        default: e.status = 500; e.type = "server_error"; break;
    }
    return e;
}

ApiError bad_param(const std::string& param, const std::string& message) {
    ApiError e;
    e.message = message;
    e.param = param;
    return e;
}

const char* json_type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        default: return "a number";
    }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
    return bad_param(param, "Invalid type for '" + param + "': expected " + expected + ", but got " +
                                json_type_name(got) + ".");
}

// Optional typed fields with range checks; a present null counts as absent (as OpenAI does).
bool get_number(const json& body, const char* key, double lo, double hi, double* out, ApiError* err) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return true;
    if (!it->is_number()) {
        *err = wrong_type(key, "a number", *it);
        return false;
    }
    const double v = it->get<double>();
    if (!(v >= lo && v <= hi)) {
        std::ostringstream m;
        m << "Invalid value for '" << key << "': " << v << " is outside [" << lo << ", " << hi << "].";
        *err = bad_param(key, m.str());
        return false;
    }
    *out = v;
    return true;
}

bool get_int(const json& body, const char* key, int64_t lo, int64_t hi, int64_t* out, ApiError* err) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return true;
    if (!it->is_number_integer()) {
        if (it->is_number_float() && std::floor(it->get<double>()) == it->get<double>()) {
            // 5.0 is accepted as 5, as Python clients sometimes send it.
        } else {
            *err = wrong_type(key, "an integer", *it);
            return false;
        }
    }
    const double d = it->get<double>();
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
        *err = bad_param(key, "Invalid value for '" + std::string(key) + "': " + it->dump() +
                                  " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "].");
        return false;
    }
    *out = it->is_number_integer() ? it->get<int64_t>() : static_cast<int64_t>(d);
    return true;
}

bool get_bool(const json& body, const char* key, bool* out, ApiError* err) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return true;
    if (!it->is_boolean()) {
        *err = wrong_type(key, "a boolean", *it);
        return false;
    }
    *out = it->get<bool>();
    return true;
}

// What the chat and legacy completion routes share.
struct CommonRequest {
    GenerationParams params;
    int n = 1;
    bool stream = false;
    bool include_usage = false;
    bool logprobs = false;
    int top_logprobs = 0;
    bool seeded = false;
};

bool parse_common(const json& body, bool chat, int default_max_tokens, CommonRequest* out, ApiError* err) {
    SamplingParams& sp = out->params.sampling;
    double d;
    int64_t i;
    d = sp.temperature;
    if (!get_number(body, "temperature", 0, 2, &d, err)) return false;
    sp.temperature = static_cast<float>(d);
    d = sp.top_p;
    if (!get_number(body, "top_p", 0, 1, &d, err)) return false;
    sp.top_p = static_cast<float>(d);
    d = sp.min_p;
    if (!get_number(body, "min_p", 0, 1, &d, err)) return false;
    sp.min_p = static_cast<float>(d);
    i = sp.top_k;
    if (!get_int(body, "top_k", -1, 1 << 20, &i, err)) return false;
    sp.top_k = static_cast<int>(i);
    d = 0;
    if (!get_number(body, "presence_penalty", -2, 2, &d, err)) return false;
    sp.presence_penalty = static_cast<float>(d);
    d = 0;
    if (!get_number(body, "frequency_penalty", -2, 2, &d, err)) return false;
    sp.frequency_penalty = static_cast<float>(d);
    d = 1;
    if (!get_number(body, "repetition_penalty", 0.01, 10, &d, err)) return false;
    if (!get_number(body, "repeat_penalty", 0.01, 10, &d, err)) return false;
    sp.repeat_penalty = static_cast<float>(d);
    if (body.contains("seed") && !body["seed"].is_null()) {
        if (!get_int(body, "seed", INT64_MIN, INT64_MAX, &i, err)) return false;
        sp.seed = static_cast<uint64_t>(i);
        out->seeded = true;
    } else {
        sp.seed = std::random_device{}();
    }
    int64_t max_tokens = default_max_tokens;
    if (!get_int(body, "max_tokens", 1, 1 << 24, &max_tokens, err)) return false;
    if (chat && !get_int(body, "max_completion_tokens", 1, 1 << 24, &max_tokens, err)) return false;
    if (!get_int(body, "n_predict", -1, 1 << 24, &max_tokens, err)) return false;  // llama.cpp
    out->params.max_tokens = static_cast<int>(max_tokens);
    i = 1;
    if (!get_int(body, "n", 1, 16, &i, err)) return false;
    out->n = static_cast<int>(i);
    if (!get_bool(body, "stream", &out->stream, err)) return false;
    if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) {
            *err = wrong_type("stream_options", "an object", *it);
            return false;
        }
        if (!get_bool(*it, "include_usage", &out->include_usage, err)) {
            err->param = "stream_options.include_usage";
            return false;
        }
    }
    if (auto it = body.find("stop"); it != body.end() && !it->is_null()) {
        if (it->is_string()) {
            out->params.stop.push_back(it->get<std::string>());
        } else if (it->is_array()) {
            if (it->size() > 16) {
                *err = bad_param("stop", "Invalid 'stop': at most 16 stop strings.");
                return false;
            }
            for (const auto& s : *it) {
                if (!s.is_string()) {
                    *err = wrong_type("stop", "a string or an array of strings", s);
                    return false;
                }
                out->params.stop.push_back(s.get<std::string>());
            }
        } else {
            *err = wrong_type("stop", "a string or an array of strings", *it);
            return false;
        }
    }
    if (auto it = body.find("logit_bias"); it != body.end() && !it->is_null()) {
        if (!it->is_object()) {
            *err = wrong_type("logit_bias", "an object", *it);
            return false;
        }
        for (const auto& [k, v] : it->items()) {
            char* end = nullptr;
            const long id = std::strtol(k.c_str(), &end, 10);
            if (k.empty() || *end || id < 0 || id > (1 << 24)) {
                *err = bad_param("logit_bias", "Invalid key in 'logit_bias': '" + k + "' is not a token id.");
                return false;
            }
            if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100) {
                *err = bad_param("logit_bias", "Invalid value in 'logit_bias': biases must be numbers in [-100, 100].");
                return false;
            }
            sp.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
        }
    }
    if (chat) {
        if (!get_bool(body, "logprobs", &out->logprobs, err)) return false;
        int64_t tl = 0;
        if (!get_int(body, "top_logprobs", 0, 20, &tl, err)) return false;
        if (body.contains("top_logprobs") && !body["top_logprobs"].is_null() && !out->logprobs) {
            *err = bad_param("top_logprobs", "'top_logprobs' requires 'logprobs' to be true.");
            return false;
        }
        out->top_logprobs = static_cast<int>(tl);
    } else if (auto it = body.find("logprobs"); it != body.end() && !it->is_null()) {
        int64_t lp = 0;
        if (!get_int(body, "logprobs", 0, 5, &lp, err)) return false;
        out->logprobs = true;
        out->top_logprobs = static_cast<int>(lp);
    }
    out->params.top_logprobs = out->logprobs ? out->top_logprobs : -1;
    if (auto it = body.find("user"); it != body.end() && !it->is_null() && !it->is_string()) {
        *err = wrong_type("user", "a string", *it);
        return false;
    }
    bool ignore_eos = false;
    if (!get_bool(body, "ignore_eos", &ignore_eos, err)) return false;
    out->params.ignore_eos = ignore_eos;
    // llama.cpp's extension: false computes the whole prompt and leaves nothing in the cache.
    bool cache_prompt = true;
    if (!get_bool(body, "cache_prompt", &cache_prompt, err)) return false;
    out->params.cache_prompt = cache_prompt;
    return true;
}

// Messages as chat templates expect them: content as one string, developer as system, tool
// call arguments as objects (OpenAI sends a JSON string; HF templates index into a dict).
bool normalize_messages(const json& body, json* out, ApiError* err) {
    auto it = body.find("messages");
    if (it == body.end() || it->is_null()) {
        *err = bad_param("messages", "Missing required parameter: 'messages'.");
        return false;
    }
    if (!it->is_array()) {
        *err = wrong_type("messages", "an array", *it);
        return false;
    }
    if (it->empty()) {
        *err = bad_param("messages", "Invalid 'messages': empty array. Expected an array with minimum length 1.");
        return false;
    }
    *out = json::array();
    for (size_t i = 0; i < it->size(); ++i) {
        const json& m = (*it)[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) {
            *err = wrong_type(where, "an object", m);
            return false;
        }
        auto role = m.find("role");
        if (role == m.end() || !role->is_string()) {
            *err = bad_param(where + ".role", "Missing or invalid '" + where + ".role'.");
            return false;
        }
        std::string r = role->get<std::string>();
        if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
            *err = bad_param(where + ".role", "Invalid value for '" + where + ".role': '" + r +
                                                  "'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.");
            return false;
        }
        if (r == "developer") r = "system";
        json nm = json::object();
        nm["role"] = r;
        auto content = m.find("content");
        if (content == m.end() || content->is_null()) {
            if (r != "assistant") {
                *err = bad_param(where + ".content", "Missing required parameter: '" + where + ".content'.");
                return false;
            }
            nm["content"] = "";
        } else if (content->is_string()) {
            nm["content"] = *content;
        } else if (content->is_array()) {
            std::string text;
            for (const auto& part : *content) {
                const auto type = part.is_object() ? part.find("type") : part.end();
                if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text" ||
                    !part.contains("text") || !part["text"].is_string()) {
                    *err = bad_param(where + ".content", "Unsupported content part in '" + where +
                                                            ".content': only {\"type\": \"text\"} parts are supported.");
                    return false;
                }
                text += part["text"].get<std::string>();
            }
            nm["content"] = text;
        } else {
            *err = wrong_type(where + ".content", "a string or an array of content parts", *content);
            return false;
        }
        if (auto tc = m.find("tool_calls"); tc != m.end() && tc->is_array()) {
            json calls = json::array();
            for (const auto& c : *tc) {
                json call = c;
                if (call.contains("function") && call["function"].is_object()) {
                    json& fn = call["function"];
                    if (fn.contains("arguments") && fn["arguments"].is_string()) {
                        json args = json::parse(fn["arguments"].get<std::string>(), nullptr, false);
                        if (!args.is_discarded()) fn["arguments"] = args;
                    }
                }
                calls.push_back(call);
            }
            nm["tool_calls"] = calls;
        }
        for (const char* k : {"name", "tool_call_id", "reasoning_content"}) {
            if (m.contains(k) && m[k].is_string()) nm[k] = m[k];
        }
        out->push_back(nm);
    }
    return true;
}

}  // namespace

struct ApiServer::State {
    ApiServerOptions opts;
    std::atomic<bool> ready{false};
    std::atomic<bool> stopping{false};
    std::unique_ptr<Engine> engine;  // set once before `ready`
    std::unique_ptr<JinjaTemplate> tmpl;
    std::string model_id;
    int64_t created = unix_now();

    bool authorized(const HttpRequest& req) const;
    void handle(HttpRequest&& req, std::shared_ptr<HttpResponder> res);
    void route_models(HttpResponder& res);
    void route_props(HttpResponder& res);
    void route_chat(const json& body, std::shared_ptr<HttpResponder> res, bool chat);
    void route_tokenize(const json& body, HttpResponder& res);
    void route_detokenize(const json& body, HttpResponder& res);
    void route_apply_template(const json& body, HttpResponder& res);
    Expected<std::string> render(const json& messages, const json& tools, bool add_generation_prompt) const;
    std::vector<int32_t> tokenize_prompt(const std::string& text) const;
};

bool ApiServer::State::authorized(const HttpRequest& req) const {
    if (opts.api_keys.empty()) return true;
    const std::string* h = req.header("authorization");
    std::string given;
    if (h && h->size() > 7 && (h->compare(0, 7, "Bearer ") == 0 || h->compare(0, 7, "bearer ") == 0)) {
        given = h->substr(7);
    } else if (const std::string* x = req.header("x-api-key")) {
        given = *x;
    }
    bool ok = false;
    for (const std::string& key : opts.api_keys) {
        // Constant time in the key's content: every byte of the longer string is visited.
        const size_t n = std::max(key.size(), given.size());
        unsigned diff = static_cast<unsigned>(key.size() ^ given.size());
        for (size_t i = 0; i < n; ++i) {
            const unsigned char a = i < key.size() ? key[i] : 0;
            const unsigned char b = i < given.size() ? given[i] : 0;
            diff |= a ^ b;
        }
        ok |= diff == 0;
    }
    return ok;
}

Expected<std::string> ApiServer::State::render(const json& messages, const json& tools,
                                               bool add_generation_prompt) const {
    const Tokenizer& tok = *engine->model().tokenizer;
    ChatTemplateInputs in;
    in.messages_json = dump(messages);
    if (!tools.is_null()) in.tools_json = dump(tools);
    in.add_generation_prompt = add_generation_prompt;
    if (tok.bos() >= 0) in.bos_token = std::string(tok.token_text(tok.bos()));
    if (tok.eos() >= 0) in.eos_token = std::string(tok.token_text(tok.eos()));
    auto r = render_chat_template(*tmpl, in);
    if (!r.has_value()) {
        return Status(r.status().code(), "chat template: " + r.status().message());
    }
    return r;
}

std::vector<int32_t> ApiServer::State::tokenize_prompt(const std::string& text) const {
    const Tokenizer& tok = *engine->model().tokenizer;
    // Templates that write the BOS token themselves must not get a second one.
    bool add_special = true;
    if (tok.add_bos() && tok.bos() >= 0) {
        const std::string_view bos = tok.token_text(tok.bos());
        if (!bos.empty() && text.compare(0, bos.size(), bos) == 0) add_special = false;
    }
    return tok.encode(text, add_special, /*parse_special=*/true);
}

void ApiServer::State::route_models(HttpResponder& res) {
    json model = {{"id", model_id}, {"object", "model"}, {"created", created}, {"owned_by", "ferrox"}};
    const Engine& e = *engine;
    const ModelHParams& hp = e.model().model->hparams();
    model["meta"] = {{"n_ctx", e.context_ceiling()},     {"n_ctx_train", hp.n_ctx_train},
                     {"n_vocab", e.model().model->n_vocab()}, {"n_embd", hp.n_embd},
                     {"n_layer", hp.n_layer},             {"architecture", hp.arch}};
    res.send(200, dump(json{{"object", "list"}, {"data", json::array({model})}}));
}

// llama-server's /props: the generation defaults, the slots and the context one request can
// get, plus what ferrox adds about its KV pool.
void ApiServer::State::route_props(HttpResponder& res) {
    const Engine& e = *engine;
    const EngineOptions& eo = e.options();
    const std::string& tmpl_src = opts.chat_template_override.empty() ? e.model().chat_template
                                                                      : opts.chat_template_override;
    json params = {{"n_predict", opts.default_max_tokens}, {"temperature", 1.0}, {"top_k", 0},
                   {"top_p", 1.0},  {"min_p", 0.0},  {"seed", -1}, {"cache_prompt", eo.prefix_cache}};
    json props = {
        {"default_generation_settings", {{"n_ctx", e.context_ceiling()}, {"params", params}}},
        {"total_slots", eo.n_parallel},
        {"n_ctx", e.context_ceiling()},
        {"model_path", e.model().path},
        {"model_alias", model_id},
        {"chat_template", tmpl_src},
        {"modalities", {{"vision", false}, {"audio", false}}},
        {"kv_cache",
         {{"type", kv_type_name(eo.kv_type)},
          {"block_size", eo.block_size},
          {"blocks", e.kv_blocks()},
          {"bytes", static_cast<int64_t>(e.kv_block_bytes()) * e.kv_blocks()},
          {"prefix_cache", eo.prefix_cache}}},
        {"build_info", "ferrox"},
    };
    res.send(200, dump(props));
}

void ApiServer::State::route_tokenize(const json& body, HttpResponder& res) {
    auto it = body.find("content");
    if (it == body.end() || !it->is_string()) {
        send_error(res, bad_param("content", "'content' must be a string."));
        return;
    }
    bool add_special = false, parse_special = true, with_pieces = false;
    ApiError err;
    if (!get_bool(body, "add_special", &add_special, &err) || !get_bool(body, "parse_special", &parse_special, &err) ||
        !get_bool(body, "with_pieces", &with_pieces, &err)) {
        send_error(res, err);
        return;
    }
    const Tokenizer& tok = *engine->model().tokenizer;
    std::vector<int32_t> ids = tok.encode(it->get<std::string>(), add_special, parse_special);
    json tokens = json::array();
    for (int32_t id : ids) {
        if (with_pieces) {
            tokens.push_back({{"id", id}, {"piece", std::string(tok.token_to_piece(id, true))}});
        } else {
            tokens.push_back(id);
        }
    }
    res.send(200, dump(json{{"tokens", tokens}}));
}

void ApiServer::State::route_detokenize(const json& body, HttpResponder& res) {
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) {
        send_error(res, bad_param("tokens", "'tokens' must be an array of token ids."));
        return;
    }
    const Tokenizer& tok = *engine->model().tokenizer;
    std::vector<int32_t> ids;
    for (const auto& t : *it) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.n_vocab()) {
            send_error(res, bad_param("tokens", "'tokens' must hold token ids in [0, " +
                                                    std::to_string(tok.n_vocab()) + ")."));
            return;
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    DecodeOptions d;
    d.special = true;
    res.send(200, dump(json{{"content", tok.decode(ids, d)}}));
}

void ApiServer::State::route_apply_template(const json& body, HttpResponder& res) {
    json messages;
    ApiError err;
    if (!normalize_messages(body, &messages, &err)) {
        send_error(res, err);
        return;
    }
    json tools = body.contains("tools") ? body["tools"] : json(nullptr);
    auto prompt = render(messages, tools, true);
    if (!prompt.has_value()) {
        send_error(res, from_status(prompt.status()));
        return;
    }
    res.send(200, dump(json{{"prompt", *prompt}}));
}

namespace {

// One HTTP request's generation: n choices, each an engine request, streaming or collected.
struct Generation : std::enable_shared_from_this<Generation> {
    struct Choice {
        std::string text;
        json logprobs = json::array();       // chat: content entries
        json lp_tokens = json::array(), lp_values = json::array(), lp_top = json::array(),
             lp_offsets = json::array();     // completions
        std::string finish;
        bool done = false;
    };
    std::shared_ptr<HttpResponder> res;
    std::shared_ptr<LoadedModel> model;  // pinned for the whole request
    bool chat = true;
    CommonRequest req;
    std::string id, model_id;
    int64_t created = 0;
    std::mutex mu;
    std::vector<Choice> choices;
    std::vector<std::shared_ptr<RequestHandle>> handles;
    int n_done = 0;
    bool aborted = false;  // a later choice was refused: the response was the error
    int n_prompt = 0;
    int n_completion = 0;
    int n_cached = 0;  // prompt tokens reused from the prefix cache (the most of any choice)
    bool failed = false;
    ApiError error;

    json chunk_base() const {
        return json{{"id", id},
                    {"object", chat ? "chat.completion.chunk" : "text_completion"},
                    {"created", created},
                    {"model", model_id},
                    {"system_fingerprint", kFingerprint}};
    }

    json token_logprob(const TokenLogprob& lp) const {
        const Tokenizer& tok = *model->tokenizer;
        auto entry = [&](int32_t id, float l) {
            const std::string_view piece = tok.token_to_piece(id);
            json bytes = json::array();
            for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
            return json{{"token", std::string(piece)}, {"logprob", l}, {"bytes", bytes}};
        };
        json e = entry(lp.token, lp.logprob);
        json top = json::array();
        for (const auto& [id, l] : lp.top) top.push_back(entry(id, l));
        e["top_logprobs"] = top;
        return e;
    }

    void write_chunk(int index, const std::string& text, const json& logprobs, const char* finish) {
        json c = chunk_base();
        json choice;
        if (chat) {
            json delta = json::object();
            if (!text.empty() || !finish) delta["content"] = text;
            choice = {{"index", index}, {"delta", delta}};
            choice["logprobs"] = logprobs.is_null() ? json(nullptr) : json{{"content", logprobs}};
        } else {
            choice = {{"text", text}, {"index", index}};
            choice["logprobs"] = logprobs.is_null() ? json(nullptr) : logprobs;
        }
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        c["choices"] = json::array({choice});
        res->write(sse_event(dump(c)));
    }

    json usage() const {
        return json{{"prompt_tokens", n_prompt},
                    {"completion_tokens", n_completion},
                    {"total_tokens", n_prompt + n_completion},
                    {"prompt_tokens_details", {{"cached_tokens", n_cached}}}};
    }

    void on_event(int index, EngineEvent&& ev) {
        std::lock_guard<std::mutex> lk(mu);
        if (aborted) return;
        Choice& ch = choices[index];
        if (ev.kind == EngineEvent::Kind::kProgress) {
            if (req.stream) res->write(": keep-alive\n\n");
            return;
        }
        if (ev.kind == EngineEvent::Kind::kText) {
            // A client that stopped reading: its queued output is capped, then it is cut off.
            if (req.stream && res->pending_bytes() > kMaxPendingBytes) {
                for (auto& h : handles) h->cancel();
            }
            json lps = nullptr;
            if (req.logprobs && !ev.logprobs.empty()) {
                if (chat) {
                    lps = json::array();
                    for (const auto& lp : ev.logprobs) lps.push_back(token_logprob(lp));
                } else {
                    lps = legacy_logprobs(ch, ev.logprobs);
                }
            }
            if (req.stream) {
                if (!ev.text.empty() || !lps.is_null()) write_chunk(index, ev.text, lps, nullptr);
            } else if (!lps.is_null() && chat) {
                for (auto& e : lps) ch.logprobs.push_back(e);
            }
            ch.text += ev.text;
            return;
        }
        // kDone
        ch.done = true;
        ++n_done;
        n_prompt = ev.n_prompt;
        n_completion += ev.n_completion;
        n_cached = std::max(n_cached, ev.n_cached);
        if (ev.finish == FinishReason::kError && !failed) {
            failed = true;
            error = from_status(ev.error);
        }
        ch.finish = ev.finish == FinishReason::kLength ? "length" : "stop";
        if (req.stream && ev.finish != FinishReason::kCancelled && ev.finish != FinishReason::kError) {
            write_chunk(index, "", nullptr, ch.finish.c_str());
        }
        if (n_done == static_cast<int>(choices.size())) complete();
    }

    json legacy_logprobs(Choice& ch, const std::vector<TokenLogprob>& lps) const {
        const Tokenizer& tok = *model->tokenizer;
        json out = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                    {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        for (const auto& lp : lps) {
            const std::string piece(tok.token_to_piece(lp.token));
            json top = json::object();
            for (const auto& [id, l] : lp.top) top[std::string(tok.token_to_piece(id))] = l;
            out["tokens"].push_back(piece);
            out["token_logprobs"].push_back(lp.logprob);
            out["top_logprobs"].push_back(top);
            out["text_offset"].push_back(static_cast<int64_t>(ch.text.size()));
            ch.lp_tokens.push_back(piece);
            ch.lp_values.push_back(lp.logprob);
            ch.lp_top.push_back(top);
            ch.lp_offsets.push_back(static_cast<int64_t>(ch.text.size()));
        }
        return out;
    }

    // All choices are done: the final response or the end of the stream. Called with mu held.
    void complete() {
        if (res->client_gone()) return;
        if (req.stream) {
            if (failed) {
                res->write(sse_event(error_body(error)));
            } else if (req.include_usage) {
                json c = chunk_base();
                c["choices"] = json::array();
                c["usage"] = usage();
                res->write(sse_event(dump(c)));
            }
            res->write("data: [DONE]\n\n");
            res->end();
            return;
        }
        if (failed) {
            send_error(*res, error);
            return;
        }
        json out = {{"id", id}, {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created}, {"model", model_id}, {"system_fingerprint", kFingerprint}};
        json arr = json::array();
        for (size_t i = 0; i < choices.size(); ++i) {
            const Choice& ch = choices[i];
            json c;
            if (chat) {
                c = {{"index", i}, {"message", {{"role", "assistant"}, {"content", ch.text}}}};
                c["logprobs"] = req.logprobs ? json{{"content", ch.logprobs}} : json(nullptr);
            } else {
                c = {{"text", ch.text}, {"index", i}};
                c["logprobs"] = req.logprobs ? json{{"tokens", ch.lp_tokens},
                                                   {"token_logprobs", ch.lp_values},
                                                   {"top_logprobs", ch.lp_top},
                                                   {"text_offset", ch.lp_offsets}}
                                             : json(nullptr);
            }
            c["finish_reason"] = ch.finish;
            arr.push_back(c);
        }
        out["choices"] = arr;
        out["usage"] = usage();
        res->send(200, dump(out));
    }
};

}  // namespace

void ApiServer::State::route_chat(const json& body, std::shared_ptr<HttpResponder> res, bool chat) {
    ApiError err;
    if (auto m = body.find("model"); m != body.end() && !m->is_null()) {
        if (!m->is_string()) {
            send_error(*res, wrong_type("model", "a string", *m));
            return;
        }
        const std::string want = m->get<std::string>();
        if (!want.empty() && want != model_id && want != engine->model().name) {
            ApiError e;
            e.status = 404;
            e.type = "invalid_request_error";
            e.code = "model_not_found";
            e.param = "model";
            e.message = "The model '" + want + "' does not exist. This server serves '" + model_id + "'.";
            send_error(*res, e);
            return;
        }
    }
    auto g = std::make_shared<Generation>();
    g->chat = chat;
    if (!parse_common(body, chat, opts.default_max_tokens, &g->req, &err)) {
        send_error(*res, err);
        return;
    }
    std::vector<int32_t> prompt;
    if (chat) {
        json messages;
        if (!normalize_messages(body, &messages, &err)) {
            send_error(*res, err);
            return;
        }
        json tools = body.contains("tools") ? body["tools"] : json(nullptr);
        if (!tools.is_null() && !tools.is_array()) {
            send_error(*res, wrong_type("tools", "an array", tools));
            return;
        }
        auto text = render(messages, tools, true);
        if (!text.has_value()) {
            send_error(*res, from_status(text.status(), "messages"));
            return;
        }
        prompt = tokenize_prompt(*text);
    } else {
        auto p = body.find("prompt");
        if (p == body.end() || p->is_null()) {
            send_error(*res, bad_param("prompt", "Missing required parameter: 'prompt'."));
            return;
        }
        const json* one = &*p;
        if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) one = &(*p)[0];
        if (one->is_string()) {
            prompt = tokenize_prompt(one->get<std::string>());
        } else if (one->is_array() && !one->empty() && (*one)[0].is_number_integer()) {
            for (const auto& t : *one) {
                if (!t.is_number_integer()) {
                    send_error(*res, wrong_type("prompt", "an array of token ids", t));
                    return;
                }
                prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
            }
        } else if (one->is_array()) {
            send_error(*res, bad_param("prompt", "Only one prompt per request is supported."));
            return;
        } else {
            send_error(*res, wrong_type("prompt", "a string or an array of token ids", *one));
            return;
        }
        bool echo = false;
        if (!get_bool(body, "echo", &echo, &err)) {
            send_error(*res, err);
            return;
        }
        if (echo) {
            send_error(*res, bad_param("echo", "'echo' is not supported."));
            return;
        }
    }
    if (prompt.empty()) {
        send_error(*res, bad_param(chat ? "messages" : "prompt", "The prompt is empty after tokenization."));
        return;
    }

    g->res = res;
    g->model = engine->model_ptr();
    g->id = random_id(chat ? "chatcmpl-" : "cmpl-");
    g->model_id = model_id;
    g->created = unix_now();
    g->choices.resize(g->req.n);
    g->n_prompt = static_cast<int>(prompt.size());
    // Submit every choice before answering, holding the generation's lock so that no engine
    // event is written before the stream has started: a refused request (queue full, too long)
    // still gets its proper HTTP status instead of an error inside a 200 stream.
    {
        std::lock_guard<std::mutex> lk(g->mu);
        for (int i = 0; i < g->req.n; ++i) {
            GenerationParams p = g->req.params;
            p.sampling.seed += static_cast<uint64_t>(i);
            auto h = engine->submit(prompt, std::move(p),
                                    [g, i](EngineEvent&& ev) { g->on_event(i, std::move(ev)); });
            if (!h.has_value()) {
                for (auto& prev : g->handles) prev->cancel();
                g->aborted = true;  // events of the cancelled choices are dropped
                send_error(*res, from_status(h.status(), h.status().code() == StatusCode::kInvalidArgument
                                                             ? (chat ? "messages" : "prompt")
                                                             : ""));
                return;
            }
            g->handles.push_back(*h);
        }
        if (g->req.stream) {
            res->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
            if (chat) {
                for (int i = 0; i < g->req.n; ++i) {
                    json c = g->chunk_base();
                    c["choices"] = json::array({{{"index", i},
                                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                                 {"logprobs", nullptr},
                                                 {"finish_reason", nullptr}}});
                    res->write(sse_event(dump(c)));
                }
            }
        }
    }
    std::weak_ptr<Generation> weak = g;
    res->on_disconnect([weak] {
        if (auto gen = weak.lock()) {
            std::lock_guard<std::mutex> lk(gen->mu);
            for (auto& h : gen->handles) h->cancel();
        }
    });
}

void ApiServer::State::handle(HttpRequest&& req, std::shared_ptr<HttpResponder> res) {
    const std::string& path = req.path;
    struct Route {
        const char* path;
        const char* method;
    };
    static const Route kRoutes[] = {{"/health", "GET"},          {"/v1/models", "GET"},
                                    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"},
                                    {"/tokenize", "POST"},       {"/detokenize", "POST"},
                                    {"/apply-template", "POST"}, {"/models", "GET"},
                                    {"/chat/completions", "POST"}, {"/completions", "POST"},
                                    {"/metrics", "GET"},         {"/props", "GET"}};
    const Route* route = nullptr;
    for (const Route& r : kRoutes) {
        if (path == r.path) route = &r;
    }
    if (!route) {
        ApiError e;
        e.status = 404;
        e.message = "Unknown route " + req.method + " " + path;
        e.type = "invalid_request_error";
        e.code = "unknown_url";
        send_error(*res, e);
        return;
    }
    if (req.method != route->method && !(req.method == "HEAD" && std::string(route->method) == "GET")) {
        ApiError e;
        e.status = 405;
        e.message = "Method " + req.method + " is not allowed for " + path + " (use " + route->method + ").";
        res->send(405, error_body(e), "application/json", {{"Allow", route->method}});
        return;
    }
    if (path == "/health") {
        if (stopping.load()) {
            res->send(503, dump(json{{"status", "shutting down"}}));
        } else if (!ready.load()) {
            res->send(503, dump(json{{"status", "loading model"}}), "application/json", {{"Retry-After", "1"}});
        } else {
            res->send(200, dump(json{{"status", "ok"}}));
        }
        return;
    }
    if (!authorized(req)) {
        ApiError e;
        e.status = 401;
        e.type = "authentication_error";
        e.code = "invalid_api_key";
        e.message = "Invalid or missing API key. Send it as 'Authorization: Bearer <key>'.";
        send_error(*res, e);
        return;
    }
    if (!ready.load() || stopping.load()) {
        ApiError e;
        e.status = 503;
        e.type = "server_error";
        e.message = stopping.load() ? "The server is shutting down." : "The model is still loading.";
        send_error(*res, e);
        return;
    }
    if (path == "/metrics") {
        res->send(200, engine->prometheus(), "text/plain; version=0.0.4");
        return;
    }
    if (path == "/props") {
        route_props(*res);
        return;
    }
    if (route->method == std::string("GET")) {
        route_models(*res);
        return;
    }
    if (const int depth = json_nesting_depth(req.body); depth > kMaxJsonDepth) {
        ApiError e;
        e.message = "The JSON body of your request nests deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels, the limit of this server.";
        send_error(*res, e);
        return;
    }
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) {
        ApiError e;
        e.message = body.is_discarded() ? "We could not parse the JSON body of your request: it is not valid JSON."
                                        : "The request body must be a JSON object.";
        send_error(*res, e);
        return;
    }
    if (path == "/tokenize") return route_tokenize(body, *res);
    if (path == "/detokenize") return route_detokenize(body, *res);
    if (path == "/apply-template") return route_apply_template(body, *res);
    route_chat(body, std::move(res), path.find("chat") != std::string::npos);
}

Expected<std::unique_ptr<ApiServer>> ApiServer::start(const ApiServerOptions& opts) {
    std::unique_ptr<ApiServer> s(new ApiServer());
    s->state_ = std::make_shared<State>();
    s->state_->opts = opts;
    std::weak_ptr<State> weak = s->state_;
    auto http = HttpServer::start(opts.http, [weak](HttpRequest&& req, std::shared_ptr<HttpResponder> res) {
        auto st = weak.lock();
        if (!st) {
            res->send(503, http_error_json("The server is shutting down.", "server_error"));
            return;
        }
        try {
            st->handle(std::move(req), std::move(res));
        } catch (const std::exception& e) {
            // Library exceptions (nlohmann) stop here: the client gets a 500, the server lives.
            FERROX_LOG_ERROR("request failed: %s", e.what());
        }
    });
    if (!http.has_value()) return http.status();
    s->http_ = std::move(*http);
    return s;
}

Status ApiServer::set_engine(std::unique_ptr<Engine> engine) {
    State& st = *state_;
    const std::string& src = st.opts.chat_template_override.empty() ? engine->model().chat_template
                                                                     : st.opts.chat_template_override;
    auto t = JinjaTemplate::parse(src.empty() ? std::string(kChatMlTemplate) : src);
    if (!t.has_value()) return Status(t.status().code(), "chat template: " + t.status().message());
    st.tmpl = std::make_unique<JinjaTemplate>(std::move(*t));
    st.model_id = st.opts.alias.empty() ? engine->model().name : st.opts.alias;
    st.engine = std::move(engine);
    st.ready.store(true);
    return Status::ok();
}

int ApiServer::port() const { return http_->port(); }

void ApiServer::shutdown(int grace_ms) {
    if (!state_) return;
    state_->stopping.store(true);
    if (state_->engine) state_->engine->shutdown();  // cancels generation: streams end
    if (http_) http_->shutdown(grace_ms);
    http_.reset();
    state_->engine.reset();
}

ApiServer::~ApiServer() { shutdown(0); }

}  // namespace ferrox

// What LLM-aware routers ask a replica: vLLM's tokenize and render routes (vllm-router's
// cache_aware policy tokenizes each prompt on the replica before routing), the load and info
// routes of vllm-router and SGLang's router, and vLLM's metric names.
#include "server/router_protocol.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "server/context.h"
#include "server/json_util.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"

namespace ferrox {

namespace {

void fail_openai(HttpResponder& res, const ApiError& e) { Router::send_error(res, Protocol::kOpenAI, e); }

// The tokens the engine would see for a chat: the template with the generation prompt (unless
// the body says add_generation_prompt false), then the prompt builder's BOS rule, as chat
// generation tokenizes; an explicit add_special_tokens takes the tokenizer's rule instead.
bool chat_tokens(const ServedModel& m, const json& body, std::string* text, std::vector<int32_t>* ids,
                 ApiError* err) {
    const Fields f{body, ""};
    bool add_generation_prompt = true;
    if (!f.boolean("add_generation_prompt", &add_generation_prompt, err)) return false;
    Conversation conv;
    if (!parse_openai_conversation(body, &conv, err)) return false;
    auto prompt = m.prompt().render(conv, add_generation_prompt);
    if (!prompt.has_value()) {
        *err = from_status(prompt.status(), "messages");
        return false;
    }
    *text = std::move(*prompt);
    if (const json* a = f.find("add_special_tokens")) {
        if (!a->is_boolean()) {
            *err = wrong_type("add_special_tokens", "a boolean", *a);
            return false;
        }
        *ids = m.tokenize(*text, a->get<bool>(), true);
    } else {
        *ids = m.prompt().tokenize(*text);
    }
    return true;
}

// A completion prompt: a string (the tokenizer's special tokens on unless add_special_tokens
// is false) or an array of token ids, taken as they are.
bool prompt_tokens(const ServedModel& m, const json& p, const Fields& f, std::string* text, std::vector<int32_t>* ids,
                   ApiError* err) {
    bool add_special = true;
    if (!f.boolean("add_special_tokens", &add_special, err)) return false;
    if (p.is_string()) {
        *text = p.get<std::string>();
        *ids = m.tokenize(*text, add_special, true);
        return true;
    }
    if (p.is_array()) {
        if (!read_token_ids(p, "prompt", m, ids, err)) return false;
        *text = m.detokenize(*ids);
        return true;
    }
    *err = bad_param("prompt", "'prompt' must be a string or an array of token ids.");
    return false;
}

json token_strs(const ServedModel& m, const std::vector<int32_t>& ids) {
    json out = json::array();
    for (int32_t id : ids) out.push_back(m.token_piece(id, true));
    return out;
}

// vLLM's render answer (the prompt as the engine takes it), with the tokenize answer's keys too
// so that a router reading either finds the ids.
json render_answer(const ServedModel& m, const std::string& text, const std::vector<int32_t>& ids) {
    return json{{"model", m.info().id},
                {"prompt", text},
                {"prompt_token_ids", ids},
                {"token_ids", ids},
                {"tokens", ids},
                {"count", ids.size()},
                {"max_model_len", m.info().n_ctx}};
}

void route_render_chat(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    ApiError err;
    ModelLease m;
    std::string name, text;
    std::vector<int32_t> ids;
    if (!Fields{req.body, ""}.string("model", &name, &err) || !ctx.acquire(name, &m, &err) ||
        !chat_tokens(*m, req.body, &text, &ids, &err))
        return fail_openai(*res, err);
    res->send(200, dump(render_answer(*m, text, ids)));
}

// A prompt, or a list of prompts (strings or id arrays): one answer, or an array of them.
void route_render_completion(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    ModelLease m;
    std::string name;
    if (!f.string("model", &name, &err) || !ctx.acquire(name, &m, &err)) return fail_openai(*res, err);
    const json* p = f.find("prompt");
    if (!p) return fail_openai(*res, bad_param("prompt", "'prompt' is required."));
    const bool list = p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array());
    if (list && p->size() > 1024) return fail_openai(*res, bad_param("prompt", "At most 1024 prompts."));
    json out = json::array();
    for (size_t i = 0; i < (list ? p->size() : 1); ++i) {
        std::string text;
        std::vector<int32_t> ids;
        if (!prompt_tokens(*m, list ? (*p)[i] : *p, f, &text, &ids, &err)) return fail_openai(*res, err);
        out.push_back(render_answer(*m, text, ids));
    }
    res->send(200, dump(list ? out : out.front()));
}

struct LoadSum {
    int n_running = 0, n_waiting = 0;
    int64_t used_tokens = 0, total_tokens = 0;
};

LoadSum load_sum(const std::vector<ModelLease>& models) {
    LoadSum s;
    for (const auto& m : models) {
        if (m->kind() != ModelKind::kGenerate) continue;
        const ServedModel::Load l = m->load();
        s.n_running += l.n_running;
        s.n_waiting += l.n_waiting;
        s.used_tokens += static_cast<int64_t>(l.kv_blocks_used) * m->info().kv_block_size;
        s.total_tokens += static_cast<int64_t>(l.kv_blocks_total) * m->info().kv_block_size;
    }
    return s;
}

// vllm-router's power_of_two reads {"load": N} (requests running or queued); SGLang's names beside.
void route_get_load(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    const LoadSum s = load_sum(ctx.models());
    res->send(200, dump(json{{"load", s.n_running + s.n_waiting},
                             {"num_reqs", s.n_running + s.n_waiting},
                             {"num_running_reqs", s.n_running},
                             {"num_waiting_reqs", s.n_waiting},
                             {"num_tokens", s.used_tokens}}));
}

// SGLang's GET /v1/loads: one entry per data-parallel rank (ferrox has one), plus ours per model.
void route_loads(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    const auto models = ctx.models();
    const LoadSum s = load_sum(models);
    json per_model = json::array();
    for (const auto& m : models) {
        if (m->kind() != ModelKind::kGenerate) continue;
        const ServedModel::Load l = m->load();
        per_model.push_back({{"model", m->info().id},
                             {"num_running_reqs", l.n_running},
                             {"num_waiting_reqs", l.n_waiting},
                             {"kv_blocks_used", l.kv_blocks_used},
                             {"kv_blocks_total", l.kv_blocks_total}});
    }
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    json load = {{"dp_rank", 0},
                 {"num_running_reqs", s.n_running},
                 {"num_waiting_reqs", s.n_waiting},
                 {"num_total_reqs", s.n_running + s.n_waiting},
                 {"num_used_tokens", s.used_tokens},
                 {"max_total_num_tokens", s.total_tokens},
                 {"token_usage", s.total_tokens > 0 ? static_cast<double>(s.used_tokens) / s.total_tokens : 0.0}};
    res->send(200, dump(json{{"timestamp", now_ms / 1000.0},
                             {"version", "ferrox"},
                             {"dp_rank_count", 1},
                             {"loads", json::array({load})},
                             {"models", per_model}}));
}

// vllm-router's /get_server_info (dp_size, model_id, worker_type ...), also at /server_info.
void route_server_info(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    ModelLease m;
    ApiError err;
    if (!ctx.acquire("", &m, &err, ModelUse::kAny)) return fail_openai(*res, err);
    const ModelInfo& info = m->info();
    json names = json::array();
    for (const auto& x : ctx.models()) names.push_back(x->info().id);
    res->send(200, dump(json{{"model_id", info.id},
                             {"model_path", info.path},
                             {"served_model_name", info.id},
                             {"served_model_names", names},
                             {"worker_type", "regular"},
                             {"dp_size", 1},
                             {"tp_size", 1},
                             {"max_model_len", info.n_ctx},
                             {"context_length", info.n_ctx},
                             {"page_size", info.kv_block_size},
                             {"block_size", info.kv_block_size},
                             {"num_blocks", info.kv_blocks},
                             {"max_running_requests", info.n_parallel},
                             {"enable_prefix_caching", info.prefix_cache},
                             {"chat_template", info.chat_template},
                             {"tool_parser", info.tool_format},
                             {"version", "ferrox"}}));
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out;
}

// The value of an unlabelled sample `name` in Prometheus text (0 when absent).
double sample(const std::string& text, const std::string& name) {
    size_t pos = 0;
    while ((pos = text.find(name + " ", pos)) != std::string::npos) {
        if (pos == 0 || text[pos - 1] == '\n') return std::strtod(text.c_str() + pos + name.size() + 1, nullptr);
        pos += name.size();
    }
    return 0;
}

std::string number(double v) {
    char b[40];
    std::snprintf(b, sizeof b, "%.17g", v);
    return b;
}

// The samples of histogram `from` in `text` renamed `to`, with `label` first in their labels.
std::string renamed_histogram(const std::string& text, const std::string& from, const std::string& to,
                              const std::string& label) {
    std::string out;
    size_t i = 0;
    while ((i = text.find(from, i)) != std::string::npos) {
        const size_t end = text.find('\n', i);
        const std::string line = text.substr(i, end == std::string::npos ? std::string::npos : end - i);
        const bool line_start = i == 0 || text[i - 1] == '\n';
        i = end == std::string::npos ? text.size() : end + 1;
        if (!line_start) continue;
        std::string rest = line.substr(from.size());  // "_bucket{le=...} n", "_sum n", "_count n"
        const size_t brace = rest.find('{'), space = rest.find(' ');
        if (brace != std::string::npos && brace < space) {
            out += to + rest.substr(0, brace + 1) + label + "," + rest.substr(brace + 1) + "\n";
        } else if (space != std::string::npos) {
            out += to + rest.substr(0, space) + "{" + label + "}" + rest.substr(space) + "\n";
        }
    }
    return out;
}

}  // namespace

bool is_vllm_tokenize_body(const RouteRequest& req) {
    const json& b = req.body;
    return b.is_object() && !b.contains("content") && (b.contains("prompt") || b.contains("messages"));
}

void route_tokenize_vllm(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    ModelLease m;
    std::string name, text;
    std::vector<int32_t> ids;
    bool return_strs = false;
    if (!f.string("model", &name, &err) || !f.boolean("return_token_strs", &return_strs, &err) ||
        !ctx.acquire(name, &m, &err, ModelUse::kAny))
        return fail_openai(*res, err);
    if (req.body.contains("prompt") && req.body.contains("messages")) {
        return fail_openai(*res, bad_param("messages", "Give either 'prompt' or 'messages', not both."));
    }
    if (req.body.contains("messages")) {
        if (m->kind() != ModelKind::kGenerate) {
            return fail_openai(*res, bad_param("messages", "An embedding model has no chat template."));
        }
        if (!chat_tokens(*m, req.body, &text, &ids, &err)) return fail_openai(*res, err);
    } else {
        const json* p = f.find("prompt");
        if (!p || !p->is_string()) return fail_openai(*res, bad_param("prompt", "'prompt' must be a string."));
        if (!prompt_tokens(*m, *p, f, &text, &ids, &err)) return fail_openai(*res, err);
    }
    res->send(200, dump(json{{"count", ids.size()},
                             {"max_model_len", m->info().n_ctx},
                             {"tokens", ids},
                             {"token_strs", return_strs ? token_strs(*m, ids) : json(nullptr)}}));
}

std::string cache_config_info_metrics(const std::vector<ModelLease>& models) {
    std::string out =
        "# HELP ferrox_cache_config_info The KV cache's configuration (value 1): block size in tokens and blocks in "
        "the pool.\n# TYPE ferrox_cache_config_info gauge\n";
    for (const auto& m : models) {
        const ModelInfo& info = m->info();
        if (m->kind() != ModelKind::kGenerate) continue;
        out += "ferrox_cache_config_info{model=\"" + label_value(info.id) + "\",block_size=\"" +
               std::to_string(info.kv_block_size) + "\",num_blocks=\"" + std::to_string(info.kv_blocks) + "\"} 1\n";
    }
    return out;
}

std::string vllm_metrics(const std::vector<ModelLease>& models, const std::vector<std::string>& texts) {
    struct Family {
        const char* name;
        const char* type;
        const char* help;
        std::string lines;
    };
    Family fam[] = {
        {"vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", {}},
        {"vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", {}},
        {"vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", {}},
        {"vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig", {}},
        {"vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", {}},
        {"vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", {}},
        {"vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", {}},
        {"vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", {}},
        {"vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", {}},
        {"vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.", {}},
        {"vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.", {}},
    };
    for (size_t k = 0; k < models.size() && k < texts.size(); ++k) {
        const ServedModel& m = *models[k];
        if (m.kind() != ModelKind::kGenerate) continue;
        const ModelInfo& info = m.info();
        const std::string& t = texts[k];
        const std::string label = "model_name=\"" + label_value(info.id) + "\"";
        const std::string sel = "{" + label + "} ";
        const ServedModel::Load l = m.load();
        fam[0].lines += fam[0].name + sel + std::to_string(l.n_running) + "\n";
        fam[1].lines += fam[1].name + sel + std::to_string(l.n_waiting) + "\n";
        fam[2].lines += fam[2].name + sel +
                        number(l.kv_blocks_total > 0 ? static_cast<double>(l.kv_blocks_used) / l.kv_blocks_total : 0.0) +
                        "\n";
        fam[3].lines += std::string(fam[3].name) + "{" + label + ",block_size=\"" + std::to_string(info.kv_block_size) +
                        "\",num_gpu_blocks=\"" + std::to_string(info.kv_blocks) + "\",cache_dtype=\"" +
                        label_value(info.kv_type) + "\",enable_prefix_caching=\"" +
                        (info.prefix_cache ? "True" : "False") + "\"} 1\n";
        fam[4].lines += fam[4].name + sel + number(sample(t, "ferrox_prompt_tokens_total")) + "\n";
        fam[5].lines += fam[5].name + sel + number(sample(t, "ferrox_generated_tokens_total")) + "\n";
        fam[6].lines += fam[6].name + sel + number(sample(t, "ferrox_prefix_cache_lookup_tokens_total")) + "\n";
        fam[7].lines += fam[7].name + sel + number(sample(t, "ferrox_prefix_cache_hit_tokens_total")) + "\n";
        fam[8].lines += fam[8].name + sel + number(sample(t, "ferrox_preemptions_total")) + "\n";
        fam[9].lines += renamed_histogram(t, "ferrox_time_to_first_token_seconds", fam[9].name, label);
        fam[10].lines += renamed_histogram(t, "ferrox_inter_token_latency_seconds", fam[10].name, label);
    }
    std::string out;
    for (const Family& f : fam) {
        if (f.lines.empty()) continue;
        out += std::string("# HELP ") + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.type + "\n" + f.lines;
    }
    return out;
}

void add_router_protocol_routes(Router& router, ServerContext& ctx) {
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    router.add({.method = "POST", .path = "/v1/completions/render", .protocol = Protocol::kOpenAI,
                .fn = bind(route_render_completion), .json_body = true});
    router.add({.method = "POST", .path = "/v1/chat/completions/render", .protocol = Protocol::kOpenAI,
                .fn = bind(route_render_chat), .json_body = true});
    // Routers poll load without the API key (vllm-router's get_load sends none): public, as /health.
    router.add({.method = "GET", .path = "/get_load", .protocol = Protocol::kOpenAI, .fn = bind(route_get_load),
                .needs_auth = false});
    router.add({.method = "GET", .path = "/v1/loads", .protocol = Protocol::kOpenAI, .fn = bind(route_loads),
                .needs_auth = false});
    for (const char* path : {"/server_info", "/get_server_info"}) {
        router.add({.method = "GET", .path = path, .protocol = Protocol::kOpenAI, .fn = bind(route_server_info)});
    }
}

}  // namespace ferrox

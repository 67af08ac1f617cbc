// llama.cpp's utility routes: /tokenize, /detokenize, /apply-template, /props, and the
// liveness and metrics routes every protocol's users share (/health, /metrics).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "server/context.h"
#include "server/llamacpp/llamacpp.h"
#include "server/llamacpp/slots.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"
#include "server/router_protocol.h"

namespace ferrox {

void add_completion_route(Router& router, ServerContext& ctx);
void add_infill_route(Router& router, ServerContext& ctx);
void add_slot_action_route(Router& router, ServerContext& ctx);

namespace {

void route_tokenize(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    // vLLM's form (what vllm-router's cache_aware policy sends): no "content", a prompt or messages.
    if (is_vllm_tokenize_body(req)) return route_tokenize_vllm(ctx, req, std::move(res));
    const Fields f{req.body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    ModelLease m;
    std::string name, content;
    if (!f.string("model", &name, &err) || !ctx.acquire(name, &m, &err, ModelUse::kAny)) return fail(err);
    const json* c = f.find("content");
    if (!c || !c->is_string()) return fail(bad_param("content", "'content' must be a string."));
    bool add_special = false, parse_special = true, with_pieces = false;
    if (!f.boolean("add_special", &add_special, &err) || !f.boolean("parse_special", &parse_special, &err) ||
        !f.boolean("with_pieces", &with_pieces, &err))
        return fail(err);
    json tokens = json::array();
    for (int32_t id : m->tokenize(c->get<std::string>(), add_special, parse_special)) {
        if (with_pieces) {
            tokens.push_back({{"id", id}, {"piece", m->token_piece(id, true)}});
        } else {
            tokens.push_back(id);
        }
    }
    res->send(200, dump(json{{"tokens", tokens}}));
}

void route_detokenize(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    ModelLease m;
    std::string name;
    if (!f.string("model", &name, &err) || !ctx.acquire(name, &m, &err, ModelUse::kAny)) return fail(err);
    const json* t = f.find("tokens");
    if (!t || !t->is_array()) return fail(bad_param("tokens", "'tokens' must be an array of token ids."));
    std::vector<int32_t> ids;
    if (!read_token_ids(*t, "tokens", *m, &ids, &err)) return fail(err);
    // Both servers take {"tokens"}: llama.cpp answers "content", vLLM "prompt"; both keys.
    const std::string text = m->detokenize(ids);
    res->send(200, dump(json{{"content", text}, {"prompt", text}}));
}

void route_apply_template(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    ModelLease m;
    std::string name;
    if (!Fields{req.body, ""}.string("model", &name, &err) || !ctx.acquire(name, &m, &err)) return fail(err);
    Conversation conv;
    if (!parse_openai_conversation(req.body, &conv, &err)) return fail(err);
    auto prompt = m->prompt().render(conv, true);
    if (!prompt.has_value()) return fail(from_status(prompt.status(), "messages"));
    res->send(200, dump(json{{"prompt", *prompt}}));
}

// llama-server's /props: the generation defaults, the slots and the context one request can
// get, plus what ferrox adds about its KV pool.
void route_props(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    ModelLease m;
    ApiError err;
    if (!ctx.acquire("", &m, &err, ModelUse::kAny)) return Router::send_error(*res, Protocol::kLlamaCpp, err);
    const ModelInfo& info = m->info();
    // The defaults a request that sets nothing gets: llama-server's flags (--temp, --seed, ...).
    const SamplingDefaults& sd = ctx.opts.sampling;
    const SamplingParams& sp = sd.params;
    json params = {{"n_predict", ctx.opts.default_max_tokens},
                   {"temperature", echo_float(sp.temperature)},
                   {"top_k", sp.top_k},
                   {"top_p", echo_float(sp.top_p)},
                   {"min_p", echo_float(sp.min_p)},
                   {"repeat_penalty", echo_float(sp.repeat_penalty)},
                   {"repeat_last_n", sp.penalty_last_n},
                   {"presence_penalty", echo_float(sp.presence_penalty)},
                   {"frequency_penalty", echo_float(sp.frequency_penalty)},
                   {"seed", sd.seeded ? json(sp.seed) : json(-1)},
                   {"cache_prompt", info.prefix_cache}};
    json props = {
        {"default_generation_settings", {{"n_ctx", info.n_ctx}, {"params", params}}},
        {"total_slots", info.n_parallel},
        {"n_ctx", info.n_ctx},
        {"model_path", info.path},
        {"model_alias", info.id},
        {"chat_template", info.chat_template},
        {"tool_call_format", info.tool_format},
        {"modalities", {{"vision", false}, {"audio", false}}},
        {"kv_cache",
         {{"type", info.kv_type},
          {"block_size", info.kv_block_size},
          {"blocks", info.kv_blocks},
          {"bytes", info.kv_bytes},
          {"prefix_cache", info.prefix_cache}}},
        {"build_info", "ferrox"},
    };
    if (!info.draft_model.empty()) props["speculative"] = {{"draft_model", info.draft_model}};
    res->send(200, dump(props));
}

// Each model's engine metrics with a `model` label; HELP and TYPE once per family.
std::string labelled(const std::string& text, const std::string& model, bool with_comments) {
    std::string out;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find('\n', i);
        if (j == std::string::npos) j = text.size();
        const std::string line = text.substr(i, j - i);
        i = j + 1;
        if (line.empty()) continue;
        if (line[0] == '#') {
            if (with_comments) out += line + "\n";
            continue;
        }
        const std::string label = "model=\"" + model + "\"";
        const size_t brace = line.find('{');
        const size_t space = line.find(' ');
        if (brace != std::string::npos && brace < space) {
            out += line.substr(0, brace + 1) + label + "," + line.substr(brace + 1) + "\n";
        } else if (space != std::string::npos) {
            out += line.substr(0, space) + "{" + label + "}" + line.substr(space) + "\n";
        }
    }
    return out;
}

// The value of an unlabelled sample `name` in Prometheus text (0 when absent).
double sample_value(const std::string& text, const std::string& name) {
    size_t pos = 0;
    while ((pos = text.find(name + " ", pos)) != std::string::npos) {
        if (pos == 0 || text[pos - 1] == '\n') return std::strtod(text.c_str() + pos + name.size() + 1, nullptr);
        pos += name.size();
    }
    return 0;
}

// llama-server's metric names (--metrics-compat llamacpp), summed over the generation models
// (llama-server serves one, without labels), so its dashboards and alerts read ferrox:
// counters from the engines' own, prompt and generation time from the slot board, and the
// gauges over the window since the previous scrape, as llama-server averages them.
std::string llamacpp_metrics(ServerContext& ctx, const std::vector<ModelLease>& models) {
    double prompt_tokens = 0, cached = 0, predicted = 0, n_decode = 0, drafted = 0, accepted = 0;
    double running = 0, waiting = 0, kv_used = 0, kv_total = 0, kv_tokens = 0;
    for (const auto& m : models) {
        if (m->kind() != ModelKind::kGenerate) continue;
        const std::string text = m->prometheus();
        prompt_tokens += sample_value(text, "ferrox_prompt_tokens_total");
        cached += sample_value(text, "ferrox_prefix_cache_hit_tokens_total");
        predicted += sample_value(text, "ferrox_generated_tokens_total");
        n_decode += sample_value(text, "ferrox_engine_steps_total");
        drafted += sample_value(text, "ferrox_spec_draft_tokens_total");
        accepted += sample_value(text, "ferrox_spec_accepted_tokens_total");
        const ServedModel::Load l = m->load();
        running += l.n_running;
        waiting += l.n_waiting;
        kv_used += l.kv_blocks_used;
        kv_total += l.kv_blocks_total;
        kv_tokens += static_cast<double>(l.kv_blocks_used) * m->info().kv_block_size;
    }
    SlotBoard::Timing total, window;
    if (ctx.slots) ctx.slots->timing(&total, &window);
    const auto rate = [](double n, double s) { return s > 0 ? n / s : 0.0; };
    // Sequences that produced a token in a step: generated tokens less the accepted drafts
    // (those came without a step of their own), per step.
    const double busy_per_decode = std::max(0.0, predicted - accepted) / std::max(1.0, n_decode);
    struct Item {
        const char* name;
        const char* help;
        double value;
    };
    const Item counters[] = {
        {"prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", prompt_tokens - cached},
        {"prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", cached},
        {"prompt_seconds_total", "Total time spent processing prompts", total.prompt_s},
        {"tokens_predicted_total", "Number of generation tokens processed", predicted},
        {"tokens_predicted_seconds_total", "Total time spent generating tokens", total.predicted_s},
        {"n_decode_total", "Total number of llama_decode() calls", n_decode},
        {"n_tokens_max", "Largest observed sequence length (prompt + generation)", static_cast<double>(total.n_tokens_max)},
        {"spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", drafted},
        {"spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model", accepted},
    };
    const Item gauges[] = {
        {"prompt_tokens_seconds", "Average prompt throughput in tokens/s", rate(window.prompt_tokens, window.prompt_s)},
        {"predicted_tokens_seconds", "Average generation throughput in tokens/s",
         rate(window.predicted_tokens, window.predicted_s)},
        {"kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", kv_total > 0 ? kv_used / kv_total : 0.0},
        {"kv_cache_tokens", "KV-cache tokens.", kv_tokens},
        {"requests_processing", "Number of requests processing", running},
        {"requests_deferred", "Number of requests deferred", waiting},
        {"n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", busy_per_decode},
    };
    std::string out;
    auto add = [&out](const char* type, const Item& it) {
        char value[64];
        std::snprintf(value, sizeof value, "%.17g", it.value);
        out += std::string("# HELP llamacpp:") + it.name + " " + it.help + "\n# TYPE llamacpp:" + it.name + " " + type +
               "\nllamacpp:" + it.name + " " + value + "\n";
    };
    for (const Item& it : counters) add("counter", it);
    for (const Item& it : gauges) add("gauge", it);
    return out;
}

// Seconds since the epoch when the routes were added (server start); set once, read by any thread.
int64_t process_start_unix() {
    static const int64_t t =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    return t;
}

void route_metrics(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    // Served while draining (the gauges show the running requests ending), not before a model
    // is ready or once the server stops.
    if (ctx.stopping.load() || !ctx.ready()) {
        ApiError e;
        e.status = 503;
        e.type = "server_error";
        e.message = ctx.stopping.load() ? "The server is shutting down." : "The model is still loading.";
        return Router::send_error(*res, Protocol::kLlamaCpp, e);
    }
    const auto models = ctx.models();
    // Families must not be split: gather every model's lines per family, in order.
    std::vector<std::string> order;
    std::map<std::string, std::string> families;
    std::vector<std::string> texts(models.size());  // each engine's text, read once per scrape
    for (size_t k = 0; k < models.size(); ++k) {
        texts[k] = models[k]->prometheus();
        const std::string text = labelled(texts[k], models[k]->info().id, true);
        std::string family;
        size_t i = 0;
        while (i < text.size()) {
            size_t j = text.find('\n', i);
            const std::string line = text.substr(i, j - i + 1);
            i = j + 1;
            if (line.rfind("# HELP ", 0) == 0) {
                family = line.substr(7, line.find(' ', 7) - 7);
                if (!families.count(family)) order.push_back(family);
                if (k > 0) continue;
            } else if (line.rfind("# TYPE ", 0) == 0 && k > 0) {
                continue;
            }
            families[family] += line;
        }
    }
    std::string out;
    for (const auto& f : order) out += families[f];
    out += cache_config_info_metrics(models);  // the model server protocol's cache description
    out += ctx.cache_audit.prometheus();  // server-wide: by reason, no model label
    if (ctx.opts.metrics_vllm) out += vllm_metrics(models, texts);
    if (ctx.opts.metrics_llamacpp) out += llamacpp_metrics(ctx, models);
    // llama-server's header: when the process started (Unix seconds), so a scraper tells a
    // restart (counters back to zero) from a counter reset.
    res->send(200, out, "text/plain; version=0.0.4", {{"Process-Start-Time-Unix", std::to_string(process_start_unix())}});
}

}  // namespace

// The value of `key` in a raw query string ("" when absent; no percent-decoding: the values
// /slots takes are plain words).
std::string query_param(const std::string& query, const std::string& key) {
    size_t i = 0;
    while (i <= query.size()) {
        size_t amp = query.find('&', i);
        if (amp == std::string::npos) amp = query.size();
        const std::string kv = query.substr(i, amp - i);
        const size_t eq = kv.find('=');
        if (kv.substr(0, eq) == key) return eq == std::string::npos ? "1" : kv.substr(eq + 1);
        i = amp + 1;
    }
    return "";
}

namespace {

// llama-server's GET /slots: one entry per parallel slot of the model (?model= names one; the
// default model otherwise), busy or not, with the sampling settings and progress of the request
// it runs or ran last. ?fail_on_no_slot=1 answers 503 when every slot is busy.
void route_slots(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    if (!ctx.opts.slots_endpoint || !ctx.slots) {
        ApiError e;
        e.status = 501;
        e.type = "not_supported_error";
        e.message = "This server does not support slots endpoint. Start it with `--slots`";
        return fail(e);
    }
    ModelLease m;
    ApiError err;
    if (!ctx.acquire(query_param(req.http.query, "model"), &m, &err, ModelUse::kAny)) return fail(err);
    const ModelInfo& info = m->info();
    json out = json::array();
    int n_idle = 0;
    const auto slots = ctx.slots->snapshot(info.id, std::max(1, info.n_parallel));
    for (size_t i = 0; i < slots.size(); ++i) {
        const SlotBoard::Slot& s = slots[i];
        n_idle += s.busy ? 0 : 1;
        json e = {{"id", i}, {"n_ctx", info.n_ctx}, {"speculative", !info.draft_model.empty()}, {"is_processing", s.busy}};
        if (s.used) {
            const SamplingParams& sp = s.sampling;
            e["id_task"] = s.id_task;
            e["n_prompt_tokens"] = s.n_prompt;
            e["params"] = {{"seed", sp.seed},
                           {"temperature", echo_float(sp.temperature)},
                           {"top_k", sp.top_k},
                           {"top_p", echo_float(sp.top_p)},
                           {"min_p", echo_float(sp.min_p)},
                           {"repeat_last_n", sp.penalty_last_n},
                           {"repeat_penalty", echo_float(sp.repeat_penalty)},
                           {"presence_penalty", echo_float(sp.presence_penalty)},
                           {"frequency_penalty", echo_float(sp.frequency_penalty)},
                           {"max_tokens", s.max_tokens},
                           {"n_predict", s.max_tokens},
                           {"ignore_eos", s.ignore_eos},
                           {"stream", s.stream},
                           {"n_probs", s.n_probs},
                           {"stop", s.stop},
                           {"samplers", {"penalties", "top_k", "top_p", "min_p", "temperature"}}};
            // An idle slot keeps its last request's settings but no budget, as llama-server
            // resets a released slot's n_remain and n_decoded.
            e["next_token"] = json::array(
                {{{"has_next_token", s.busy},
                  {"has_new_line", s.has_new_line},
                  {"n_remain", !s.busy || s.max_tokens < 0 ? -1 : std::max(0, s.max_tokens - s.n_decoded)},
                  {"n_decoded", s.busy ? s.n_decoded : 0}}});
        }
        out.push_back(std::move(e));
    }
    if (!query_param(req.http.query, "fail_on_no_slot").empty() && n_idle == 0) {
        ApiError e;
        e.status = 503;
        e.type = "unavailable_error";
        e.message = "no slot available";
        return fail(e);
    }
    res->send(200, dump(out));
}

// /health: llama-server's (200 once a model can answer, 503 before); /health/ready: the same
// with the reason, for load balancers.
void route_health(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const bool ready_route = req.http.path == "/health/ready";
    if (ctx.stopping.load() || ctx.draining.load()) {
        // Draining (SIGTERM): not ready, so load balancers and routers send nothing new.
        res->send(503, dump(json{{"status", "shutting down"}}), "application/json", {{"Retry-After", "1"}});
    } else if (!ctx.ready()) {
        json body = {{"status", "loading model"}};
        if (ready_route) body["reason"] = ctx.registry->any_loading() ? "the model is loading" : "no model is loaded";
        res->send(503, dump(body), "application/json", {{"Retry-After", "1"}});
    } else {
        json body = {{"status", "ok"}};
        if (ready_route) body["models"] = ctx.models().size();
        res->send(200, dump(body));
    }
}

}  // namespace

void add_llamacpp_routes(Router& router, ServerContext& ctx) {
    process_start_unix();
    ctx.slots = std::make_shared<SlotBoard>();
    add_completion_route(router, ctx);
    add_infill_route(router, ctx);
    add_slot_action_route(router, ctx);
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    router.add({.method = "POST", .path = "/tokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_tokenize), .json_body = true});
    router.add({.method = "POST", .path = "/detokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_detokenize), .json_body = true});
    router.add({.method = "POST", .path = "/apply-template", .protocol = Protocol::kLlamaCpp, .fn = bind(route_apply_template), .json_body = true});
    router.add({.method = "GET", .path = "/props", .protocol = Protocol::kLlamaCpp, .fn = bind(route_props)});
    router.add({.method = "GET", .path = "/metrics", .protocol = Protocol::kLlamaCpp, .fn = bind(route_metrics),
                .needs_ready = false});
    router.add({.method = "GET", .path = "/slots", .protocol = Protocol::kLlamaCpp, .fn = bind(route_slots)});
    for (const char* path : {"/health", "/health/ready"}) {
        router.add({.method = "GET", .path = path, .protocol = Protocol::kLlamaCpp, .fn = bind(route_health),
                    .needs_auth = false, .needs_ready = false});
    }
}

}  // namespace ferrox

// llama.cpp's utility routes: /tokenize, /detokenize, /apply-template, /props, and the
// liveness and metrics routes every protocol's users share (/health, /metrics).
#include "server/context.h"
#include "server/llamacpp/llamacpp.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"

namespace ferrox {

void add_completion_route(Router& router, ServerContext& ctx);

namespace {

void route_tokenize(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    ModelLease m;
    std::string name, content;
    if (!f.string("model", &name, &err) || !ctx.acquire(name, &m, &err)) return fail(err);
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
    if (!f.string("model", &name, &err) || !ctx.acquire(name, &m, &err)) return fail(err);
    const json* t = f.find("tokens");
    if (!t || !t->is_array()) return fail(bad_param("tokens", "'tokens' must be an array of token ids."));
    std::vector<int32_t> ids;
    if (!read_token_ids(*t, "tokens", *m, &ids, &err)) return fail(err);
    res->send(200, dump(json{{"content", m->detokenize(ids)}}));
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
    if (!ctx.acquire("", &m, &err)) return Router::send_error(*res, Protocol::kLlamaCpp, err);
    const ModelInfo& info = m->info();
    json params = {{"n_predict", ctx.opts.default_max_tokens}, {"temperature", 0.8}, {"top_k", 40},
                   {"top_p", 0.95}, {"min_p", 0.05}, {"seed", -1}, {"cache_prompt", info.prefix_cache}};
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
    res->send(200, dump(props));
}

void route_metrics(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    ModelLease m;
    ApiError err;
    if (!ctx.acquire("", &m, &err)) return Router::send_error(*res, Protocol::kLlamaCpp, err);
    res->send(200, m->prometheus(), "text/plain; version=0.0.4");
}

void route_health(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    if (ctx.stopping.load()) {
        res->send(503, dump(json{{"status", "shutting down"}}));
    } else if (!ctx.ready.load()) {
        res->send(503, dump(json{{"status", "loading model"}}), "application/json", {{"Retry-After", "1"}});
    } else {
        res->send(200, dump(json{{"status", "ok"}}));
    }
}

}  // namespace

void add_llamacpp_routes(Router& router, ServerContext& ctx) {
    add_completion_route(router, ctx);
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    router.add({.method = "POST", .path = "/tokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_tokenize), .json_body = true});
    router.add({.method = "POST", .path = "/detokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_detokenize), .json_body = true});
    router.add({.method = "POST", .path = "/apply-template", .protocol = Protocol::kLlamaCpp, .fn = bind(route_apply_template), .json_body = true});
    router.add({.method = "GET", .path = "/props", .protocol = Protocol::kLlamaCpp, .fn = bind(route_props)});
    router.add({.method = "GET", .path = "/metrics", .protocol = Protocol::kLlamaCpp, .fn = bind(route_metrics)});
    router.add({.method = "GET", .path = "/health", .protocol = Protocol::kLlamaCpp, .fn = bind(route_health),
                .needs_auth = false, .needs_ready = false});
}

}  // namespace ferrox

// llama.cpp's utility routes: /tokenize, /detokenize, /apply-template, /props, and the
// liveness and metrics routes every protocol's users share (/health, /metrics).
#include <map>

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
    if (!ctx.acquire("", &m, &err, ModelUse::kAny)) return Router::send_error(*res, Protocol::kLlamaCpp, err);
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

void route_metrics(ServerContext& ctx, RouteRequest&, std::shared_ptr<HttpResponder> res) {
    const auto models = ctx.models();
    // Families must not be split: gather every model's lines per family, in order.
    std::vector<std::string> order;
    std::map<std::string, std::string> families;
    for (size_t k = 0; k < models.size(); ++k) {
        const std::string text = labelled(models[k]->prometheus(), models[k]->info().id, true);
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
    res->send(200, out, "text/plain; version=0.0.4");
}

// /health: llama-server's (200 once a model can answer, 503 before); /health/ready: the same
// with the reason, for load balancers.
void route_health(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const bool ready_route = req.http.path == "/health/ready";
    if (ctx.stopping.load()) {
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
    add_completion_route(router, ctx);
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    router.add({.method = "POST", .path = "/tokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_tokenize), .json_body = true});
    router.add({.method = "POST", .path = "/detokenize", .protocol = Protocol::kLlamaCpp, .fn = bind(route_detokenize), .json_body = true});
    router.add({.method = "POST", .path = "/apply-template", .protocol = Protocol::kLlamaCpp, .fn = bind(route_apply_template), .json_body = true});
    router.add({.method = "GET", .path = "/props", .protocol = Protocol::kLlamaCpp, .fn = bind(route_props)});
    router.add({.method = "GET", .path = "/metrics", .protocol = Protocol::kLlamaCpp, .fn = bind(route_metrics)});
    for (const char* path : {"/health", "/health/ready"}) {
        router.add({.method = "GET", .path = path, .protocol = Protocol::kLlamaCpp, .fn = bind(route_health),
                    .needs_auth = false, .needs_ready = false});
    }
}

}  // namespace ferrox

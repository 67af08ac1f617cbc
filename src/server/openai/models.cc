// GET /v1/models (and /models): OpenAI's list, and GET /v1/models/{id} one model; Anthropic's
// shapes when the client sends anthropic-version (the anthropic SDK's client.models.list() and
// retrieve()).
#include <ctime>

#include "server/context.h"
#include "server/openai/openai.h"
#include "server/router.h"

namespace ferrox {

void add_chat_routes(Router& router, ServerContext& ctx);
void add_completions_routes(Router& router, ServerContext& ctx);

namespace {

std::string rfc3339(int64_t unix_s) {
    const std::time_t t = static_cast<std::time_t>(unix_s);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

json anthropic_model(const ModelInfo& info) {
    return {{"id", info.id}, {"type", "model"}, {"display_name", info.id}, {"created_at", rfc3339(info.created)}};
}

json openai_model(const ModelInfo& info) {
    json model = {{"id", info.id}, {"object", "model"}, {"created", info.created}, {"owned_by", "ferrox"}};
    model["meta"] = {{"n_ctx", info.n_ctx},     {"n_ctx_train", info.n_ctx_train},
                     {"n_vocab", info.n_vocab}, {"n_embd", info.n_embd},
                     {"n_layer", info.n_layer}, {"architecture", info.arch},
                     {"kind", model_kind_name(info.kind)}};
    if (info.kind == ModelKind::kEmbed) {
        model["meta"]["pooling"] = info.pooling;
        model["meta"]["normalize"] = info.normalize;
    }
    return model;
}

void route_models(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const auto models = ctx.models();
    if (req.http.header("anthropic-version")) {
        json data = json::array();
        for (const ModelLease& m : models) data.push_back(anthropic_model(m->info()));
        json out = {{"data", data}, {"has_more", false}};
        out["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
        out["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
        res->send(200, dump(out));
        return;
    }
    json data = json::array(), names = json::array();
    for (const ModelLease& m : models) {
        const ModelInfo& info = m->info();
        data.push_back(openai_model(info));
        // llama-server's extra list (Codex and some UIs read it).
        names.push_back({{"name", info.id}, {"model", info.id}, {"type", "model"}, {"capabilities", {info.kind == ModelKind::kEmbed ? "embedding" : "completion"}}});
    }
    res->send(200, dump(json{{"object", "list"}, {"data", data}, {"models", names}}));
}

// One model by name, found as a generating request finds it (a name no model has is the
// served one where there is just one: the object says which).
void route_model(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const bool anthropic = req.http.header("anthropic-version") != nullptr;
    const Protocol protocol = anthropic ? Protocol::kAnthropic : Protocol::kOpenAI;
    ModelLease m;
    ApiError err;
    if (!ctx.acquire(req.params[0], &m, &err, ModelUse::kAny)) return Router::send_error(*res, protocol, err);
    res->send(200, dump(anthropic ? anthropic_model(m->info()) : openai_model(m->info())));
}

}  // namespace

void add_openai_routes(Router& router, ServerContext& ctx) {
    add_chat_routes(router, ctx);
    add_completions_routes(router, ctx);
    add_embeddings_routes(router, ctx);
    for (const char* path : {"/v1/models", "/models"}) {
        router.add({.method = "GET",
                    .path = path,
                    .protocol = Protocol::kOpenAI,
                    .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        route_models(ctx, req, std::move(res));
                    }});
        router.add({.method = "GET",
                    .path = std::string(path) + "/{id}",
                    .protocol = Protocol::kOpenAI,
                    .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        route_model(ctx, req, std::move(res));
                    }});
    }
}

}  // namespace ferrox

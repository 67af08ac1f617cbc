// GET /v1/models (and /models): OpenAI's list; Anthropic's shape when the client sends
// anthropic-version (the anthropic SDK's client.models.list()).
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

void route_models(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const auto models = ctx.models();
    if (req.http.header("anthropic-version")) {
        json data = json::array();
        for (const ModelLease& m : models) {
            data.push_back({{"id", m->info().id}, {"type", "model"}, {"display_name", m->info().id},
                            {"created_at", rfc3339(m->info().created)}});
        }
        json out = {{"data", data}, {"has_more", false}};
        out["first_id"] = data.empty() ? json(nullptr) : data.front()["id"];
        out["last_id"] = data.empty() ? json(nullptr) : data.back()["id"];
        res->send(200, dump(out));
        return;
    }
    json data = json::array(), names = json::array();
    for (const ModelLease& m : models) {
        const ModelInfo& info = m->info();
        json model = {{"id", info.id}, {"object", "model"}, {"created", info.created}, {"owned_by", "ferrox"}};
        model["meta"] = {{"n_ctx", info.n_ctx},     {"n_ctx_train", info.n_ctx_train},
                         {"n_vocab", info.n_vocab}, {"n_embd", info.n_embd},
                         {"n_layer", info.n_layer}, {"architecture", info.arch},
                         {"kind", model_kind_name(info.kind)}};
        if (info.kind == ModelKind::kEmbed) {
            model["meta"]["pooling"] = info.pooling;
            model["meta"]["normalize"] = info.normalize;
        }
        data.push_back(model);
        // llama-server's extra list (Codex and some UIs read it).
        names.push_back({{"name", info.id}, {"model", info.id}, {"type", "model"}, {"capabilities", {info.kind == ModelKind::kEmbed ? "embedding" : "completion"}}});
    }
    res->send(200, dump(json{{"object", "list"}, {"data", data}, {"models", names}}));
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
    }
}

}  // namespace ferrox

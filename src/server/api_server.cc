#include "server/api_server.h"

#include "server/admin/admin.h"
#include "server/anthropic/anthropic.h"
#include "server/llamacpp/llamacpp.h"
#include "server/openai/openai.h"
#include "server/response_store.h"
#include "server/gcp_predict.h"
#include "server/router.h"
#include "server/router_protocol.h"
#include "server/webui/webui_routes.h"
#include "server/workers.h"

namespace ferrox {

Expected<std::unique_ptr<ApiServer>> ApiServer::start(const ApiServerOptions& opts,
                                                     std::shared_ptr<ModelRegistry> registry) {
    std::unique_ptr<ApiServer> s(new ApiServer());
    s->ctx_ = std::make_shared<ServerContext>();
    ServerContext& ctx = *s->ctx_;
    ctx.opts = opts;
    ctx.registry = std::move(registry);
    ctx.workers = std::make_unique<Workers>(opts.n_workers);
    ResponseStoreOptions rso;
    rso.max_count = opts.responses_max_count;
    rso.max_bytes = opts.responses_max_bytes;
    rso.ttl_s = opts.responses_ttl_s;
    rso.state_dir = opts.state_dir;
    rso.url = opts.responses_store_url;
    auto store = open_response_store(rso);
    if (!store.has_value()) return store.status();
    ctx.responses = std::move(*store);
    std::weak_ptr<ServerContext> weak = s->ctx_;
    if (!opts.access_log.empty()) {
        std::string error;
        ctx.access_log = AccessLog::open(opts.access_log, &error);
        if (!ctx.access_log) return invalid_argument(error);
    }
    RouterOptions ro;
    ro.api_keys = opts.api_keys;
    ro.cors_origins = opts.cors_origins;
    ro.access_log = ctx.access_log.get();
    ro.ready = [weak] {
        auto c = weak.lock();
        return c && c->ready();
    };
    ro.stopping = [weak] {
        auto c = weak.lock();
        return !c || c->stopping.load() || c->draining.load();
    };
    s->router_ = std::make_unique<Router>(std::move(ro), ctx.workers.get());
    add_openai_routes(*s->router_, ctx);
    add_responses_routes(*s->router_, ctx);
    add_anthropic_routes(*s->router_, ctx);
    add_llamacpp_routes(*s->router_, ctx);
    add_admin_routes(*s->router_, ctx);
    add_router_protocol_routes(*s->router_, ctx);
    if (opts.webui) add_webui_routes(*s->router_);
    // Last: it dispatches to the routes above.
    if (Status st = add_gcp_predict_routes(*s->router_, opts.gcp); !st.is_ok()) return st;

    HttpServerOptions ho = opts.http;
    const Router* router = s->router_.get();
    // Errors the transport answers itself (413, 431, ...) in the shape of the route's protocol.
    ho.error_body = [router](const std::string& path, int status, std::string_view message) {
        ApiError e;
        e.status = status;
        e.message = std::string(message);
        if (status >= 500) e.type = "server_error";
        return error_body(router->protocol_for(path), e);
    };
    auto http = HttpServer::start(ho, [router](HttpRequest&& req, std::shared_ptr<HttpResponder> res) {
        router->handle(std::move(req), std::move(res));
    });
    if (!http.has_value()) return http.status();
    s->http_ = std::move(*http);
    return s;
}

int ApiServer::port() const { return http_->port(); }

void ApiServer::drain() {
    if (ctx_) ctx_->draining.store(true);
}

bool ApiServer::idle() const {
    for (const auto& m : ctx_->models()) {
        const ServedModel::Load l = m->load();
        if (l.n_running > 0 || l.n_waiting > 0) return false;
    }
    return true;
}

void ApiServer::shutdown(int grace_ms) {
    if (!ctx_ || ctx_->stopping.exchange(true)) return;
    ctx_->registry->shutdown();  // cancels generation: streams end
    if (http_) http_->shutdown(grace_ms);
    http_.reset();
    ctx_->workers.reset();  // runs what is queued (the streams' last events), then joins
}

ApiServer::~ApiServer() { shutdown(0); }

}  // namespace ferrox

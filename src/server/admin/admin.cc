// Hot model load, swap and unload while serving. A load runs on its own thread; the answer
// comes when the model is ready (or at once with "wait": false, the state then visible in
// GET /admin/models). Errors name the loader's problem and change nothing.
#include "server/admin/admin.h"

#include "server/context.h"
#include "server/router.h"

namespace ferrox {

namespace {

void send(HttpResponder& res, const ApiError& e) { Router::send_error(res, Protocol::kOpenAI, e); }

bool admin_authorized(const ServerContext& ctx, const HttpRequest& req, HttpResponder& res) {
    ApiError e;
    if (ctx.opts.admin_key.empty()) {
        e.status = 403;
        e.type = "permission_error";
        e.message = "The admin API is off: start the server with --admin-key to use it.";
        send(res, e);
        return false;
    }
    std::string given;
    if (const std::string* h = req.header("authorization"); h && h->size() > 7 &&
                                                            (h->compare(0, 7, "Bearer ") == 0 || h->compare(0, 7, "bearer ") == 0)) {
        given = h->substr(7);
    } else if (const std::string* x = req.header("x-api-key")) {
        given = *x;
    }
    if (!constant_time_equal(given, ctx.opts.admin_key)) {
        e.status = 401;
        e.type = "authentication_error";
        e.code = "invalid_api_key";
        e.message = "Invalid or missing admin key. Send it as 'Authorization: Bearer <admin key>'.";
        send(res, e);
        return false;
    }
    return true;
}

ApiError load_error(const Status& st) {
    ApiError e = from_status(st);
    // A model that does not fit, a bad file or architecture: the request's fault, not a rate.
    if (st.code() == StatusCode::kResourceExhausted || st.code() == StatusCode::kIoError ||
        st.code() == StatusCode::kNotFound || st.code() == StatusCode::kInternal) {
        e.status = 400;
        e.type = "invalid_request_error";
    }
    return e;
}

json status_json(const ModelStatus& s) {
    return json{{"id", s.id},
                {"path", s.path},
                {"state", model_state_name(s.state)},
                {"generation", s.generation},
                {"weight_bytes", s.weight_bytes},
                {"kv_bytes", s.kv_bytes},
                {"kv_blocks_used", s.kv_blocks_used},
                {"kv_blocks_total", s.kv_blocks_total},
                {"requests_running", s.n_running},
                {"requests_waiting", s.n_waiting}};
}

json model_json(const ServerContext& ctx, const std::string& alias) {
    for (const ModelStatus& s : ctx.registry->list()) {
        if (s.id == alias && s.state != ModelState::kDraining) return status_json(s);
    }
    return nullptr;
}

void route_load(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    if (!admin_authorized(ctx, req.http, *res)) return;
    const Fields f{req.body, ""};
    ApiError err;
    LoadRequest lr;
    bool replace = false, wait = true;
    int64_t n_ctx = 0, n_parallel = 0;
    if (!f.string("path", &lr.path, &err) || !f.string("alias", &lr.alias, &err) ||
        !f.string("draft_model", &lr.draft_path, &err) ||
        !f.boolean("replace", &replace, &err) || !f.boolean("wait", &wait, &err) ||
        !f.integer("n_ctx", 0, 1 << 22, &n_ctx, &err) || !f.integer("n_parallel", 0, 256, &n_parallel, &err))
        return send(*res, err);
    if (lr.path.empty()) return send(*res, bad_param("path", "Missing required parameter: 'path'."));
    lr.n_ctx = static_cast<int>(n_ctx);
    lr.n_parallel = static_cast<int>(n_parallel);
    ServerContext* c = &ctx;
    const std::string alias = ModelRegistry::alias_of(lr);
    Status st = ctx.registry->load_async(lr, replace, [c, res, wait, alias](Status s) {
        if (!wait) return;
        if (!s.is_ok()) return send(*res, load_error(s));
        res->send(200, dump(json{{"success", true}, {"model", model_json(*c, alias)}}));
    });
    if (!st.is_ok()) return send(*res, load_error(st));
    if (!wait) res->send(202, dump(json{{"success", true}, {"state", "loading"}, {"path", lr.path}}));
}

void route_unload(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    if (!admin_authorized(ctx, req.http, *res)) return;
    std::string alias;
    ApiError err;
    if (!Fields{req.body, ""}.string("alias", &alias, &err)) return send(*res, err);
    if (alias.empty()) return send(*res, bad_param("alias", "Missing required parameter: 'alias'."));
    Status st = ctx.registry->unload(alias);
    if (!st.is_ok()) return send(*res, from_status(st, "alias"));
    res->send(200, dump(json{{"success", true}, {"alias", alias}, {"state", "draining"}}));
}

void route_list(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    if (!admin_authorized(ctx, req.http, *res)) return;
    json data = json::array();
    for (const ModelStatus& s : ctx.registry->list()) data.push_back(status_json(s));
    res->send(200, dump(json{{"object", "list"}, {"data", data}}));
}

}  // namespace

void add_admin_routes(Router& router, ServerContext& ctx) {
    auto bind = [&ctx](void (*fn)(ServerContext&, RouteRequest&, std::shared_ptr<HttpResponder>)) {
        return [&ctx, fn](RouteRequest& req, std::shared_ptr<HttpResponder> res) { fn(ctx, req, std::move(res)); };
    };
    router.add({.method = "POST", .path = "/admin/models/load", .fn = bind(route_load), .json_body = true,
                .needs_auth = false, .needs_ready = false});
    router.add({.method = "POST", .path = "/admin/models/unload", .fn = bind(route_unload), .json_body = true,
                .needs_auth = false, .needs_ready = false});
    router.add({.method = "GET", .path = "/admin/models", .fn = bind(route_list), .needs_auth = false,
                .needs_ready = false});
}

}  // namespace ferrox

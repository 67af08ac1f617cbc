#pragma once
// The method + path table in front of every protocol: authentication, 404 and 405 in the
// protocol's own error shape, JSON bodies parsed (bounded) for the routes that take one, and
// readiness. A matched route's handler runs on a worker thread (workers.h), not on the I/O
// thread that received the request.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/http.h"
#include "server/json_util.h"
#include "server/responder.h"

namespace ferrox {

class Workers;

// Compares secrets in time that does not depend on where they differ.
bool constant_time_equal(const std::string& a, const std::string& b);

struct RouteRequest {
    HttpRequest http;
    json body;                        // the parsed object, for routes with json_body
    std::vector<std::string> params;  // the path's {placeholders}, in order
    std::shared_ptr<AccessRecord> record;  // what the access log says of this request
    // Whose request this is, for state scoped to an API key (stored Responses): key_scope() of
    // the key the request authenticated with; "" when the server has no keys.
    std::string key_scope;
};

using RouteFn = std::function<void(RouteRequest& req, std::shared_ptr<HttpResponder> res)>;

struct Route {
    std::string method;  // "GET" (also answers HEAD), "POST", "DELETE"
    std::string path;    // "/v1/responses/{id}": a {name} segment matches any one segment
    Protocol protocol = Protocol::kOpenAI;
    RouteFn fn;
    bool json_body = false;
    bool needs_auth = true;
    bool needs_ready = true;  // 503 while no model is ready or the server stops
};

struct RouterOptions {
    std::vector<std::string> api_keys;  // empty: no authentication
    std::function<bool()> ready;        // a model can serve
    std::function<bool()> stopping;
    // Origins allowed cross-origin requests ("*": any); empty: CORS off (no headers, OPTIONS
    // is a 405 like any unknown method).
    std::vector<std::string> cors_origins;
    AccessLog* access_log = nullptr;  // null: no access log
};

class Router {
  public:
    Router(RouterOptions options, Workers* workers);
    void add(Route route);
    // I/O thread: matches, checks, and hands the route to a worker.
    void handle(HttpRequest&& req, std::shared_ptr<HttpResponder> res) const;
    // The paths of the routes of `method`, in the order they were added.
    std::vector<std::string> paths(const std::string& method) const;
    // The protocol whose shape errors on `path` take (for errors the HTTP layer answers).
    Protocol protocol_for(const std::string& path) const;

    static void send_error(HttpResponder& res, Protocol protocol, const ApiError& e);

  private:
    bool authorized(const HttpRequest& req) const;
    static std::string given_key(const HttpRequest& req);
    HttpHeaders cors_headers(const HttpRequest& req) const;
    RouterOptions options_;
    Workers* workers_;
    std::vector<Route> routes_;
};

}  // namespace ferrox

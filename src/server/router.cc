#include "server/router.h"

#include <algorithm>
#include <exception>

#include "server/response_store.h"
#include "server/workers.h"

namespace ferrox {

namespace {

std::vector<std::string> split_path(const std::string& path) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i < path.size()) {
        while (i < path.size() && path[i] == '/') ++i;
        size_t j = path.find('/', i);
        if (j == std::string::npos) j = path.size();
        if (j > i) out.push_back(path.substr(i, j - i));
        i = j;
    }
    return out;
}

bool match(const std::string& pattern, const std::string& path, std::vector<std::string>* params) {
    const auto p = split_path(pattern), s = split_path(path);
    if (p.size() != s.size()) return false;
    params->clear();
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i].size() > 2 && p[i].front() == '{' && p[i].back() == '}') {
            params->push_back(s[i]);
        } else if (p[i] != s[i]) {
            return false;
        }
    }
    return true;
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
    // Every byte of the longer string is visited.
    const size_t n = std::max(a.size(), b.size());
    unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
    for (size_t i = 0; i < n; ++i) {
        const unsigned char x = i < a.size() ? a[i] : 0;
        const unsigned char y = i < b.size() ? b[i] : 0;
        diff |= x ^ y;
    }
    return diff == 0 && !a.empty();
}

Router::Router(RouterOptions options, Workers* workers) : options_(std::move(options)), workers_(workers) {}

void Router::add(Route route) { routes_.push_back(std::move(route)); }

std::vector<std::string> Router::paths(const std::string& method) const {
    std::vector<std::string> out;
    for (const Route& r : routes_) {
        if (r.method == method) out.push_back(r.path);
    }
    return out;
}

Protocol Router::protocol_for(const std::string& path) const {
    std::vector<std::string> params;
    for (const Route& r : routes_) {
        if (match(r.path, path, &params)) return r.protocol;
    }
    if (path.rfind("/v1/messages", 0) == 0) return Protocol::kAnthropic;
    return Protocol::kOpenAI;
}

void Router::send_error(HttpResponder& res, Protocol protocol, const ApiError& e) {
    HttpHeaders extra;
    if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
    res.send(e.status, error_body(protocol, e), "application/json", std::move(extra));
}

std::string Router::given_key(const HttpRequest& req) {
    const std::string* h = req.header("authorization");
    if (h && h->size() > 7 && (h->compare(0, 7, "Bearer ") == 0 || h->compare(0, 7, "bearer ") == 0)) {
        return h->substr(7);
    } else if (const std::string* x = req.header("x-api-key")) {
        return *x;  // Anthropic's header
    }
    return "";
}

bool Router::authorized(const HttpRequest& req) const {
    if (options_.api_keys.empty()) return true;
    const std::string given = given_key(req);
    bool ok = false;
    for (const std::string& key : options_.api_keys) ok |= constant_time_equal(key, given);
    return ok;
}

HttpHeaders Router::cors_headers(const HttpRequest& req) const {
    const std::string* origin = req.header("origin");
    if (!origin || options_.cors_origins.empty()) return {};
    for (const std::string& allowed : options_.cors_origins) {
        if (allowed == "*" || allowed == *origin) {
            return {{"Access-Control-Allow-Origin", allowed == "*" ? std::string("*") : *origin}, {"Vary", "Origin"}};
        }
    }
    return {};
}

void Router::handle(HttpRequest&& req, std::shared_ptr<HttpResponder> inner) const {
    HttpHeaders cors = cors_headers(req);
    if (req.method == "OPTIONS" && !cors.empty() && req.header("access-control-request-method")) {
        // A preflight: no auth (browsers send none), the methods and headers clients use.
        const std::string* asked = req.header("access-control-request-headers");
        cors.emplace_back("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        cors.emplace_back("Access-Control-Allow-Headers",
                          asked ? *asked : "authorization, content-type, x-api-key, anthropic-version, anthropic-beta");
        cors.emplace_back("Access-Control-Max-Age", "86400");
        inner->send(204, "", "text/plain", std::move(cors));
        return;
    }
    auto record = std::make_shared<AccessRecord>();
    std::shared_ptr<HttpResponder> res =
        std::make_shared<ObservedResponder>(std::move(inner), std::move(cors), options_.access_log, req, record);
    std::vector<std::string> params;
    const Route* found = nullptr;
    std::vector<std::string> allowed;
    for (const Route& r : routes_) {
        if (!match(r.path, req.path, &params)) continue;
        if (r.method == req.method || (req.method == "HEAD" && r.method == "GET")) {
            found = &r;
            break;
        }
        allowed.push_back(r.method);
    }
    const Protocol protocol = protocol_for(req.path);
    if (!found) {
        ApiError e;
        if (allowed.empty()) {
            e.status = 404;
            e.code = "unknown_url";
            e.message = "Unknown route " + req.method + " " + req.path;
            send_error(*res, protocol, e);
            return;
        }
        std::string list;
        for (const auto& m : allowed) list += (list.empty() ? "" : ", ") + m;
        e.status = 405;
        e.message = "Method " + req.method + " is not allowed for " + req.path + " (use " + list + ").";
        res->send(405, error_body(protocol, e), "application/json", {{"Allow", list}});
        return;
    }
    if (found->needs_auth && !authorized(req)) {
        ApiError e;
        e.status = 401;
        e.type = "authentication_error";
        e.code = "invalid_api_key";
        e.message = "Invalid or missing API key. Send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'.";
        send_error(*res, protocol, e);
        return;
    }
    if (found->needs_ready && (options_.stopping() || !options_.ready())) {
        ApiError e;
        e.status = 503;
        e.type = "server_error";
        e.message = options_.stopping() ? "The server is shutting down." : "The model is still loading.";
        send_error(*res, protocol, e);
        return;
    }
    auto rr = std::make_shared<RouteRequest>();
    // With keys configured, the (authenticated) key scopes what the request may see of stored
    // state; hashed so the key itself is never stored.
    if (!options_.api_keys.empty()) rr->key_scope = key_scope(given_key(req));
    rr->http = std::move(req);
    rr->params = std::move(params);
    rr->record = std::move(record);
    const Route* route = found;
    workers_->post([route, rr, res] {
        if (route->json_body) {
            ApiError err;
            if (!parse_json_object(rr->http.body, &rr->body, &err)) {
                send_error(*res, route->protocol, err);
                return;
            }
            rr->http.body.clear();
            rr->http.body.shrink_to_fit();
        }
        try {
            route->fn(*rr, res);
        } catch (const std::exception& e) {
            // A bug, not the client's fault: still an answer in the route's shape.
            ApiError err;
            err.status = 500;
            err.type = "server_error";
            err.message = std::string("internal error: ") + e.what();
            send_error(*res, route->protocol, err);
        }
    });
}

}  // namespace ferrox

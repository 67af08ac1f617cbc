#include "server/gcp_predict.h"

#include <atomic>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>

#include "server/api_error.h"
#include "server/json_body.h"
#include "server/json_util.h"
#include "server/router.h"

namespace ferrox {

std::string gcp_request_format(const std::string& path) {
    std::string s = path;
    if (s.rfind("/v1", 0) == 0) s = s.substr(3);
    if (!s.empty() && s[0] == '/') s = s.substr(1);
    std::string out;
    bool cap = false;
    for (unsigned char c : s) {
        if (c == ':') break;
        if (c == '/' || c == '-' || c == '_') {
            cap = true;
        } else {
            out += static_cast<char>(cap ? std::toupper(c) : c);
            cap = false;
        }
    }
    return out;
}

namespace {

constexpr size_t kMaxInstances = 128;  // llama-server's limit

json predict_error(const std::string& message, const char* type) {
    return json{{"error", {{"code", 400}, {"message", message}, {"type", type}}}};
}

// The predictions of one /predict call; the last instance to answer sends them.
struct PredictBatch {
    std::mutex mu;
    json predictions;
    size_t left = 0;
    std::shared_ptr<HttpResponder> res;

    void set(size_t i, json v) {
        std::lock_guard<std::mutex> lk(mu);
        predictions[i] = std::move(v);
        if (--left == 0) res->send(200, dump(json{{"predictions", std::move(predictions)}}));
    }
};

// What a route answers for one instance, kept instead of sent: its JSON body (or text), any
// status. A stream is not a prediction (instances are sent with "stream": false).
class CollectResponder final : public HttpResponder {
  public:
    CollectResponder(std::shared_ptr<PredictBatch> batch, size_t i) : batch_(std::move(batch)), i_(i) {}
    ~CollectResponder() override { done(predict_error("no answer from the route", "server_error")); }

    void send(int, std::string body, std::string, HttpHeaders) override {
        json v = json_nesting_depth(body) <= kMaxJsonDepth ? json::parse(body, nullptr, false) : json();
        done(v.is_discarded() || v.is_null() ? json(body) : std::move(v));
    }
    void start_stream(int, std::string, HttpHeaders) override {
        done(predict_error("predict route does not support streaming responses", "invalid_request_error"));
    }
    void write(std::string) override {}
    void end() override {}
    bool client_gone() const override { return batch_->res->client_gone(); }
    void on_disconnect(std::function<void()>) override {}
    size_t pending_bytes() const override { return 0; }

  private:
    void done(json v) {
        if (answered_.exchange(true)) return;
        batch_->set(i_, std::move(v));
    }
    std::shared_ptr<PredictBatch> batch_;
    size_t i_;
    std::atomic<bool> answered_{false};
};

}  // namespace

Status add_gcp_predict_routes(Router& router, const GcpPredictOptions& opts) {
    if (opts.predict_route.empty()) return Status::ok();
    // camelCase name -> path; the first path in sorted order wins a collision, as llama-server's.
    std::map<std::string, std::string> by_name;
    for (const char* method : {"GET", "POST", "DELETE"}) {
        for (const std::string& p : router.paths(method)) {
            if (p == opts.predict_route) {
                return invalid_argument("AIP_PREDICT_ROUTE=" + p + " is one of the server's own routes");
            }
        }
    }
    for (const std::string& p : router.paths("POST")) {
        if (p.find('{') == std::string::npos) by_name.emplace(gcp_request_format(p), p);
    }
    const Router* r = &router;
    router.add({.method = "POST",
                .path = opts.predict_route,
                .protocol = Protocol::kLlamaCpp,
                .fn = [r, by_name](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    auto fail = [&](const std::string& m) {
                        Router::send_error(*res, Protocol::kLlamaCpp, bad_param("instances", m));
                    };
                    const json& body = req.body;
                    const auto inst = body.find("instances");
                    if (inst == body.end() || !inst->is_array()) {
                        return fail("request body must include an array field named instances");
                    }
                    if (inst->size() > kMaxInstances) {
                        return fail("instances array exceeds maximum size of " + std::to_string(kMaxInstances));
                    }
                    auto batch = std::make_shared<PredictBatch>();
                    batch->res = res;
                    batch->left = inst->size();
                    batch->predictions = json::array();
                    for (size_t i = 0; i < inst->size(); ++i) batch->predictions.push_back(nullptr);
                    if (inst->empty()) return res->send(200, dump(json{{"predictions", json::array()}}));
                    for (size_t i = 0; i < inst->size(); ++i) {
                        const json& in = (*inst)[i];
                        if (!in.is_object()) {
                            batch->set(i, predict_error("each instance must be a JSON object", "invalid_request_error"));
                            continue;
                        }
                        const auto fmt = in.find("@requestFormat");
                        if (fmt == in.end() || !fmt->is_string()) {
                            batch->set(i, predict_error("each instance must include a string @requestFormat",
                                                        "invalid_request_error"));
                            continue;
                        }
                        const std::string name = fmt->get<std::string>();
                        std::string path;
                        if (auto it = by_name.find(name); it != by_name.end()) {
                            path = it->second;
                        } else {
                            for (const auto& [n, p] : by_name) {
                                if (p == name) path = p;
                            }
                        }
                        if (path.empty()) {
                            batch->set(i, predict_error("no handler registered for @requestFormat: " + name,
                                                        "invalid_request_error"));
                            continue;
                        }
                        json payload = in;
                        payload.erase("@requestFormat");
                        if (payload.contains("stream")) payload["stream"] = false;
                        HttpRequest sub;
                        sub.method = "POST";
                        sub.path = path;
                        sub.headers = req.http.headers;
                        sub.remote = req.http.remote;
                        sub.body = dump(payload);
                        r->handle(std::move(sub), std::make_shared<CollectResponder>(batch, i));
                    }
                },
                .json_body = true});
    if (!opts.health_route.empty() && opts.health_route != "/health") {
        router.add({.method = "GET",
                    .path = opts.health_route,
                    .protocol = Protocol::kLlamaCpp,
                    .fn = [r](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        HttpRequest sub = req.http;
                        sub.path = "/health";
                        r->handle(std::move(sub), std::move(res));
                    },
                    .needs_auth = false,
                    .needs_ready = false});
    }
    return Status::ok();
}

}  // namespace ferrox

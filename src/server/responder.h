#pragma once
// What the router wraps around every responder: CORS headers for allowed origins, and one
// access-log line (JSON) when the response ends: route, model, status, prompt / cached /
// generated tokens, time to first token, total time. Prompts are logged only when asked.
//
// Threading: as HttpResponder (any thread); the record is filled by the route and the
// generation driver under its own mutex.

#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/cache_audit.h"
#include "server/http.h"

namespace ferrox {

struct AccessRecord {
    std::mutex mu;
    std::string model;
    int n_prompt = 0, n_cached = 0, n_generated = 0;
    double ttft_ms = -1;
    std::string prompt;  // only with --log-prompts
    std::string cache_key;  // the client's cache/routing hint (Responses `prompt_cache_key`)
    CacheMiss cache_miss;   // why the turn re-read more than its new tokens (cache_audit.h)
};

// One JSON line per request to a file (or stderr); thread-safe.
class AccessLog {
  public:
    // "-": stderr. Fails (nullptr) when the file cannot be opened.
    static std::unique_ptr<AccessLog> open(const std::string& path, std::string* error);
    ~AccessLog();
    void write(const std::string& line);

  private:
    explicit AccessLog(std::FILE* f, bool owned) : f_(f), owned_(owned) {}
    std::mutex mu_;
    std::FILE* f_;
    bool owned_;
};

class ObservedResponder final : public HttpResponder, public std::enable_shared_from_this<ObservedResponder> {
  public:
    ObservedResponder(std::shared_ptr<HttpResponder> inner, HttpHeaders cors, AccessLog* log,
                      const HttpRequest& req, std::shared_ptr<AccessRecord> record);
    ~ObservedResponder() override;

    void send(int status, std::string body, std::string content_type, HttpHeaders extra_headers) override;
    void start_stream(int status, std::string content_type, HttpHeaders extra_headers) override;
    void write(std::string chunk) override { inner_->write(std::move(chunk)); }
    void end() override;
    bool client_gone() const override { return inner_->client_gone(); }
    void on_disconnect(std::function<void()> fn) override;
    size_t pending_bytes() const override { return inner_->pending_bytes(); }

  private:
    void finish();  // logs once
    std::shared_ptr<HttpResponder> inner_;
    HttpHeaders cors_;
    AccessLog* log_;
    std::string method_, path_, remote_;
    std::shared_ptr<AccessRecord> record_;
    std::chrono::steady_clock::time_point t_start_;
    std::mutex mu_;
    int status_ = 0;
    bool logged_ = false;
    bool gone_ = false;
    bool ended_ = false;  // the whole answer was handed to the transport
};

}  // namespace ferrox

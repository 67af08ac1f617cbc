#pragma once
// ferrox's HTTP API: the OpenAI routes (chat completions, completions, models), llama.cpp's
// utility routes (tokenize, detokenize, apply-template) and health, on top of the HTTP layer
// (http.h) and the engine. Protocol adapters translate their wire format to the engine's
// request and the engine's events back; they never touch the model.
//
// Threading: route handlers run on HTTP I/O threads and only parse, render the chat template,
// tokenize and submit; generation runs on the engine thread, whose event sinks write to the
// (thread-safe) responders.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "chat/jinja.h"
#include "core/status.h"
#include "engine/engine.h"
#include "server/http.h"

namespace ferrox {

struct ApiServerOptions {
    HttpServerOptions http;
    std::vector<std::string> api_keys;  // empty: no authentication
    std::string alias;                  // model id to report; default: the file name stem
    std::string chat_template_override; // replaces the model's template when not empty
    int default_max_tokens = -1;        // when a request gives none: until the end or context
};

class ApiServer {
public:
    // Starts listening at once (health answers 503 until set_engine()).
    static Expected<std::unique_ptr<ApiServer>> start(const ApiServerOptions& opts);
    ~ApiServer();

    // Makes the server ready: requests from now on go to this engine.
    Status set_engine(std::unique_ptr<Engine> engine);
    int port() const;
    // Stop accepting, cancel generation, let responses end within grace_ms, stop the engine.
    void shutdown(int grace_ms);

    struct State;  // shared with in-flight request callbacks

private:
    ApiServer() = default;
    std::shared_ptr<State> state_;
    std::unique_ptr<HttpServer> http_;
};

}  // namespace ferrox

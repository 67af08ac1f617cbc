#pragma once
// ferrox's HTTP API: every protocol's routes (openai/, anthropic/, llamacpp/) on one router
// (router.h) over the HTTP layer (http.h), reaching the model through ServedModel only.
//
// Layout of src/server:
// - http*: transport (Beast inside http_server.cc only); the caller supplies error bodies.
// - router: method + path table, auth, 404/405, bounded JSON bodies, readiness; handlers run
//   on the worker threads (workers.h), never on I/O threads.
// - generation: the protocol-neutral driver (n choices, refusals before the stream starts,
//   cancel on disconnect, backpressure, stream parsers, usage) behind a GenerationSink.
// - openai/, anthropic/, llamacpp/: one folder per protocol; a file is a wire format.

#include <memory>

#include "core/status.h"
#include "server/context.h"
#include "server/http.h"

namespace ferrox {

class Engine;
class Router;

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

  private:
    ApiServer() = default;
    std::shared_ptr<ServerContext> ctx_;
    std::unique_ptr<Router> router_;
    std::unique_ptr<HttpServer> http_;
};

}  // namespace ferrox

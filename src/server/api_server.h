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
// - openai/, anthropic/, llamacpp/, admin/: one folder per protocol; a file is a wire format.

#include <memory>

#include "core/status.h"
#include "server/context.h"
#include "server/http.h"

namespace ferrox {

class Router;

class ApiServer {
  public:
    // Starts listening at once; requests reach the registry's models (health answers 503
    // until one is ready). The registry may be loaded before or after.
    static Expected<std::unique_ptr<ApiServer>> start(const ApiServerOptions& opts,
                                                      std::shared_ptr<ModelRegistry> registry);
    ~ApiServer();

    int port() const;
    // Graceful drain (SIGTERM): from now on the server is not ready (/health/ready 503) and
    // refuses new requests with 503 + Retry-After in each protocol's shape; running ones go on.
    // Any thread; idempotent. shutdown() ends what is still running.
    void drain();
    // No generation is running or queued in any model (the drain can end).
    bool idle() const;
    // Stop accepting, cancel generation, let responses end within grace_ms, stop the engines.
    void shutdown(int grace_ms);

  private:
    ApiServer() = default;
    std::shared_ptr<ServerContext> ctx_;
    std::unique_ptr<Router> router_;
    std::unique_ptr<HttpServer> http_;
};

}  // namespace ferrox

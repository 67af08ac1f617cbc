#pragma once
// llama.cpp's native routes: POST /completion (its own request and response shapes),
// /tokenize, /detokenize, /apply-template, GET /props, /health and /metrics.

namespace ferrox {

class Router;
struct ServerContext;

void add_llamacpp_routes(Router& router, ServerContext& ctx);

}  // namespace ferrox

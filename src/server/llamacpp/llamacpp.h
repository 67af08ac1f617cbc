#pragma once
// llama.cpp's native routes: POST /completion (its own request and response shapes),
// /tokenize, /detokenize, /apply-template, GET /props, /health and /metrics.

#include <string>

namespace ferrox {

class Router;
struct ServerContext;

void add_llamacpp_routes(Router& router, ServerContext& ctx);

// The value of `key` in a raw query string ("" when absent, "1" for a bare key; no
// percent-decoding: the values the llama.cpp routes take are plain words).
std::string query_param(const std::string& query, const std::string& key);

}  // namespace ferrox

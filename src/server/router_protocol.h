#pragma once
// What LLM-aware routers ask a replica (server/README.md, "Behind a router"): vLLM's /tokenize
// and /detokenize forms, its render routes, the load and info routes of vllm-router and SGLang's
// router, and vLLM's metric names for the Inference Extension's endpoint picker
// (--metrics-compat vllm).
//
// Threading: handlers run on worker threads; vllm_metrics() from /metrics, any thread.

#include <memory>
#include <string>
#include <vector>

#include "engine/served_model.h"

namespace ferrox {

class Router;
class HttpResponder;
struct RouteRequest;
struct ServerContext;

// POST /v1/completions/render, /v1/chat/completions/render, GET /get_load, /v1/loads,
// /server_info, /get_server_info.
void add_router_protocol_routes(Router& router, ServerContext& ctx);

// vLLM's POST /tokenize ({"model", "prompt"} or {"model", "messages"}), answered
// {"count", "max_model_len", "tokens", "token_strs"}; errors in OpenAI's shape. /tokenize
// calls it when the body has no llama.cpp "content" but a "prompt" or "messages".
void route_tokenize_vllm(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res);
bool is_vllm_tokenize_body(const RouteRequest& req);

// The model server protocol's cache description of each generation model:
// ferrox_cache_config_info{model,block_size,num_blocks} 1 (HELP and TYPE once).
std::string cache_config_info_metrics(const std::vector<ModelLease>& models);

// vLLM's names (vllm:num_requests_waiting, ..., label model_name), one series per generation
// model; `texts[i]` is models[i]->prometheus() (read once per scrape by the caller).
std::string vllm_metrics(const std::vector<ModelLease>& models, const std::vector<std::string>& texts);

}  // namespace ferrox

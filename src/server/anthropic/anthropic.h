#pragma once
// Anthropic Messages: POST /v1/messages and /v1/messages/count_tokens (also with
// ?beta=true), as the anthropic SDK and Claude Code speak it.

namespace ferrox {

class Router;
struct ServerContext;

void add_anthropic_routes(Router& router, ServerContext& ctx);

}  // namespace ferrox

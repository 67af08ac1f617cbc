#pragma once
// The admin API behind --admin-key (separate from the API keys; 403 when none is set):
// POST /admin/models/load, POST /admin/models/unload, GET /admin/models.

namespace ferrox {

class Router;
struct ServerContext;

void add_admin_routes(Router& router, ServerContext& ctx);

}  // namespace ferrox

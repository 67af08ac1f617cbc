#pragma once
// The chat page at / and the dashboard at /dashboard, with their files under /webui/, served
// from the bytes embedded at build time (webui_assets.h). The files are public (no API key:
// a browser cannot send one for a page load); the API calls the page makes need the key as
// any client's do. `ferrox serve --no-webui` leaves these routes out (404, as before).

#include <string_view>

namespace ferrox {

class Router;
struct WebAsset;

void add_webui_routes(Router& router);

// The asset served at `url` ("/" and "/dashboard" are their pages), or null.
const WebAsset* find_web_asset(std::string_view url);

// Whether an Accept-Encoding value admits gzip (a "gzip" or "*" token whose q is not 0).
bool accepts_gzip(std::string_view accept_encoding);

}  // namespace ferrox

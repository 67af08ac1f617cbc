#include "server/webui/webui_routes.h"

#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include "server/router.h"
#include "server/webui/webui_assets.h"

namespace ferrox {

namespace {

// The pages allow only their own origin: no script, style, font or connection elsewhere, no
// inline script (a model's answer is sanitized, and this is the second wall), no framing.
// KaTeX sets inline style attributes, hence 'unsafe-inline' for styles only.
constexpr const char* kPageCsp =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
    "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
    }
    return true;
}

void serve_asset(const WebAsset& a, const HttpRequest& req, HttpResponder& res) {
    const bool page = std::string_view(a.content_type).starts_with("text/html");
    HttpHeaders h = {{"ETag", a.etag}, {"Cache-Control", "no-cache"}, {"X-Content-Type-Options", "nosniff"}};
    const bool gzipped = a.encoding[0] != '\0';
    if (gzipped) h.emplace_back("Vary", "Accept-Encoding");
    if (page) {
        h.emplace_back("Content-Security-Policy", kPageCsp);
        h.emplace_back("Referrer-Policy", "no-referrer");
    }
    if (const std::string* inm = req.header("if-none-match"); inm && inm->find(a.etag) != std::string::npos) {
        res.send(304, "", a.content_type, std::move(h));
        return;
    }
    const std::string* ae = req.header("accept-encoding");
    const unsigned char* data = a.data;
    size_t size = a.size;
    if (gzipped) {
        const bool take_gzip = ae ? accepts_gzip(*ae) : a.identity_data == nullptr;
        if (take_gzip) {
            h.emplace_back("Content-Encoding", a.encoding);
        } else if (a.identity_data) {
            data = a.identity_data;
            size = a.identity_size;
        } else {
            // Only the libraries are stored compressed alone; every browser takes gzip.
            res.send(406, "This file is stored gzip-compressed: send Accept-Encoding: gzip.\n",
                     "text/plain; charset=utf-8", {{"Vary", "Accept-Encoding"}});
            return;
        }
    }
    res.send(200, std::string(reinterpret_cast<const char*>(data), size), a.content_type, std::move(h));
}

}  // namespace

bool accepts_gzip(std::string_view accept_encoding) {
    std::string_view rest = accept_encoding;
    while (!rest.empty()) {
        const size_t comma = rest.find(',');
        std::string_view item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        const size_t semi = item.find(';');
        const std::string_view coding = trim(item.substr(0, semi));
        if (!iequals(coding, "gzip") && !iequals(coding, "x-gzip") && coding != "*") continue;
        if (semi == std::string_view::npos) return true;
        std::string_view param = trim(item.substr(semi + 1));
        if (param.size() < 2 || (param[0] != 'q' && param[0] != 'Q') || param[1] != '=') return true;
        const std::string q(trim(param.substr(2)));
        return std::strtod(q.c_str(), nullptr) > 0;
    }
    return false;
}

const WebAsset* find_web_asset(std::string_view url) {
    if (url == "/") url = "/webui/index.html";
    if (url == "/dashboard") url = "/webui/dashboard.html";
    for (size_t i = 0; i < kNumWebAssets; ++i) {
        if (url == kWebAssets[i].url) return &kWebAssets[i];
    }
    return nullptr;
}

void add_webui_routes(Router& router) {
    auto add = [&router](const std::string& path, const WebAsset* a) {
        if (!a) return;
        router.add({.method = "GET",
                    .path = path,
                    .fn = [a](RouteRequest& req, std::shared_ptr<HttpResponder> res) { serve_asset(*a, req.http, *res); },
                    .needs_auth = false,
                    .needs_ready = false});
    };
    add("/", find_web_asset("/"));
    add("/dashboard", find_web_asset("/dashboard"));
    for (size_t i = 0; i < kNumWebAssets; ++i) add(kWebAssets[i].url, &kWebAssets[i]);
}

}  // namespace ferrox

// The Boost-free parts of http.h: request helpers and the small formatters.
#include "server/http.h"

#include <cstdio>

namespace ferrox {

const std::string* HttpRequest::header(std::string_view lowercase_name) const {
    for (const auto& [name, value] : headers) {
        if (name == lowercase_name) return &value;
    }
    return nullptr;
}

std::string sse_event(std::string_view data, std::string_view event_name) {
    std::string out;
    out.reserve(data.size() + event_name.size() + 16);
    if (!event_name.empty()) {
        out += "event: ";
        out += event_name;
        out += '\n';
    }
    // Each line of data is its own "data:" field; the client joins them with '\n'.
    size_t start = 0;
    while (true) {
        size_t nl = data.find('\n', start);
        out += "data: ";
        out +=
            data.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
        out += '\n';
        if (nl == std::string_view::npos) break;
        start = nl + 1;
    }
    out += '\n';
    return out;
}

static void append_json_string(std::string& out, std::string_view s) {
    out += '"';
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

std::string http_error_json(std::string_view message, std::string_view type) {
    std::string out = "{\"error\":{\"message\":";
    append_json_string(out, message);
    out += ",\"type\":";
    append_json_string(out, type);
    out += ",\"param\":null,\"code\":null}}";
    return out;
}

}  // namespace ferrox

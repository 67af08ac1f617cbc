#include "server/json_util.h"

#include <chrono>
#include <cmath>
#include <random>
#include <sstream>

#include "core/check.h"
#include "server/json_body.h"

namespace ferrox {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool parse_json_object(std::string_view body, json* out, ApiError* err) {
    if (json_nesting_depth(body) > kMaxJsonDepth) {
        *err = bad_param("", "The JSON body of your request nests deeper than " +
                                 std::to_string(kMaxJsonDepth) + " levels, the limit of this server.");
        return false;
    }
    *out = json::parse(body, nullptr, false);
    if (out->is_discarded()) {
        *err = bad_param("", "We could not parse the JSON body of your request: it is not valid JSON.");
        return false;
    }
    if (!out->is_object()) {
        *err = bad_param("", "The request body must be a JSON object.");
        return false;
    }
    return true;
}

const char* json_type_name(const json& v) {
    switch (v.type()) {
        case json::value_t::null: return "null";
        case json::value_t::boolean: return "a boolean";
        case json::value_t::string: return "a string";
        case json::value_t::array: return "an array";
        case json::value_t::object: return "an object";
        default: return "a number";
    }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& got) {
    return bad_param(param, "Invalid type for '" + param + "': expected " + expected + ", but got " +
                                json_type_name(got) + ".");
}

const json* Fields::find(const char* key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

bool Fields::number(const char* key, double lo, double hi, double* out, ApiError* err) const {
    const json* v = find(key);
    if (!v) return true;
    if (!v->is_number()) {
        *err = wrong_type(name(key), "a number", *v);
        return false;
    }
    const double d = v->get<double>();
    if (!(d >= lo && d <= hi)) {
        std::ostringstream m;
        m << "Invalid value for '" << name(key) << "': " << d << " is outside [" << lo << ", " << hi << "].";
        *err = bad_param(name(key), m.str());
        return false;
    }
    *out = d;
    return true;
}

bool Fields::integer(const char* key, int64_t lo, int64_t hi, int64_t* out, ApiError* err) const {
    const json* v = find(key);
    if (!v) return true;
    // 5.0 is accepted as 5, as Python clients sometimes send it.
    const bool integral = v->is_number_integer() ||
                          (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>());
    if (!integral) {
        *err = wrong_type(name(key), "an integer", *v);
        return false;
    }
    const double d = v->get<double>();
    bool in_range = d >= static_cast<double>(lo) && d <= static_cast<double>(hi);
    int64_t i = 0;
    if (in_range) {
        if (v->is_number_unsigned()) {
            const uint64_t u = v->get<uint64_t>();
            in_range = u <= static_cast<uint64_t>(INT64_MAX) && static_cast<int64_t>(u) <= hi;
            i = static_cast<int64_t>(u);
        } else {
            // A float at or beyond 2^63 has no int64 value (the cast would be undefined).
            if (!v->is_number_integer() && !(d > -9223372036854775808.0 && d < 9223372036854775808.0)) {
                in_range = false;
            } else {
                i = v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(d);
                in_range = i >= lo && i <= hi;
            }
        }
    }
    if (!in_range) {
        *err = bad_param(name(key), "Invalid value for '" + name(key) + "': " + v->dump() + " is outside [" +
                                        std::to_string(lo) + ", " + std::to_string(hi) + "].");
        return false;
    }
    *out = i;
    return true;
}

bool Fields::boolean(const char* key, bool* out, ApiError* err) const {
    const json* v = find(key);
    if (!v) return true;
    if (!v->is_boolean()) {
        *err = wrong_type(name(key), "a boolean", *v);
        return false;
    }
    *out = v->get<bool>();
    return true;
}

bool Fields::string(const char* key, std::string* out, ApiError* err) const {
    const json* v = find(key);
    if (!v) return true;
    if (!v->is_string()) {
        *err = wrong_type(name(key), "a string", *v);
        return false;
    }
    *out = v->get<std::string>();
    return true;
}

bool Fields::object(const char* key, const json** out, ApiError* err) const {
    *out = find(key);
    if (*out && !(*out)->is_object()) {
        *err = wrong_type(name(key), "an object", **out);
        return false;
    }
    return true;
}

bool Fields::array(const char* key, const json** out, ApiError* err) const {
    *out = find(key);
    if (*out && !(*out)->is_array()) {
        *err = wrong_type(name(key), "an array", **out);
        return false;
    }
    return true;
}

bool Fields::strings(const char* key, size_t max_n, std::vector<std::string>* out, ApiError* err) const {
    const json* v = find(key);
    if (!v) return true;
    if (v->is_string()) {
        out->push_back(v->get<std::string>());
        return true;
    }
    if (!v->is_array()) {
        *err = wrong_type(name(key), "a string or an array of strings", *v);
        return false;
    }
    if (v->size() > max_n) {
        *err = bad_param(name(key), "Invalid '" + name(key) + "': at most " + std::to_string(max_n) + " strings.");
        return false;
    }
    for (const auto& s : *v) {
        if (!s.is_string()) {
            *err = wrong_type(name(key), "a string or an array of strings", s);
            return false;
        }
        out->push_back(s.get<std::string>());
    }
    return true;
}

const std::string& ChunkTemplate::marker() {
    static const std::string m = "\x01" "ferrox:chunk-text" "\x01";
    return m;
}

ChunkTemplate::ChunkTemplate(const json& shape) {
    const std::string whole = dump(shape);
    const std::string m = dump(json(marker()));
    const size_t at = whole.find(m);
    CHECK(at != std::string::npos && whole.find(m, at + 1) == std::string::npos);
    CHECK(whole.find('\n') == std::string::npos);  // compact: one SSE data line
    head_ = "data: " + whole.substr(0, at);
    tail_ = whole.substr(at + m.size()) + "\n\n";
}

std::string ChunkTemplate::render(std::string_view text) const {
    std::string out;
    out.reserve(head_.size() + text.size() + tail_.size() + 8);
    out += head_;
    out += dump(json(text));
    out += tail_;
    return out;
}

int64_t unix_now() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_id(const char* prefix) {
    static thread_local std::mt19937_64 rng(std::random_device{}());
    static const char* hex = "0123456789abcdef";
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) id.push_back(hex[rng() & 15]);
    return id;
}

}  // namespace ferrox

#include "server/api_error.h"

#include "server/json_util.h"

namespace ferrox {

ApiError from_status(const Status& s, std::string param) {
    ApiError e;
    e.message = s.message();
    e.param = std::move(param);
    switch (s.code()) {
        case StatusCode::kInvalidArgument:
        case StatusCode::kOutOfRange:
        case StatusCode::kUnimplemented: e.status = 400; break;
        case StatusCode::kNotFound: e.status = 404; e.type = "not_found_error"; break;
        case StatusCode::kResourceExhausted: e.status = 429; e.type = "rate_limit_error"; break;
        case StatusCode::kCancelled:
        case StatusCode::kUnavailable: e.status = 503; e.type = "server_error"; break;
        case StatusCode::kAlreadyExists: e.status = 409; e.type = "invalid_request_error"; break;
        default: e.status = 500; e.type = "server_error"; break;
    }
    return e;
}

ApiError bad_param(std::string param, std::string message) {
    ApiError e;
    e.message = std::move(message);
    e.param = std::move(param);
    return e;
}

namespace {

// Anthropic's error types by HTTP status (docs: "Errors").
const char* anthropic_type(const ApiError& e) {
    switch (e.status) {
        case 400: return "invalid_request_error";
        case 401: return "authentication_error";
        case 403: return "permission_error";
        case 404: return "not_found_error";
        case 413: return "request_too_large";
        case 429: return "rate_limit_error";
        case 503: return "overloaded_error";
        default: return e.status < 500 ? "invalid_request_error" : "api_error";
    }
}

}  // namespace

std::string error_body(Protocol protocol, const ApiError& e) {
    switch (protocol) {
        case Protocol::kAnthropic:
            return dump(json{{"type", "error"}, {"error", {{"type", anthropic_type(e)}, {"message", e.message}}}});
        case Protocol::kLlamaCpp:
            return dump(json{{"error", {{"code", e.status}, {"message", e.message}, {"type", e.type}}}});
        case Protocol::kOpenAI:
            break;
    }
    json err = {{"message", e.message}, {"type", e.type}};
    err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
    err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
    return dump(json{{"error", err}});
}

}  // namespace ferrox

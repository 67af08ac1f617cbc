#pragma once
// A request's failure, protocol-neutral: the HTTP status, a message for a person, the
// OpenAI-style type and the offending field. Each protocol renders it in its own shape
// (errors.h); Status becomes an ApiError in one place (from_status).

#include <string>

#include "core/status.h"

namespace ferrox {

struct ApiError {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";  // OpenAI's vocabulary; adapters map it
    std::string param;                           // the field at fault, empty if none
    std::string code;                            // e.g. "model_not_found", empty if none
};

// The one place where a Status becomes an HTTP status.
ApiError from_status(const Status& s, std::string param = "");
ApiError bad_param(std::string param, std::string message);

// Where a protocol's answer shapes come from: every route belongs to one.
enum class Protocol { kOpenAI, kAnthropic, kLlamaCpp };

// The error body of `protocol`:
// - OpenAI: {"error":{"message","type","param","code"}}
// - Anthropic: {"type":"error","error":{"type","message"}} with Anthropic's type names
// - llama.cpp: {"error":{"code":<status>,"message","type"}}
std::string error_body(Protocol protocol, const ApiError& e);

}  // namespace ferrox

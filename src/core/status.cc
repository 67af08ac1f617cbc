#include "core/status.h"

namespace ferrox {

const char* status_code_name(StatusCode code) {
    switch (code) {
        case StatusCode::kOk: return "ok";
        case StatusCode::kInvalidArgument: return "invalid argument";
        case StatusCode::kNotFound: return "not found";
        case StatusCode::kOutOfRange: return "out of range";
        case StatusCode::kUnimplemented: return "unimplemented";
        case StatusCode::kResourceExhausted: return "resource exhausted";
        case StatusCode::kCancelled: return "cancelled";
        case StatusCode::kInternal: return "internal";
        case StatusCode::kIoError: return "i/o error";
        case StatusCode::kAlreadyExists: return "already exists";
        case StatusCode::kUnavailable: return "unavailable";
    }
    return "unknown";
}

std::string Status::to_string() const {
    if (is_ok()) return "ok";
    return message_;
}

}  // namespace ferrox

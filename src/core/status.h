#pragma once
// Status and Expected<T>: every failure that can happen at run time (bad file, bad request,
// no room, cancelled) is a value. Invariants use CHECK (check.h) instead.

#include <string>
#include <utility>
#include <variant>

namespace ferrox {

enum class StatusCode {
    kOk = 0,
    kInvalidArgument,  // malformed input from a user or a file
    kNotFound,
    kOutOfRange,
    kUnimplemented,  // a valid input that ferrox does not support (unknown tensor type, arch)
    kResourceExhausted,
    kCancelled,
    kInternal,
    kIoError,
    kAlreadyExists,  // a name that is taken (a model alias)
    kUnavailable,    // not ready yet, or shutting down: retry later
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
public:
    Status() = default;
    Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

    static Status ok() { return Status(); }

    bool is_ok() const { return code_ == StatusCode::kOk; }
    explicit operator bool() const { return is_ok(); }
    StatusCode code() const { return code_; }
    const std::string& message() const { return message_; }
    std::string to_string() const;

private:
    StatusCode code_ = StatusCode::kOk;
    std::string message_;
};

inline Status invalid_argument(std::string m) {
    return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status out_of_range(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
inline Status unimplemented(std::string m) {
    return Status(StatusCode::kUnimplemented, std::move(m));
}
inline Status internal_error(std::string m) {
    return Status(StatusCode::kInternal, std::move(m));
}
inline Status io_error(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
inline Status already_exists(std::string m) { return Status(StatusCode::kAlreadyExists, std::move(m)); }
inline Status unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Expected {
public:
    Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
    Expected(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design

    bool has_value() const { return v_.index() == 0; }
    explicit operator bool() const { return has_value(); }

    T& value() & { return std::get<0>(v_); }
    const T& value() const& { return std::get<0>(v_); }
    T&& value() && { return std::get<0>(std::move(v_)); }
    T& operator*() & { return value(); }
    const T& operator*() const& { return value(); }
    T* operator->() { return &value(); }
    const T* operator->() const { return &value(); }

    // The error; only valid when !has_value().
    const Status& status() const { return std::get<1>(v_); }

private:
    std::variant<T, Status> v_;
};

}  // namespace ferrox

// Propagate a failed Status out of the current function.
#define FERROX_RETURN_IF_ERROR(expr)            \
    do {                                        \
        ::ferrox::Status _st = (expr);          \
        if (!_st.is_ok()) return _st;           \
    } while (0)

#define FERROX_CONCAT_INNER(a, b) a##b
#define FERROX_CONCAT(a, b) FERROX_CONCAT_INNER(a, b)

// Declares `lhs` from an Expected, or returns its Status.
#define FERROX_ASSIGN_OR_RETURN(lhs, expr) \
    FERROX_ASSIGN_OR_RETURN_IMPL(FERROX_CONCAT(_exp_, __LINE__), lhs, expr)
#define FERROX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
    auto tmp = (expr);                               \
    if (!tmp.has_value()) return tmp.status();       \
    lhs = std::move(tmp).value()

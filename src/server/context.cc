#include "server/context.h"

#include "server/response_store.h"
#include "server/workers.h"

namespace ferrox {

bool ServerContext::acquire(const std::string& name, ModelLease* out, ApiError* err) const {
    auto m = registry->acquire(name);
    if (m.has_value()) {
        *out = std::move(*m);
        return true;
    }
    *err = from_status(m.status());
    if (m.status().code() == StatusCode::kNotFound) {
        err->type = "invalid_request_error";
        err->code = "model_not_found";
        err->param = "model";
    }
    return false;
}

}  // namespace ferrox

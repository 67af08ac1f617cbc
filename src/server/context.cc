#include "server/context.h"

#include "server/response_store.h"
#include "server/workers.h"

namespace ferrox {

bool ServerContext::acquire(const std::string& name, ModelLease* out, ApiError* err) const {
    std::lock_guard<std::mutex> lk(mu_);
    if (!model_) {
        err->status = 503;
        err->type = "server_error";
        err->message = "The model is still loading.";
        return false;
    }
    if (!name.empty() && name != model_->info().id && name != model_->info().path) {
        err->status = 404;
        err->code = "model_not_found";
        err->param = "model";
        err->type = "invalid_request_error";
        err->message = "The model '" + name + "' does not exist. This server serves '" + model_->info().id + "'.";
        return false;
    }
    *out = model_;
    return true;
}

std::vector<ModelLease> ServerContext::models() const {
    std::lock_guard<std::mutex> lk(mu_);
    if (!model_) return {};
    return {model_};
}

void ServerContext::set_model(ModelLease m) {
    std::lock_guard<std::mutex> lk(mu_);
    model_ = std::move(m);
}

ModelLease ServerContext::take_model() {
    std::lock_guard<std::mutex> lk(mu_);
    return std::move(model_);
}

}  // namespace ferrox

#include "server/context.h"

#include "server/response_store.h"
#include "server/workers.h"

namespace ferrox {

bool ServerContext::acquire(const std::string& name, ModelLease* out, ApiError* err, ModelUse use) const {
    if (use == ModelUse::kGenerate && opts.embedding_only) {
        // llama-server's answer when started with --embedding(s).
        err->status = 501;
        err->type = "not_supported_error";
        err->message = "This server does not support completions. Start it without `--embeddings`";
        return false;
    }
    auto m = registry->acquire(name, use == ModelUse::kEmbed ? ModelKind::kEmbed : ModelKind::kGenerate);
    if (m.has_value()) {
        const ModelInfo& info = (*m)->info();
        if (use == ModelUse::kGenerate && info.kind == ModelKind::kEmbed) {
            *err = bad_param("model", "The model '" + info.id +
                                          "' is an embedding model: it serves /v1/embeddings (and /embedding), "
                                          "not text generation.");
            err->code = "model_not_supported";
            return false;
        }
        if (use == ModelUse::kEmbed && info.kind != ModelKind::kEmbed) {
            *err = bad_param("model", "The model '" + info.id +
                                          "' is a text generation model, not an embedding model: /v1/embeddings "
                                          "needs an encoder checkpoint (such as all-MiniLM-L6-v2).");
            err->code = "model_not_supported";
            return false;
        }
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

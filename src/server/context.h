#pragma once
// The state every route shares: options, readiness, the served model, the worker threads and
// the Responses store. Routes reach a model only through acquire(), once per request.
//
// Threading: any thread; the model pointer is swapped under a mutex.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "engine/model_registry.h"
#include "engine/served_model.h"
#include "server/api_error.h"
#include "server/gcp_predict.h"
#include "server/http.h"
#include "server/responder.h"

namespace ferrox {

class Workers;
class ResponseStore;
class SlotBoard;

enum class ReasoningField { kReasoningContent, kReasoning, kBoth };

// What a route does with the model it acquires: the one check that keeps embedding models off
// the generating routes, and generation models off /v1/embeddings, is in acquire().
enum class ModelUse {
    kGenerate,  // chat, completions, messages, responses, /completion, /apply-template
    kEmbed,     // /v1/embeddings, /embedding
    kAny,       // /tokenize, /detokenize, /props: any kind ("" still prefers a generator)
};

// The server's sampling defaults: what a request that does not set a field gets (llama-server's
// --temp, --top-k, ... on the command line; read_sampling applies them).
struct SamplingDefaults {
    SamplingParams params;
    bool seeded = false;  // --seed was given: requests without a seed use params.seed
};

struct ApiServerOptions {
    HttpServerOptions http;
    std::vector<std::string> api_keys;  // empty: no authentication
    std::string chat_template_override; // replaces the model's template when not empty
    int default_max_tokens = -1;        // when a request gives none: until the end or context
    SamplingDefaults sampling;          // --temp, --top-k, ... : what a request does not set
    bool split_reasoning = true;        // --reasoning-format none: thinking stays in the text
    ReasoningField reasoning_field = ReasoningField::kBoth;  // Chat Completions' field name(s)
    int n_workers = 2;                  // threads for parsing, templates and event building
    size_t responses_max_count = 1000;  // stored Responses kept (oldest evicted first)
    size_t responses_max_bytes = 64 << 20;
    double responses_ttl_s = 30 * 86400.0;  // --responses-ttl: stored Responses expire (<= 0: never)
    std::string state_dir;              // --state-dir: Responses in DIR/responses.sqlite3; empty: in memory
    std::string responses_store_url;    // --responses-store redis://HOST:PORT[/DB]: shared by replicas
    std::string admin_key;              // empty: the /admin routes answer 403
    std::vector<std::string> cors_origins;  // --cors-origin (repeatable, "*": any); empty: off
    std::string access_log;             // --access-log FILE ("-": stderr); empty: none
    bool log_prompts = false;           // the access log includes prompts
    int max_prompt_tokens = 0;          // > 0: longer prompts are a 400
    int max_tokens_limit = 0;           // > 0: a larger max_tokens (or none: unlimited) is capped
    double request_timeout_s = 0;       // > 0: a request ends (truncated) after this long
    // llama-server's switches:
    bool embedding_only = false;        // --embedding: generating routes answer 501 not_supported_error
    bool slots_endpoint = true;         // --no-slots: GET /slots answers 501
    bool metrics_llamacpp = false;      // --metrics-compat llamacpp: /metrics adds llamacpp:* names
    bool metrics_vllm = false;          // --metrics-compat vllm: /metrics adds vllm:* names (router_protocol.h)
    std::string slot_save_path;         // --slot-save-path: POST /slots/{id}?action=save|restore files
    GcpPredictOptions gcp;              // AIP_MODE=PREDICTION: Vertex AI's /predict (gcp_predict.h)
    bool webui = true;                  // --no-webui: no chat page at / nor dashboard (404)
};

struct ServerContext {
    ApiServerOptions opts;
    std::atomic<bool> stopping{false};
    // SIGTERM's drain (ApiServer::drain): /health and /health/ready answer 503 and new requests
    // to ready-gated routes a 503 with Retry-After, while those running finish.
    std::atomic<bool> draining{false};
    std::unique_ptr<Workers> workers;
    std::unique_ptr<ResponseStore> responses;
    std::shared_ptr<ModelRegistry> registry;
    std::unique_ptr<AccessLog> access_log;
    // llama-server's /slots view of the generating requests (llamacpp/slots.h); set by the
    // llama.cpp routes, null without them.
    std::shared_ptr<SlotBoard> slots;
    // Why turns re-read more than their new tokens (cache_audit.h): the access log and /metrics.
    PromptCacheAudit cache_audit;

    // The model a request names ("" : the first of the kind `use` needs), once per request;
    // false with a 404 model_not_found (or a 503 while it loads) in *err, or a 400
    // (model_not_supported) when the model is of the other kind.
    bool acquire(const std::string& name, ModelLease* out, ApiError* err,
                 ModelUse use = ModelUse::kGenerate) const;
    // The models served, for /v1/models.
    std::vector<ModelLease> models() const { return registry->ready(); }
    bool ready() const { return registry->any_ready(); }
};

}  // namespace ferrox

#include "engine/served_model.h"

#include <chrono>

#include "core/check.h"
#include "engine/embedder.h"
#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

const char* model_kind_name(ModelKind k) { return k == ModelKind::kEmbed ? "embed" : "generate"; }

namespace {
int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}
}  // namespace

Expected<std::shared_ptr<ServedModel>> ServedModel::create_embedding(std::unique_ptr<Embedder> embedder,
                                                                     const ServedModelOptions& options) {
    std::shared_ptr<ServedModel> m(new ServedModel());
    const LoadedEncoder& e = embedder->encoder();
    const EncoderHParams& hp = e.model->hparams();
    ModelInfo& info = m->info_;
    info.kind = ModelKind::kEmbed;
    info.id = options.alias.empty() ? e.name : options.alias;
    info.path = e.path;
    info.arch = hp.arch;
    info.created = unix_seconds();
    info.n_ctx = hp.max_tokens;
    info.n_ctx_train = hp.n_pos;
    info.n_vocab = e.tokenizer->n_vocab();
    info.n_embd = hp.n_embd;
    info.n_layer = hp.n_layer;
    info.n_parallel = 1;
    info.prefix_cache = false;
    info.weight_bytes = e.model->weight_bytes();
    info.pooling = pooling_name(hp.pooling);
    info.normalize = hp.normalize;
    info.matryoshka = hp.matryoshka;
    m->embedder_ = std::move(embedder);
    return m;
}

const PromptBuilder& ServedModel::prompt() const {
    CHECK(prompt_ != nullptr);  // embedding models never reach a generating route
    return *prompt_;
}

Status ServedModel::embed(std::vector<std::vector<int32_t>> inputs, EmbedCallback done) {
    if (!embedder_) return invalid_argument("model '" + info_.id + "' is not an embedding model");
    return embedder_->submit(std::move(inputs), std::move(done));
}

const Tokenizer& ServedModel::tokenizer() const {
    return embedder_ ? *embedder_->encoder().tokenizer : *engine_->model().tokenizer;
}

ServedModel::~ServedModel() { shutdown(); }

Expected<std::shared_ptr<ServedModel>> ServedModel::create(std::unique_ptr<Engine> engine,
                                                           const ServedModelOptions& options) {
    std::shared_ptr<ServedModel> m(new ServedModel());
    const LoadedModel& lm = engine->model();
    const std::string& src = options.chat_template_override.empty() ? lm.chat_template
                                                                    : options.chat_template_override;
    auto prompt = PromptBuilder::create(*lm.tokenizer, src, options.prompt);
    if (!prompt.has_value()) return prompt.status();
    m->prompt_ = std::move(*prompt);

    ModelInfo& info = m->info_;
    info.id = options.alias.empty() ? lm.name : options.alias;
    info.path = lm.path;
    info.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    info.n_ctx = engine->context_ceiling();
    const ForwardModel& fm = lm.forward_model();
    info.n_vocab = fm.n_vocab();
    info.n_ctx_train = fm.n_ctx_train();
    if (lm.model) {
        const ModelHParams& hp = lm.model->hparams();
        info.arch = hp.arch;
        info.n_embd = hp.n_embd;
        info.n_layer = hp.n_layer;
        info.n_threads = lm.model->n_threads();
    }
    const EngineOptions& eo = engine->options();
    info.kv_type = kv_type_name(eo.kv_type);
    info.kv_block_size = eo.block_size;
    info.kv_blocks = engine->kv_blocks();
    info.kv_bytes = static_cast<int64_t>(engine->kv_block_bytes()) * engine->kv_blocks() +
                    static_cast<int64_t>(engine->draft_kv_bytes());
    if (engine->draft_model()) info.draft_model = engine->draft_model()->path;
    info.prefix_cache = eo.prefix_cache;
    info.n_parallel = eo.n_parallel;
    info.chat_template = m->prompt_->template_source();
    info.tool_format = tool_call_format_name(m->prompt_->tool_format());
    m->engine_ = std::move(engine);
    return m;
}

Expected<std::shared_ptr<RequestHandle>> ServedModel::submit(std::vector<int32_t> prompt,
                                                             GenerationParams params, EventSink sink) {
    if (!engine_) return invalid_argument("model '" + info_.id + "' is an embedding model");
    return engine_->submit(std::move(prompt), std::move(params), std::move(sink));
}

std::vector<int32_t> ServedModel::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    return tokenizer().encode(text, add_special, parse_special);
}

std::string ServedModel::detokenize(std::span<const int32_t> ids, bool special) const {
    DecodeOptions d;
    d.special = special;
    return tokenizer().decode(ids, d);
}

std::string ServedModel::token_piece(int32_t id, bool special) const {
    return std::string(tokenizer().token_to_piece(id, special));
}

ServedModel::Load ServedModel::load() const {
    if (embedder_) return {0, embedder_->stats().n_waiting, 0, 0};
    const Engine::Stats s = engine_->stats();
    return {s.n_running, s.n_waiting, s.kv_blocks_used, s.kv_blocks_total};
}

std::string ServedModel::prometheus() const {
    if (!embedder_) return engine_->prometheus();
    const Embedder::Stats s = embedder_->stats();
    auto counter = [](const char* name, const char* help, int64_t v) {
        return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
               std::to_string(v) + "\n";
    };
    return counter("ferrox_embedding_requests_total", "Embedding requests answered.", s.n_requests) +
           counter("ferrox_embedding_inputs_total", "Inputs embedded.", s.n_inputs) +
           counter("ferrox_embedding_tokens_total", "Tokens run through the encoder.", s.n_tokens) +
           counter("ferrox_embedding_forwards_total", "Encoder forward passes (batches).", s.n_forwards) +
           "# HELP ferrox_embedding_requests_waiting Embedding requests queued.\n"
           "# TYPE ferrox_embedding_requests_waiting gauge\nferrox_embedding_requests_waiting " +
           std::to_string(s.n_waiting) + "\n";
}

void ServedModel::shutdown() {
    if (engine_) engine_->shutdown();
    if (embedder_) embedder_->shutdown();
}

}  // namespace ferrox

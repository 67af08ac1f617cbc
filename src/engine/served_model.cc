#include "engine/served_model.h"

#include <chrono>

#include "engine/engine.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

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
    }
    const EngineOptions& eo = engine->options();
    info.kv_type = kv_type_name(eo.kv_type);
    info.kv_block_size = eo.block_size;
    info.kv_blocks = engine->kv_blocks();
    info.kv_bytes = static_cast<int64_t>(engine->kv_block_bytes()) * engine->kv_blocks();
    info.prefix_cache = eo.prefix_cache;
    info.n_parallel = eo.n_parallel;
    info.chat_template = m->prompt_->template_source();
    info.tool_format = tool_call_format_name(m->prompt_->tool_format());
    m->engine_ = std::move(engine);
    return m;
}

Expected<std::shared_ptr<RequestHandle>> ServedModel::submit(std::vector<int32_t> prompt,
                                                             GenerationParams params, EventSink sink) {
    return engine_->submit(std::move(prompt), std::move(params), std::move(sink));
}

std::vector<int32_t> ServedModel::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    return engine_->model().tokenizer->encode(text, add_special, parse_special);
}

std::string ServedModel::detokenize(std::span<const int32_t> ids, bool special) const {
    DecodeOptions d;
    d.special = special;
    return engine_->model().tokenizer->decode(ids, d);
}

std::string ServedModel::token_piece(int32_t id, bool special) const {
    return std::string(engine_->model().tokenizer->token_to_piece(id, special));
}

int ServedModel::first_invalid_token(std::span<const int64_t> ids) const {
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= info_.n_vocab) return static_cast<int>(i);
    }
    return -1;
}

ServedModel::Load ServedModel::load() const {
    const Engine::Stats s = engine_->stats();
    return {s.n_running, s.n_waiting, s.kv_blocks_used, s.kv_blocks_total};
}

std::string ServedModel::prometheus() const { return engine_->prometheus(); }

void ServedModel::shutdown() {
    if (engine_) engine_->shutdown();
}

}  // namespace ferrox

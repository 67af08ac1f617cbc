#include "engine/engine_core.h"

#include <algorithm>
#include <chrono>

#include "engine/spec/draft_model.h"
#include "engine/kv_disk_cache.h"
#include "engine/kv_ram_cache.h"
#include "engine/spec/prompt_lookup.h"

namespace ferrox {

EngineCore::EngineCore(std::shared_ptr<LoadedModel> model, const EngineOptions& opts)
    : model_(std::move(model)), opts_(opts) {}

EngineCore::~EngineCore() = default;

Expected<std::unique_ptr<EngineCore>> EngineCore::create(std::shared_ptr<LoadedModel> model,
                                                         const EngineOptions& opts,
                                                         std::shared_ptr<LoadedModel> draft) {
    if (!model || (!model->model && !model->stand_in) || !model->tokenizer) return invalid_argument("no model");
    if (opts.n_parallel < 1 || opts.block_size < 1 || opts.n_ctx < 1 || opts.max_batch_tokens < 2) {
        return invalid_argument("engine options out of range");
    }
    std::unique_ptr<EngineCore> e(new EngineCore(std::move(model), opts));
    FERROX_RETURN_IF_ERROR(e->init(std::move(draft)));
    return e;
}

Status EngineCore::init(std::shared_ptr<LoadedModel> draft) {
    ForwardModel& m = model_->forward_model();
    FERROX_RETURN_IF_ERROR(m.check_kv_type(opts_.kv_type));
    const KvGeometry geo = m.kv_geometry(opts_.block_size, opts_.kv_type);
    int64_t n_blocks = (static_cast<int64_t>(opts_.n_ctx) + opts_.block_size - 1) / opts_.block_size;
    if (opts_.kv_budget_mib > 0) {
        n_blocks = opts_.kv_budget_mib * (int64_t{1} << 20) / static_cast<int64_t>(geo.block_bytes());
        if (n_blocks < 1) {
            return invalid_argument("a KV budget of " + std::to_string(opts_.kv_budget_mib) +
                                    " MiB is less than one block (" + std::to_string(geo.block_bytes()) +
                                    " bytes for " + std::to_string(opts_.block_size) + " tokens)");
        }
    }
    n_blocks = std::min<int64_t>(n_blocks, (int64_t{1} << 30) / opts_.block_size);
    blocks_ = std::make_unique<BlockManager>(static_cast<int>(n_blocks), opts_.block_size);
    storage_ = m.make_kv_storage(geo, static_cast<int>(n_blocks));
    const int64_t pool_tokens = n_blocks * opts_.block_size;
    ceiling_ = static_cast<int>(std::min<int64_t>({pool_tokens, m.max_ctx(), m.n_ctx_train()}));
    opts_.max_batch_tokens = std::min(opts_.max_batch_tokens, m.max_batch_tokens());
    // One row per sequence, plus its draft tokens' rows (never more rows than batch tokens).
    const int64_t rows = std::min<int64_t>(
        static_cast<int64_t>(opts_.n_parallel) * (1 + std::max(0, opts_.draft_max)) + 1,
        std::max(opts_.max_batch_tokens, opts_.n_parallel + 1));
    logits_.resize(static_cast<size_t>(rows) * m.n_vocab());
    metrics_.kv_total.store(static_cast<int>(n_blocks));
    // Prompt logprobs take a row per prompt token: up to 64 MiB of rows a step (341 for a vocabulary
    // of 49152, 64 for 262144), allocated by the first step that needs them (step()).
    const int prompt_rows = static_cast<int>(std::clamp<int64_t>((int64_t{64} << 20) / (int64_t{4} * m.n_vocab()), 16,
                                                                 std::max(2, opts_.max_batch_tokens)));
    scheduler_ = std::make_unique<Scheduler>(
        SchedulerConfig{opts_.n_parallel, opts_.max_batch_tokens, opts_.prefix_cache, prompt_rows}, *blocks_, metrics_);
    tiers_ = std::make_unique<PrefixTiers>();
    if (opts_.cache_ram_mib > 0 && opts_.prefix_cache) {
        ram_cache_ = std::make_unique<KvRamCache>(*storage_, opts_.cache_ram_mib << 20);
        tiers_->add(ram_cache_.get(), &metrics_.ram_hit_blocks);
    }
    if (!opts_.cache_dir.empty() && opts_.prefix_cache) {
        // The model's identity: its file's metadata and tensor table (a stand-in without a file:
        // its name), with the pool's geometry.
        const uint64_t key = model_->gguf ? model_cache_key(*model_->gguf, geo)
                                          : std::hash<std::string>{}(model_->name) ^ geo.block_bytes();
        FERROX_ASSIGN_OR_RETURN(disk_cache_, KvDiskCache::open(opts_.cache_dir, key, *storage_,
                                                               std::max<int64_t>(1, opts_.cache_disk_mib) << 20));
        tiers_->add(disk_cache_.get(), &metrics_.disk_hit_blocks);
    }
    if (!tiers_->empty()) {
        scheduler_->set_store(tiers_.get());
        blocks_->set_evict_hook([this](int32_t b) { tiers_->spill(blocks_->hash(b), blocks_->tokens(b), b); });
    }
    post_ = std::make_unique<Postprocessor>(*model_->tokenizer, m, metrics_, clock_,
                                            [this] { scheduler_->update_gauges(); });
    const SpecConfig sc{opts_.draft_max, opts_.spec_unpriced};
    if (draft) {
        const DraftModelConfig dc{opts_.block_size, static_cast<int>(n_blocks), opts_.max_batch_tokens,
                                  opts_.n_parallel, opts_.kv_type, opts_.prefix_cache};
        FERROX_ASSIGN_OR_RETURN(std::unique_ptr<DraftModelProposer> p,
                                DraftModelProposer::create(std::move(draft), *model_, dc, metrics_, clock_));
        draft_ = p.get();
        spec_ = std::make_unique<Speculation>(sc, std::move(p), *blocks_, metrics_);
    } else if (opts_.spec_ngram > 0) {
        spec_ = std::make_unique<Speculation>(sc, std::make_unique<PromptLookupProposer>(opts_.spec_ngram), *blocks_,
                                              metrics_);
    }
    plan_.batch.tokens.reserve(static_cast<size_t>(opts_.max_batch_tokens));
    plan_.batch.seqs.reserve(static_cast<size_t>(opts_.n_parallel) + 1);
    scheduler_->update_gauges();
    return Status::ok();
}

const LoadedModel* EngineCore::draft_model() const { return draft_ ? &draft_->model() : nullptr; }
size_t EngineCore::draft_kv_bytes() const { return draft_ ? draft_->kv_bytes() : 0; }
const BlockManager* EngineCore::draft_blocks() const { return draft_ ? &draft_->blocks() : nullptr; }

Expected<std::unique_ptr<Sequence>> EngineCore::make_sequence(std::vector<int32_t> prompt, GenerationParams params,
                                                              EventSink sink) {
    if (prompt.empty()) return invalid_argument("the prompt is empty");
    if (params.prompt_logprobs >= 0 && !model_->forward_model().all_logits()) {
        return Status(StatusCode::kUnimplemented, "this model's backend does not compute prompt logprobs");
    }
    const int n_prompt = static_cast<int>(prompt.size());
    if (params.max_tokens_soft && params.max_tokens > 0 && static_cast<int64_t>(n_prompt) + params.max_tokens > ceiling_ &&
        n_prompt < ceiling_) {
        params.max_tokens = ceiling_ - n_prompt;  // a server default caps to what fits
    }
    const int want = params.max_tokens > 0 ? params.max_tokens : 1;
    if (static_cast<int64_t>(n_prompt) + want > ceiling_) {
        return invalid_argument("the prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                                std::to_string(want) + ") exceeds the context of " + std::to_string(ceiling_) +
                                " tokens");
    }
    const int n_vocab = model_->forward_model().n_vocab();
    for (int32_t t : prompt) {
        if (t < 0 || t >= n_vocab) {
            return invalid_argument("token id " + std::to_string(t) + " is out of range [0, " +
                                    std::to_string(n_vocab) + ")");
        }
    }
    auto s = std::make_unique<Sequence>();
    s->handle = std::make_shared<RequestHandle>(next_id_.fetch_add(1));
    s->n_prompt = n_prompt;
    s->tokens = std::move(prompt);
    s->max_total = std::min(params.max_tokens > 0 ? n_prompt + params.max_tokens : ceiling_, ceiling_);
    s->params = std::move(params);
    s->sink = std::move(sink);
    s->t_submit = clock_();
    return s;
}

Status EngineCore::check_queue() const {
    if (metrics_.n_waiting.load() < opts_.max_queue) return Status::ok();
    return Status(StatusCode::kResourceExhausted, "too many requests waiting (" + std::to_string(opts_.max_queue) + ")");
}

Expected<std::shared_ptr<RequestHandle>> EngineCore::submit(std::vector<int32_t> prompt, GenerationParams params,
                                                            EventSink sink) {
    FERROX_RETURN_IF_ERROR(check_queue());
    FERROX_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> s, make_sequence(std::move(prompt), std::move(params), std::move(sink)));
    auto handle = s->handle;
    metrics_.n_waiting.fetch_add(1);
    enqueue(std::move(s));
    return handle;
}

// The forward pass over the step's plan; its time prices draft tokens (decode-sized steps:
// Speculation's StepCost) and goes to the metrics.
Status EngineCore::forward() {
    const auto t0 = clock_();
    const Status st = model_->forward_model().forward(plan_.batch, *storage_, logits_);
    const auto dt = clock_() - t0;
    if (st.is_ok() && spec_) spec_->observe_step(plan_.n_tokens(), std::chrono::duration<double>(dt).count());
    EngineMetrics::add<uint64_t>(metrics_.forward_ns,
                                 static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(dt).count()));
    return st;
}

bool EngineCore::step() {
    const auto t0 = clock_();
    blocks_->set_now(std::chrono::duration_cast<std::chrono::milliseconds>(t0.time_since_epoch()).count());
    for (Scheduler::Ended& e : scheduler_->take_ended(t0)) post_->finish(*e.seq, e.why);
    if (!scheduler_->schedule(&plan_)) {
        scheduler_->update_gauges();  // the last sequences were cancelled: the engine now idles
        return false;
    }
    for (Sequence* s : plan_.owner) {
        if (!s->sampler) post_->prepare(*s);
    }
    if (spec_) spec_->propose(plan_, static_cast<int>(scheduler_->running().size()));
    // Rows beyond those sized at start-up are prompt logprobs' (Scheduler::max_prompt_rows):
    // the buffer grows once, at the first such step.
    const size_t n_logits = static_cast<size_t>(plan_.n_rows()) * static_cast<size_t>(model_->forward_model().n_vocab());
    if (logits_.size() < n_logits) logits_.resize(n_logits);
    post_->launch_masks(plan_);
    const Status st = forward();
    post_->process(plan_, st, logits_, spec_.get(), *scheduler_);
    if (spec_) spec_->after_step(plan_);
    scheduler_->update();
    if (ram_cache_) metrics_.ram_cache_bytes.store(ram_cache_->bytes(), std::memory_order_relaxed);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(clock_() - t0);
    EngineMetrics::add<uint64_t>(metrics_.step_ns, static_cast<uint64_t>(ns.count()));
    EngineMetrics::add<uint64_t>(metrics_.n_steps, 1);
    return true;
}

void EngineCore::cancel_all() {
    for (auto& s : scheduler_->take_all()) post_->finish(*s, FinishReason::kCancelled);
    metrics_.n_waiting.store(0);
    scheduler_->update_gauges();
}

}  // namespace ferrox

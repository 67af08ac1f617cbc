#include "engine/embedder.h"

#include <filesystem>

#include "engine/tokenizer_gguf.h"

namespace ferrox {

bool is_encoder_checkpoint(const std::string& path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return true;
    auto g = GgufFile::open(path);
    if (!g.has_value()) return false;
    auto arch = (*g)->get_string("general.architecture");
    return arch.has_value() && *arch && **arch == "bert";
}

Expected<std::unique_ptr<LoadedEncoder>> load_encoder(const std::string& path, const EncoderOptions& opts) {
    namespace fs = std::filesystem;
    auto e = std::make_unique<LoadedEncoder>();
    e->path = path;
    std::string stem = path;
    while (stem.size() > 1 && stem.back() == '/') stem.pop_back();
    e->name = fs::path(stem).filename().string();
    if (e->name.ends_with(".gguf")) e->name.resize(e->name.size() - 5);
    std::error_code ec;
    if (fs::is_directory(path, ec)) {
        const fs::path dir(path);
        const std::string cfg = fs::exists(dir / "tokenizer_config.json", ec) ? (dir / "tokenizer_config.json").string() : "";
        FERROX_ASSIGN_OR_RETURN(e->tokenizer, Tokenizer::from_hf_json((dir / "tokenizer.json").string(), cfg));
        FERROX_ASSIGN_OR_RETURN(e->model, EncoderModel::load_dir(path, opts));
    } else {
        FERROX_ASSIGN_OR_RETURN(e->gguf, GgufFile::open(path));
        FERROX_ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_gguf(*e->gguf));
        auto tok = Tokenizer::create(std::move(spec));
        if (!tok.has_value()) return Status(tok.status().code(), path + ": " + tok.status().message());
        e->tokenizer = std::move(*tok);
        FERROX_ASSIGN_OR_RETURN(e->model, EncoderModel::load_gguf(*e->gguf, opts));
    }
    if (e->model->hparams().n_vocab < e->tokenizer->n_vocab()) {
        return invalid_argument(path + ": the vocabulary has " + std::to_string(e->tokenizer->n_vocab()) +
                                " tokens but the model only " + std::to_string(e->model->hparams().n_vocab));
    }
    return e;
}

Embedder::Embedder(std::unique_ptr<LoadedEncoder> enc, size_t max_queue)
    : enc_(std::move(enc)), max_queue_(max_queue), thread_([this] { loop(); }) {}

Embedder::~Embedder() { shutdown(); }

Status Embedder::submit(std::vector<std::vector<int32_t>> inputs, EmbedDone done) {
    auto job = std::make_shared<Job>();
    job->inputs = std::move(inputs);
    job->done = std::move(done);
    job->out.resize(job->inputs.size() * static_cast<size_t>(enc_->model->hparams().n_embd));
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return unavailable("the embedding model is shutting down");
        if (queue_.size() >= max_queue_) {
            return Status(StatusCode::kResourceExhausted, "too many embedding requests are waiting");
        }
        queue_.push_back(std::move(job));
    }
    cv_.notify_one();
    return Status::ok();
}

void Embedder::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

Embedder::Stats Embedder::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    Stats s = stats_;
    s.n_waiting = static_cast<int>(queue_.size());
    return s;
}

void Embedder::loop() {
    EncoderModel& model = *enc_->model;
    const size_t dim = static_cast<size_t>(model.hparams().n_embd);
    const size_t budget = static_cast<size_t>(model.max_batch_tokens());
    std::vector<std::span<const int32_t>> batch;
    struct Slot {
        Job* job;
        size_t i_input;
    };
    std::vector<Slot> slots;
    std::vector<float> out;
    for (;;) {
        // Take inputs from the queue's front jobs until the token budget is spent.
        std::vector<std::shared_ptr<Job>> jobs;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
            if (stop_) break;
            size_t n_tok = 0;
            batch.clear();
            slots.clear();
            for (const auto& j : queue_) {
                while (j->n_next < j->inputs.size() &&
                       (batch.empty() || n_tok + j->inputs[j->n_next].size() <= budget)) {
                    n_tok += j->inputs[j->n_next].size();
                    batch.emplace_back(j->inputs[j->n_next]);
                    slots.push_back({j.get(), j->n_next++});
                }
                jobs.push_back(j);
                if (j->n_next < j->inputs.size()) break;
            }
            stats_.n_tokens += static_cast<int64_t>(n_tok);
            stats_.n_inputs += static_cast<int64_t>(batch.size());
            ++stats_.n_forwards;
        }
        out.resize(batch.size() * dim);
        const Status st = batch.empty() ? Status::ok() : model.encode(batch, out);
        for (size_t k = 0; k < slots.size(); ++k) {
            Job& j = *slots[k].job;
            if (!st.is_ok()) j.status = st;
            else std::copy(out.begin() + k * dim, out.begin() + (k + 1) * dim, j.out.begin() + slots[k].i_input * dim);
            ++j.n_done;
        }
        // Finished jobs leave the queue and get their answer (outside the lock).
        std::vector<std::shared_ptr<Job>> finished;
        {
            std::lock_guard<std::mutex> lk(mu_);
            while (!queue_.empty() && queue_.front()->n_done == queue_.front()->inputs.size()) {
                finished.push_back(std::move(queue_.front()));
                queue_.pop_front();
                ++stats_.n_requests;
            }
        }
        for (auto& j : finished) j->done(j->status, std::move(j->out));
    }
    std::deque<std::shared_ptr<Job>> left;
    {
        std::lock_guard<std::mutex> lk(mu_);
        left.swap(queue_);
    }
    for (auto& j : left) j->done(unavailable("the embedding model is shutting down"), {});
}

}  // namespace ferrox

#include "server/llamacpp/slots.h"

#include <algorithm>

namespace ferrox {

// Forwards every call to the route's sink and tells the board where each choice stands.
class SlotTracker final : public GenerationSink {
  public:
    SlotTracker(SlotBoard* board, std::string model, std::vector<uint64_t> keys, std::unique_ptr<GenerationSink> inner)
        : board_(board), model_(std::move(model)), keys_(std::move(keys)), inner_(std::move(inner)) {}
    // A client that went away gets neither finish() nor fail(): the slots free here.
    ~SlotTracker() override {
        for (uint64_t k : keys_) {
            if (k) board_->leave(model_, k);
        }
    }

    void start(HttpResponder& res) override { inner_->start(res); }
    void delta(HttpResponder& res, int i, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        if (d.text.find('\n') != std::string::npos) board_->on_text(model_, key(i), true);
        inner_->delta(res, i, d, lps);
    }
    void token(int i, int32_t id) override {
        board_->on_token(model_, key(i), id);
        inner_->token(i, id);
    }
    void choice_end(HttpResponder& res, int i, const ChoiceEnd& end) override {
        if (i >= 0 && i < static_cast<int>(keys_.size()) && keys_[i]) {
            board_->leave(model_, keys_[i]);
            keys_[i] = 0;
        }
        inner_->choice_end(res, i, end);
    }
    void progress(HttpResponder& res) override { inner_->progress(res); }
    void prompt_logprobs(HttpResponder& res, int i, std::span<const TokenLogprob> lps) override {
        inner_->prompt_logprobs(res, i, lps);
    }
    void finish(HttpResponder& res, const Usage& u) override { inner_->finish(res, u); }
    void fail(HttpResponder& res, const ApiError& e, bool started) override { inner_->fail(res, e, started); }

  private:
    uint64_t key(int i) const { return i >= 0 && i < static_cast<int>(keys_.size()) ? keys_[i] : 0; }
    SlotBoard* board_;
    std::string model_;
    std::vector<uint64_t> keys_;  // per choice; 0 once it left
    std::unique_ptr<GenerationSink> inner_;
};

std::unique_ptr<GenerationSink> SlotBoard::track(const GenerationJob& job, std::unique_ptr<GenerationSink> sink) {
    const ModelInfo& info = job.model->info();
    Slot s;
    s.busy = true;
    s.used = true;
    s.n_prompt = static_cast<int>(job.prompt.size());
    s.max_tokens = job.params.max_tokens;
    s.stream = job.stream;
    s.n_probs = std::max(0, job.params.top_logprobs);
    s.sampling = job.params.sampling;
    s.stop = job.params.stop;
    s.ignore_eos = job.params.ignore_eos;
    std::vector<uint64_t> keys;
    for (int i = 0; i < n_choices(job); ++i) {  // (a batch: n choices of each prompt)
        Slot c = s;
        const auto& prompt = job.prompts.empty() ? job.prompt : job.prompts[static_cast<size_t>(i / job.n)];
        c.n_prompt = static_cast<int>(prompt.size());
        if (keep_tokens_) {
            c.tokens.reserve(prompt.size() + static_cast<size_t>(std::max(0, job.params.max_tokens)));
            c.tokens = prompt;
        }
        c.sampling.seed += static_cast<uint64_t>(i % job.n);  // as run_generation seeds the choices
        const int n_parallel = std::max(1, info.n_parallel);
        const int want = i == 0 && job.id_slot >= 0 ? job.id_slot % n_parallel : -1;  // llama-server wraps it
        keys.push_back(enter(info.id, n_parallel, c, want));
    }
    return std::make_unique<SlotTracker>(this, info.id, std::move(keys), std::move(sink));
}

uint64_t SlotBoard::enter(const std::string& model, int n_parallel, const Slot& s, int want) {
    std::lock_guard<std::mutex> lk(mu_);
    Model& m = models_[model];
    if (static_cast<int>(m.slots.size()) != n_parallel) {
        m.slots.resize(static_cast<size_t>(n_parallel));
        m.owner.resize(static_cast<size_t>(n_parallel), 0);
    }
    const uint64_t key = next_key_++;
    Slot slot = s;
    slot.id_task = key;
    slot.t_enter = std::chrono::steady_clock::now();
    for (size_t i = 0; i < m.owner.size(); ++i) {
        if (m.owner[i] == 0 && (want < 0 || static_cast<int>(i) == want)) {
            m.owner[i] = key;
            m.slots[i] = slot;
            return key;
        }
    }
    m.waiting.push_back({key, slot, want});
    return key;
}

SlotBoard::Slot* SlotBoard::find(Model& m, uint64_t key) {
    for (size_t i = 0; i < m.owner.size(); ++i) {
        if (m.owner[i] == key) return &m.slots[i];
    }
    for (auto& w : m.waiting) {
        if (w.key == key) return &w.slot;
    }
    return nullptr;
}

void SlotBoard::on_token(const std::string& model, uint64_t key, int32_t id) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return;
    if (Slot* s = find(it->second, key)) {
        if (s->n_decoded++ == 0) s->t_first = std::chrono::steady_clock::now();
        if (keep_tokens_) s->tokens.push_back(id);
    }
}

void SlotBoard::on_text(const std::string& model, uint64_t key, bool new_line) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return;
    if (Slot* s = find(it->second, key)) s->has_new_line |= new_line;
}

void SlotBoard::leave(const std::string& model, uint64_t key) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = models_.find(model);
    if (it == models_.end()) return;
    Model& m = it->second;
    for (size_t i = 0; i < m.owner.size(); ++i) {
        if (m.owner[i] != key) continue;
        Slot& done = m.slots[i];
        if (done.n_decoded > 0) {
            const auto now = std::chrono::steady_clock::now();
            account(std::chrono::duration<double>(done.t_first - done.t_enter).count(),
                    std::chrono::duration<double>(now - done.t_first).count(), done.n_prompt, done.n_decoded);
        }
        done.busy = false;  // keeps what it showed, as llama-server's task_prev
        m.owner[i] = 0;
        // The first waiting request that takes any slot or asked for this one.
        for (auto w = m.waiting.begin(); w != m.waiting.end(); ++w) {
            if (w->want >= 0 && w->want != static_cast<int>(i)) continue;
            m.owner[i] = w->key;
            m.slots[i] = std::move(w->slot);
            m.waiting.erase(w);
            break;
        }
        return;
    }
    for (auto w = m.waiting.begin(); w != m.waiting.end(); ++w) {
        if (w->key == key) {
            m.waiting.erase(w);
            return;
        }
    }
}

void SlotBoard::account(double prompt_s, double predicted_s, int n_prompt, int n_decoded) {
    for (Timing* t : {&total_, &window_}) {
        t->prompt_s += prompt_s;
        t->predicted_s += predicted_s;
        t->prompt_tokens += static_cast<uint64_t>(n_prompt);
        t->predicted_tokens += static_cast<uint64_t>(n_decoded);
        t->n_tokens_max = std::max(t->n_tokens_max, n_prompt + n_decoded);
    }
}

void SlotBoard::timing(Timing* total, Timing* window) {
    std::lock_guard<std::mutex> lk(mu_);
    *total = total_;
    *window = window_;
    window_ = Timing{};
}

std::vector<SlotBoard::Slot> SlotBoard::snapshot(const std::string& model, int n_parallel) {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<Slot> out(static_cast<size_t>(std::max(1, n_parallel)));
    auto it = models_.find(model);
    if (it == models_.end()) return out;
    for (size_t i = 0; i < out.size() && i < it->second.slots.size(); ++i) out[i] = it->second.slots[i];
    return out;
}

}  // namespace ferrox

namespace ferrox {

Expected<SlotBoard::Slot*> SlotBoard::idle_slot(const std::string& model, int n_parallel, int id) {
    if (id < 0 || id >= n_parallel) return invalid_argument("Invalid slot ID");
    Model& m = models_[model];
    if (static_cast<int>(m.slots.size()) != n_parallel) {
        m.slots.resize(static_cast<size_t>(n_parallel));
        m.owner.resize(static_cast<size_t>(n_parallel), 0);
    }
    if (m.owner[static_cast<size_t>(id)] != 0) {
        return unavailable("slot " + std::to_string(id) + " is processing a request; try again when it is idle");
    }
    return &m.slots[static_cast<size_t>(id)];
}

Expected<std::vector<int32_t>> SlotBoard::slot_tokens(const std::string& model, int n_parallel, int id) {
    std::lock_guard<std::mutex> lk(mu_);
    FERROX_ASSIGN_OR_RETURN(Slot* s, idle_slot(model, n_parallel, id));
    std::vector<int32_t> out = s->tokens;
    if (s->n_decoded > 0 && static_cast<int>(out.size()) > s->n_prompt) out.pop_back();  // sampled, never computed
    return out;
}

Status SlotBoard::restore(const std::string& model, int n_parallel, int id, std::vector<int32_t> tokens) {
    std::lock_guard<std::mutex> lk(mu_);
    FERROX_ASSIGN_OR_RETURN(Slot* s, idle_slot(model, n_parallel, id));
    *s = Slot{};
    s->used = true;
    s->n_prompt = static_cast<int>(tokens.size());
    s->tokens = std::move(tokens);
    return Status::ok();
}

Expected<size_t> SlotBoard::erase(const std::string& model, int n_parallel, int id) {
    std::lock_guard<std::mutex> lk(mu_);
    FERROX_ASSIGN_OR_RETURN(Slot* s, idle_slot(model, n_parallel, id));
    std::vector<int32_t> kept = std::move(s->tokens);
    size_t n = kept.size();
    if (s->n_decoded > 0 && static_cast<int>(n) > s->n_prompt) --n;  // as slot_tokens counts
    s->tokens.clear();
    s->n_prompt = 0;
    s->n_decoded = 0;
    return n;
}

namespace {
constexpr char kSlotMagic[8] = {'F', 'X', 'S', 'L', 'O', 'T', '0', '1'};
constexpr size_t kSlotHeader = sizeof kSlotMagic + 8;

void put_u32(std::string* out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(std::string_view b, size_t at) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(b[at + static_cast<size_t>(i)])) << (8 * i);
    return v;
}
}  // namespace

std::string slot_file_encode(int n_vocab, std::span<const int32_t> tokens) {
    std::string out(kSlotMagic, sizeof kSlotMagic);
    out.reserve(kSlotHeader + 4 * tokens.size());
    put_u32(&out, static_cast<uint32_t>(n_vocab));
    put_u32(&out, static_cast<uint32_t>(tokens.size()));
    for (int32_t t : tokens) put_u32(&out, static_cast<uint32_t>(t));
    return out;
}

Expected<std::vector<int32_t>> slot_file_decode(std::string_view b, int n_vocab) {
    if (b.size() < kSlotHeader || b.substr(0, sizeof kSlotMagic) != std::string_view(kSlotMagic, sizeof kSlotMagic)) {
        return invalid_argument("not a ferrox slot file");
    }
    const uint32_t vocab = get_u32(b, sizeof kSlotMagic), n = get_u32(b, sizeof kSlotMagic + 4);
    if (vocab != static_cast<uint32_t>(n_vocab)) {
        return invalid_argument("the slot file was saved from a model of " + std::to_string(vocab) +
                                " tokens; this one has " + std::to_string(n_vocab));
    }
    if ((b.size() - kSlotHeader) % 4 != 0 || (b.size() - kSlotHeader) / 4 != n) {
        return invalid_argument("the slot file is cut short or has trailing bytes");
    }
    std::vector<int32_t> tokens(n);
    for (uint32_t i = 0; i < n; ++i) {
        const uint32_t t = get_u32(b, kSlotHeader + 4 * static_cast<size_t>(i));
        if (t >= vocab) return invalid_argument("the slot file holds a token id outside the vocabulary");
        tokens[i] = static_cast<int32_t>(t);
    }
    return tokens;
}

}  // namespace ferrox

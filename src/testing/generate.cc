#include "testing/generate.h"

#include <algorithm>
#include <chrono>

#include "engine/block_manager.h"

namespace ferrox {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Prefills `prompt` into a fresh sequence in chunks of at most max_batch tokens and leaves the
// last position's logits in `logits`.
Status prefill(Model& model, KvStorage& kv, SeqBlocks& seq, std::span<const int32_t> prompt,
               int max_batch, std::vector<float>& logits) {
    int n_past = 0;
    while (n_past < static_cast<int>(prompt.size())) {
        const int n = std::min<int>(max_batch, static_cast<int>(prompt.size()) - n_past);
        FERROX_RETURN_IF_ERROR(seq.reserve(n_past + n));
        Batch b;
        b.tokens.assign(prompt.begin() + n_past, prompt.begin() + n_past + n);
        b.seqs.push_back({0, n, n_past, seq.blocks().data(), static_cast<int>(seq.blocks().size()),
                          n_past + n == static_cast<int>(prompt.size())});
        FERROX_RETURN_IF_ERROR(model.forward(b, kv, logits));
        n_past += n;
    }
    return Status::ok();
}

}  // namespace

Expected<std::vector<float>> prompt_logits(Model& model, KvStorage& kv, std::span<const int32_t> prompt) {
    if (prompt.empty()) return invalid_argument("empty prompt");
    BlockManager blocks(kv.n_blocks(), kv.geometry().block_size);
    SeqBlocks seq(&blocks);
    std::vector<float> logits(model.n_vocab());
    FERROX_RETURN_IF_ERROR(prefill(model, kv, seq, prompt, 512, logits));
    return logits;
}

Expected<GenerateStats> generate(Model& model, KvStorage& kv, std::span<const int32_t> prompt,
                                 const GenerateOptions& opts,
                                 const std::function<bool(int32_t)>& on_token,
                                 const std::function<bool(int32_t)>& is_eog) {
    if (prompt.empty()) return invalid_argument("empty prompt");
    GenerateStats st;
    st.n_prompt = static_cast<int>(prompt.size());
    BlockManager blocks(kv.n_blocks(), kv.geometry().block_size);
    SeqBlocks seq(&blocks);
    std::vector<float> logits(model.n_vocab());
    std::vector<int32_t> history(prompt.begin(), prompt.end());
    Sampler sampler(opts.sampling, model.n_vocab());

    auto t0 = std::chrono::steady_clock::now();
    FERROX_RETURN_IF_ERROR(prefill(model, kv, seq, prompt, 512, logits));
    st.prompt_ms = ms_since(t0);

    const int ctx_left = kv.n_blocks() * kv.geometry().block_size - st.n_prompt;
    const int n_max = opts.n_predict < 0 ? ctx_left : std::min(opts.n_predict, ctx_left);
    auto t1 = std::chrono::steady_clock::now();
    Batch b;  // reused: the decode loop allocates nothing per token
    b.tokens.reserve(1);
    b.seqs.reserve(1);
    history.reserve(history.size() + static_cast<size_t>(std::max(0, n_max)));
    for (int i = 0; i < n_max; ++i) {
        const int32_t tok = sampler.sample(logits, history);
        ++st.n_gen;
        history.push_back(tok);
        if (!on_token(tok) || is_eog(tok) || i + 1 == n_max) break;
        const int pos = static_cast<int>(history.size()) - 1;
        Status s = seq.reserve(pos + 1);
        if (!s.is_ok()) break;  // context full: stop where we are
        b.tokens.assign(1, tok);
        b.seqs.assign(1, {0, 1, pos, seq.blocks().data(), static_cast<int>(seq.blocks().size()), true});
        FERROX_RETURN_IF_ERROR(model.forward(b, kv, logits));
    }
    st.gen_ms = ms_since(t1);
    return st;
}

}  // namespace ferrox

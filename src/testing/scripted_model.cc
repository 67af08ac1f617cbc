#include "testing/scripted_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/mmap_file.h"

namespace ferrox {
namespace {

constexpr float kWanted = 0.0f;
constexpr float kOther = -30.0f;

// The token that ends a scripted reply: EOS when it ends generation, else any eog token.
int32_t end_token(const Tokenizer& tok) {
    if (tok.eos() >= 0 && tok.is_eog(tok.eos())) return tok.eos();
    return tok.eog_ids().empty() ? -1 : tok.eog_ids().front();
}

// KMP failure function of `s`: fail[i] = length of the longest proper prefix of s[0..i] that
// is also its suffix.
std::vector<int> failure_function(const std::vector<int32_t>& s) {
    std::vector<int> fail(s.size(), 0);
    for (size_t i = 1, k = 0; i < s.size(); ++i) {
        while (k > 0 && s[i] != s[k]) k = fail[k - 1];
        if (s[i] == s[k]) ++k;
        fail[i] = static_cast<int>(k);
    }
    return fail;
}

class ScriptedModel final : public ForwardModel {
public:
    ScriptedModel(const ForwardModel& real, const Tokenizer& tok, std::vector<ScriptRule> rules)
        : tok_(tok),
          rules_(std::move(rules)),
          n_vocab_(real.n_vocab()),
          max_ctx_(real.max_ctx()),
          n_ctx_train_(real.n_ctx_train()),
          max_batch_tokens_(real.max_batch_tokens()),
          geo_(real.kv_geometry(1, KvType::kF16)),
          f16_ok_(real.check_kv_type(KvType::kF16)),
          q8_0_ok_(real.check_kv_type(KvType::kQ8_0)),
          eog_(end_token(tok)) {
        for (const ScriptRule& r : rules_) fail_.push_back(failure_function(r.reply));
        // Rules with a trigger in file order, then the default (the last one without).
        int i_default = -1;
        for (int i = 0; i < static_cast<int>(rules_.size()); ++i) {
            if (rules_[i].when.empty()) {
                i_default = i;
            } else {
                order_.push_back(i);
            }
        }
        if (i_default >= 0) order_.push_back(i_default);
    }

    int n_vocab() const override { return n_vocab_; }
    int max_ctx() const override { return max_ctx_; }
    int n_ctx_train() const override { return n_ctx_train_; }
    int max_batch_tokens() const override { return max_batch_tokens_; }
    KvGeometry kv_geometry(int block_size, KvType type) const override {
        return {geo_.n_layer, geo_.kv_dim, block_size, type};
    }
    Status check_kv_type(KvType type) const override {
        return type == KvType::kF16 ? f16_ok_ : q8_0_ok_;
    }

    // Engine thread only (uses the member scratch buffers).
    Status forward(const Batch& batch, KvStorage& kv, std::span<float> logits) override {
        const KvGeometry& geo = kv.geometry();
        if (geo.row_bytes() < sizeof(int32_t)) return internal_error("scripted model: KV rows too small");
        size_t n_rows = 0;
        for (const BatchSeq& s : batch.seqs) {
            if (s.n_tokens < 1 || s.i_begin < 0 ||
                static_cast<size_t>(s.i_begin) + s.n_tokens > batch.tokens.size() ||
                static_cast<int64_t>(s.n_blocks) * geo.block_size < s.n_past + s.n_tokens) {
                return internal_error("scripted model: bad batch layout");
            }
            write_tokens(s, batch, kv);
            if (!s.want_logits) continue;
            // The real model's layout: one row of n_vocab per sequence that wants logits, in
            // batch order.
            if ((n_rows + 1) * n_vocab_ > logits.size()) {
                return internal_error("scripted model: logits buffer too small");
            }
            read_history(s, kv);
            const int32_t want = next_token();
            if (want < 0 || want >= n_vocab_) {
                return internal_error("scripted model: token " + std::to_string(want) +
                                      " is outside the vocabulary of " + std::to_string(n_vocab_));
            }
            float* row = logits.data() + n_rows++ * n_vocab_;
            std::fill(row, row + n_vocab_, kOther);
            row[want] = kWanted;
        }
        return Status::ok();
    }

private:
    uint8_t* row_at(const BatchSeq& s, KvStorage& kv, int pos) const {
        const int bs = kv.geometry().block_size;
        return kv.k_rows(s.block_table[pos / bs], 0) +
               static_cast<size_t>(pos % bs) * kv.geometry().row_bytes();
    }

    // The new positions' tokens go into their K rows (blocks the sequence alone holds), where
    // later steps, other sequences sharing the prefix and recomputations read them back.
    void write_tokens(const BatchSeq& s, const Batch& batch, KvStorage& kv) const {
        for (int i = 0; i < s.n_tokens; ++i) {
            const int32_t t = batch.tokens[s.i_begin + i];
            std::memcpy(row_at(s, kv, s.n_past + i), &t, sizeof t);
        }
    }

    // Fills history_ with positions [0, n_past + n_tokens), and text_ with their pieces
    // (specials rendered), offsets_[p] the byte where position p's piece starts.
    void read_history(const BatchSeq& s, KvStorage& kv) {
        const int n = s.n_past + s.n_tokens;
        history_.resize(n);
        offsets_.resize(n + 1);
        text_.clear();
        for (int p = 0; p < n; ++p) {
            std::memcpy(&history_[p], row_at(s, kv, p), sizeof(int32_t));
            offsets_[p] = text_.size();
            text_ += tok_.token_to_piece(history_[p], /*special=*/true);
        }
        offsets_[n] = text_.size();
    }

    // The longest k such that history_ ends with rules_[i].reply[0..k) (a KMP scan).
    int emitted(int i) const {
        const std::vector<int32_t>& r = rules_[i].reply;
        const std::vector<int>& fail = fail_[i];
        const int len = static_cast<int>(r.size());
        int k = 0;
        for (int32_t t : history_) {
            if (k == len) k = fail[k - 1];
            while (k > 0 && t != r[k]) k = fail[k - 1];
            if (len > 0 && t == r[k]) ++k;
        }
        return k;
    }

    int32_t next_token() const {
        const int n = static_cast<int>(history_.size());
        int best = -1, best_k = -1;
        for (int i : order_) {
            const int k = emitted(i);
            if (k <= best_k) continue;
            const std::string& when = rules_[i].when;
            const std::string_view before(text_.data(), offsets_[n - k]);
            if (!when.empty() && before.find(when) == std::string_view::npos) continue;
            best = i;
            best_k = k;
        }
        if (best < 0) return eog_;
        const std::vector<int32_t>& r = rules_[best].reply;
        return best_k < static_cast<int>(r.size()) ? r[best_k] : eog_;
    }

    const Tokenizer& tok_;
    std::vector<ScriptRule> rules_;
    std::vector<std::vector<int>> fail_;  // per rule: the KMP failure function of its reply
    std::vector<int> order_;              // rules that can apply, in order of preference
    int n_vocab_, max_ctx_, n_ctx_train_, max_batch_tokens_;
    KvGeometry geo_;  // the real model's n_layer and kv_dim
    Status f16_ok_, q8_0_ok_;
    int32_t eog_;

    // Scratch of one forward (engine thread).
    std::vector<int32_t> history_;  // (n_past + n_tokens) of the sequence being answered
    std::vector<size_t> offsets_;   // (n_past + n_tokens + 1) byte offsets into text_
    std::string text_;
};

}  // namespace

Expected<std::vector<ScriptRule>> load_script(const std::string& path, const Tokenizer& tok) {
    auto fail = [&](const std::string& why) { return invalid_argument(path + ": " + why); };
    FERROX_ASSIGN_OR_RETURN(std::string text, read_file(path));
    nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) return fail("not valid JSON");
    if (!doc.is_array()) return fail("a script is a JSON array of {\"when\", \"reply\"} objects");
    const int32_t eog = end_token(tok);
    if (eog < 0) return fail("the vocabulary has no end-of-generation token to end replies with");
    std::vector<ScriptRule> rules;
    for (size_t i = 0; i < doc.size(); ++i) {
        const nlohmann::json& r = doc[i];
        const std::string where = "rule " + std::to_string(i);
        if (!r.is_object()) return fail(where + " is not an object");
        for (const auto& [key, value] : r.items()) {
            if (key != "when" && key != "reply") return fail(where + " has an unknown key \"" + key + "\"");
        }
        auto when = r.find("when");
        auto reply = r.find("reply");
        if (reply == r.end() || !reply->is_string()) return fail(where + " needs a string \"reply\"");
        if (when != r.end() && !when->is_string()) return fail(where + ": \"when\" must be a string");
        ScriptRule rule;
        rule.when = when != r.end() ? when->get<std::string>() : "";
        rule.reply_text = reply->get<std::string>();
        rule.reply = tok.encode(rule.reply_text, /*add_special=*/false, /*parse_special=*/true);
        rule.reply.push_back(eog);
        rules.push_back(std::move(rule));
    }
    return rules;
}

std::unique_ptr<ForwardModel> make_scripted_model(const ForwardModel& real, const Tokenizer& tok,
                                                  std::vector<ScriptRule> rules) {
    return std::make_unique<ScriptedModel>(real, tok, std::move(rules));
}

Expected<std::unique_ptr<ForwardModel>> scripted_stand_in(const LoadedModel& lm, const std::string& path) {
    FERROX_ASSIGN_OR_RETURN(std::vector<ScriptRule> rules, load_script(path, *lm.tokenizer));
    return make_scripted_model(*lm.model, *lm.tokenizer, std::move(rules));
}

}  // namespace ferrox

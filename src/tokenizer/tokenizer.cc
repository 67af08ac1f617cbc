#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <queue>
#include <unordered_map>

#include "tokenizer/hf_pipeline.h"
#include "tokenizer/regex_split.h"
#include "tokenizer/unicode.h"

namespace ferrox {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's space

struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

bool is_ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
    std::string out;
    out.reserve(s.size() + s.size() / 2);
    size_t pos = 0;
    for (;;) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out.append(to);
        pos = hit + from.size();
    }
    out.append(s, pos, std::string::npos);
    s.swap(out);
}

// A piece of the input: text to tokenize, or a special token found in it.
struct Fragment {
    int32_t token = -1;  // >= 0: a special token
    size_t offset = 0, length = 0;
};

}  // namespace

struct Tokenizer::Impl {
    VocabSpec spec;
    TokenMap token_to_id;
    std::vector<TokenType> types;
    std::vector<uint8_t> strip;
    std::vector<std::string> pieces;  // token_to_piece with special = true
    std::vector<uint8_t> eog_flag;
    std::vector<int32_t> eog_list;
    // Special tokens by first byte, longest first: [0] all specials (parse_special),
    // [1] user-defined ones only.
    std::array<std::array<std::vector<int32_t>, 256>, 2> special_by_byte;
    // BPE
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (l,r) -> (rank, id)
    std::unique_ptr<RegexSplitter> splitter;
    std::array<int32_t, 256> byte_token{};  // id of each byte's token, -1 if none
    // WordPiece
    size_t max_token_len = 0;

    bool is_special_type(int32_t id) const {
        const TokenType t = types[id];
        return t == TokenType::kControl || t == TokenType::kUnknown;
    }

    Status build();
    std::string make_piece(int32_t id) const;
    void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out) const;
    void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
    void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
    void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
    void encode_wpm(std::string_view text, std::vector<int32_t>& out) const;
    int32_t find(std::string_view s) const {
        auto it = token_to_id.find(s);
        return it == token_to_id.end() ? -1 : it->second;
    }
};

namespace {

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// "<0xNN>" -> NN, else -1.
int parse_byte_token(std::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
    const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return (hi < 0 || lo < 0) ? -1 : hi * 16 + lo;
}

bool in_list(std::string_view s, std::initializer_list<std::string_view> list) {
    for (auto x : list) {
        if (s == x) return true;
    }
    return false;
}

}  // namespace

Status Tokenizer::Impl::build() {
    FERROX_RETURN_IF_ERROR(vocab_validate(spec));
    const int32_t n = static_cast<int32_t>(spec.tokens.size());
    types = spec.token_types;
    if (types.empty()) types.assign(n, TokenType::kNormal);
    strip = spec.token_strip;
    if (strip.empty()) strip.assign(n, 0);
    token_to_id.reserve(n * 2);
    for (int32_t i = 0; i < n; ++i) {
        const std::string& t = spec.tokens[i];
        max_token_len = std::max(max_token_len, t.size());
        // First id wins for duplicates (HF added tokens may repeat a vocab entry).
        token_to_id.emplace(t, i);
    }

    // End-of-generation tokens, as llama.cpp detects them by text.
    eog_flag.assign(n, 0);
    auto add_eog = [&](int32_t id) {
        if (id < 0 || id >= n || eog_flag[id]) return;
        eog_flag[id] = 1;
        eog_list.push_back(id);
    };
    int32_t end_id = -1;
    bool has_return = false, has_call = false;
    for (int32_t i = 0; i < n; ++i) {
        std::string_view t = spec.tokens[i];
        const bool eog =
            in_list(t, {"<|eot_id|>",    "<|im_end|>",    "<|end|>",         "<|return|>",
                        "<|call|>",      "<end_of_turn>", "<|endoftext|>",   "<|eom_id|>",
                        "<EOT>",         "_<EOT>",        "<|end_of_text|>", "<end_of_utterance>",
                        "<|fim_pad|>",   "<fim-pad>",     "<fim_pad>",       "<|fim_repo|>",
                        "<|repo_name|>", "<fim-repo>",    "<reponame>",      "<|file_sep|>"});
        if (!eog) continue;
        if (t == "<|end|>") end_id = i;
        if (t == "<|return|>") has_return = true;
        if (t == "<|call|>") has_call = true;
        add_eog(i);
        if (types[i] == TokenType::kNormal) types[i] = TokenType::kControl;
        if (spec.eot_id < 0 &&
            in_list(t, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                        "<|end_of_text|>", "<EOT>", "_<EOT>", "<end_of_utterance>"})) {
            spec.eot_id = i;
        }
        if (spec.eom_id < 0 && t == "<|eom_id|>") spec.eom_id = i;
    }
    if (has_return && has_call && end_id >= 0) {
        // gpt-oss: <|end|> ends a message, not the generation.
        eog_flag[end_id] = 0;
        eog_list.erase(std::find(eog_list.begin(), eog_list.end(), end_id));
        types[end_id] = TokenType::kUserDefined;
    }
    add_eog(spec.eos_id);
    add_eog(spec.eot_id);
    add_eog(spec.eom_id);
    for (int32_t id : spec.eog_ids) add_eog(id);
    std::sort(eog_list.begin(), eog_list.end());

    // Special-token matching tables.
    for (int32_t i = 0; i < n; ++i) {
        const TokenType t = types[i];
        const std::string& text = spec.tokens[i];
        if (text.empty()) continue;
        const uint8_t b = static_cast<uint8_t>(text[0]);
        if (t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) {
            special_by_byte[0][b].push_back(i);
        }
        if (t == TokenType::kUserDefined) special_by_byte[1][b].push_back(i);
    }
    for (auto& table : special_by_byte) {
        for (auto& list : table) {
            std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
                return spec.tokens[a].size() > spec.tokens[b].size();
            });
        }
    }

    // Byte tokens.
    byte_token.fill(-1);
    for (int b = 0; b < 256; ++b) {
        if (spec.kind == VocabKind::kBpe && spec.byte_level) {
            byte_token[b] = find(byte_to_unicode_utf8(static_cast<uint8_t>(b)));
        } else {
            char buf[7];
            std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
            byte_token[b] = find(buf);
            if (byte_token[b] < 0 && spec.kind == VocabKind::kSpm) {
                byte_token[b] = find(std::string_view(reinterpret_cast<const char*>(&b), 1));
            }
        }
    }

    if (spec.kind == VocabKind::kBpe && !spec.hf_pipeline) {
        merges.reserve(spec.merges.size() * 2);
        std::string joined;
        for (size_t r = 0; r < spec.merges.size(); ++r) {
            const std::string& m = spec.merges[r];
            const size_t sp = m.find(' ', 1);
            if (sp == std::string::npos) {
                return invalid_argument("vocab: merge " + std::to_string(r) + " '" + m +
                                        "' has no space");
            }
            std::string_view l(m.data(), sp), rt(m.data() + sp + 1, m.size() - sp - 1);
            const int32_t a = find(l), b = find(rt);
            joined.assign(l);
            joined.append(rt);
            const int32_t c = find(joined);
            if (a < 0 || b < 0 || c < 0) continue;  // unusable merge (llama.cpp skips it too)
            merges.emplace(pair_key(a, b), std::make_pair(static_cast<int32_t>(r), c));
        }
        std::vector<std::string> regexes = spec.pre_regexes;
        if (regexes.empty()) {
            FERROX_ASSIGN_OR_RETURN(regexes, vocab_pre_regexes(spec.pre));
        }
        FERROX_ASSIGN_OR_RETURN(splitter, RegexSplitter::create(regexes));
    }

    pieces.resize(n);
    for (int32_t i = 0; i < n; ++i) pieces[i] = make_piece(i);
    return Status::ok();
}

std::string Tokenizer::Impl::make_piece(int32_t id) const {
    if (spec.hf_pipeline) return spec.hf_pipeline->piece(id);
    const std::string& text = spec.tokens[id];
    const TokenType t = types[id];
    switch (t) {
        case TokenType::kControl:
        case TokenType::kUnknown:
        case TokenType::kUserDefined:
            return text;
        case TokenType::kByte: {
            const int b = parse_byte_token(text);
            if (b >= 0) return std::string(1, static_cast<char>(b));
            return text;
        }
        case TokenType::kNormal:
            break;
        default:
            return {};  // unused/undefined: suppressed like control tokens
    }
    if (spec.kind == VocabKind::kBpe && spec.byte_level) {
        std::string out;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t start = pos;
            const uint32_t cp = utf8_decode(text, &pos);
            const int b = unicode_to_byte(cp);
            if (b >= 0) {
                out.push_back(static_cast<char>(b));
            } else {
                out.append(text, start, pos - start);  // not in the alphabet: keep as is
            }
        }
        return out;
    }
    std::string out = text;
    replace_all(out, kSpace, " ");
    return out;
}

void Tokenizer::Impl::partition(std::string_view text, bool parse_special,
                                std::vector<Fragment>& out) const {
    const auto& table = special_by_byte[parse_special ? 0 : 1];
    size_t text_start = 0;  // start of the pending text fragment
    size_t i = 0;
    while (i < text.size()) {
        const auto& cands = table[static_cast<uint8_t>(text[i])];
        int32_t hit = -1;
        for (int32_t id : cands) {
            const std::string& s = spec.tokens[id];
            if (text.compare(i, s.size(), s) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) {
            ++i;
            continue;
        }
        size_t left_end = i;
        if (strip[hit] & kTokenLstrip) {
            while (left_end > text_start && is_ascii_space(text[left_end - 1])) --left_end;
        }
        if (left_end > text_start) out.push_back({-1, text_start, left_end - text_start});
        out.push_back({hit, 0, 0});
        i += spec.tokens[hit].size();
        if (strip[hit] & kTokenRstrip) {
            while (i < text.size() && is_ascii_space(text[i])) ++i;
        }
        text_start = i;
    }
    if (text_start < text.size()) out.push_back({-1, text_start, text.size() - text_start});
}

// ---- BPE ----

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
    std::string normalized;
    if (spec.normalizer == Normalizer::kNfc) {
        normalized = utf8_nfc(text);
        text = normalized;
    }
    std::vector<std::pair<size_t, size_t>> words;
    splitter->split(text, words);
    std::string mapped;
    for (const auto& [off, len] : words) {
        std::string_view word = text.substr(off, len);
        if (spec.byte_level) {
            mapped.clear();
            for (char c : word) mapped += byte_to_unicode_utf8(static_cast<uint8_t>(c));
            word = mapped;
        }
        bpe_word(word, out);
    }
}

// One pre-tokenized word (already byte-mapped for byte-level vocabs).
void Tokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (spec.ignore_merges) {
        const int32_t id = find(word);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }
    struct Sym {
        int32_t id;
        int32_t prev, next;
        uint32_t off, len;  // bytes of `word`
    };
    // Per-thread scratch: words are short and many, so no allocation per word.
    thread_local std::vector<Sym> syms;
    syms.clear();
    // Initial symbols: one per character; characters outside the vocab fall back to bytes
    // (or unk), which never merge.
    size_t pos = 0;
    while (pos < word.size()) {
        const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[pos])), word.size() - pos);
        const int32_t id = find(word.substr(pos, n));
        if (id >= 0) {
            syms.push_back({id, 0, 0, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
        } else if (!spec.byte_level && spec.byte_fallback) {
            for (size_t k = 0; k < n; ++k) {
                const int32_t b = byte_token[static_cast<uint8_t>(word[pos + k])];
                syms.push_back({b >= 0 ? b : spec.unk_id, 0, 0, static_cast<uint32_t>(pos + k), 1});
            }
        } else {
            // Not representable: unk (fused with a preceding unk, as HF's fuse_unk) or,
            // for byte-level vocabs, the byte tokens of the character.
            if (spec.byte_level) {
                for (size_t k = 0; k < n; ++k) {
                    syms.push_back({-1, 0, 0, static_cast<uint32_t>(pos + k), 1});
                }
            } else if (spec.unk_id >= 0 && !(syms.size() && syms.back().id == spec.unk_id)) {
                syms.push_back(
                    {spec.unk_id, 0, 0, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
            }
        }
        pos += n;
    }
    const int32_t ns = static_cast<int32_t>(syms.size());
    for (int32_t i = 0; i < ns; ++i) {
        syms[i].prev = i - 1;
        syms[i].next = i + 1 < ns ? i + 1 : -1;
    }
    struct Cand {
        int32_t rank, left, left_id, right_id;
        bool operator<(const Cand& o) const {  // max-heap: lowest rank, then leftmost, on top
            return rank != o.rank ? rank > o.rank : left > o.left;
        }
    };
    thread_local std::vector<Cand> heap;
    heap.clear();
    auto try_add = [&](int32_t l) {
        if (l < 0) return;
        const int32_t r = syms[l].next;
        if (r < 0 || syms[l].id < 0 || syms[r].id < 0) return;
        auto it = merges.find(pair_key(syms[l].id, syms[r].id));
        if (it == merges.end()) return;
        heap.push_back({it->second.first, l, syms[l].id, syms[r].id});
        std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 0; i + 1 < ns; ++i) try_add(i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        const Cand c = heap.back();
        heap.pop_back();
        Sym& l = syms[c.left];
        if (l.len == 0 || l.id != c.left_id || l.next < 0) continue;
        Sym& r = syms[l.next];
        if (r.id != c.right_id) continue;
        l.id = merges.find(pair_key(c.left_id, c.right_id))->second.second;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.left;
        try_add(l.prev);
        try_add(c.left);
    }
    for (int32_t i = 0; i >= 0 && i < ns; i = syms[i].next) {
        const Sym& s = syms[i];
        if (s.id >= 0) {
            out.push_back(s.id);
            continue;
        }
        // A byte-level character without a token: emit its bytes' tokens, if any.
        for (uint32_t k = 0; k < s.len; ++k) {
            const int32_t b = find(word.substr(s.off + k, 1));
            if (b >= 0) out.push_back(b);
        }
    }
}

// ---- SentencePiece (llama.cpp's score-driven merge) ----

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
    struct Sym {
        int32_t prev, next;
        uint32_t off, len;
    };
    std::vector<Sym> syms;
    syms.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
        const int32_t idx = static_cast<int32_t>(syms.size());
        syms.push_back({idx - 1, pos + n < text.size() ? idx + 1 : -1, static_cast<uint32_t>(pos),
                        static_cast<uint32_t>(n)});
        pos += n;
    }
    struct Cand {
        float score;
        int32_t left, right;
        uint32_t size;
        bool operator<(const Cand& o) const {  // highest score, then leftmost, on top
            return score != o.score ? score < o.score : left > o.left;
        }
    };
    std::vector<Cand> heap;
    heap.reserve(syms.size());
    auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const uint32_t size = syms[l].len + syms[r].len;
        const int32_t id = find(text.substr(syms[l].off, size));
        if (id < 0) return;
        heap.push_back({spec.scores[id], l, r, size});
        std::push_heap(heap.begin(), heap.end());
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
    while (!heap.empty()) {
        std::pop_heap(heap.begin(), heap.end());
        const Cand c = heap.back();
        heap.pop_back();
        Sym& l = syms[c.left];
        Sym& r = syms[c.right];
        if (l.len == 0 || r.len == 0 || l.len + r.len != c.size) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = c.left;
        try_add(l.prev, c.left);
        try_add(c.left, l.next);
    }
    for (int32_t i = 0; i >= 0 && i < static_cast<int32_t>(syms.size()); i = syms[i].next) {
        const Sym& s = syms[i];
        const int32_t id = find(text.substr(s.off, s.len));
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (uint32_t k = 0; k < s.len; ++k) {
            const int32_t b = byte_token[static_cast<uint8_t>(text[s.off + k])];
            if (b >= 0) out.push_back(b);
        }
    }
}

// ---- WordPiece ----

namespace {

bool is_cjk(uint32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_bert_punct(uint32_t cp) {
    const bool ascii_punct = (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) ||
                             (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
    return ascii_punct || unicode_is_punctuation(cp);
}

}  // namespace

void Tokenizer::Impl::encode_wpm(std::string_view text, std::vector<int32_t>& out) const {
    // BertNormalizer: clean text, isolate CJK, strip accents (NFD, drop Mn), lowercase.
    std::u32string cps;
    cps.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        const uint32_t cp = utf8_decode(text, &pos);
        if (cp == 0 || cp == 0xFFFD) continue;
        if (cp == '\t' || cp == '\n' || cp == '\r' || unicode_is_whitespace(cp)) {
            cps.push_back(' ');
            continue;
        }
        if (unicode_is_other(cp)) continue;
        if (is_cjk(cp)) {
            cps.push_back(' ');
            cps.push_back(cp);
            cps.push_back(' ');
            continue;
        }
        cps.push_back(cp);
    }
    if (spec.strip_accents) {
        std::u32string d = unicode_nfd(cps);
        cps.clear();
        for (char32_t c : d) {
            if (unicode_category(c) != UnicodeCategory::kMn) cps.push_back(c);
        }
    }
    if (spec.lowercase) {
        std::u32string lower;
        lower.reserve(cps.size());
        for (char32_t c : cps) unicode_append_lower(c, lower);
        cps.swap(lower);
    }
    // BertPreTokenizer: split on whitespace, punctuation as single-character words.
    std::vector<std::u32string> words;
    std::u32string cur;
    auto finish = [&]() {
        if (!cur.empty()) words.push_back(std::move(cur));
        cur.clear();
    };
    for (char32_t c : cps) {
        if (unicode_is_whitespace(c)) {
            finish();
        } else if (is_bert_punct(c)) {
            finish();
            words.push_back(std::u32string(1, c));
        } else {
            cur.push_back(c);
        }
    }
    finish();
    // Greedy longest match; the vocab marks word-initial pieces with "▁" (llama.cpp's GGUF
    // convention; HF "##" continuations are converted on load).
    std::string w;
    std::vector<size_t> bounds;  // byte offset of each character in w
    for (const auto& word : words) {
        if (spec.max_input_chars_per_word > 0 &&
            word.size() > static_cast<size_t>(spec.max_input_chars_per_word)) {
            out.push_back(spec.unk_id);
            continue;
        }
        w.assign(kSpace);
        bounds.clear();
        bounds.push_back(0);
        for (char32_t c : word) {
            utf8_append(c, w);
            bounds.push_back(w.size());
        }
        // bounds[0] = 0 covers "▁"+first char together: a first piece must include "▁".
        const size_t before = out.size();
        size_t bi = 0;  // index into bounds of the current start
        bool bad = false;
        while (bi + 1 < bounds.size()) {
            const size_t start = bounds[bi];
            size_t bj = bounds.size() - 1;
            int32_t id = -1;
            for (; bj > bi; --bj) {
                if (bounds[bj] - start > max_token_len) continue;
                id = find(std::string_view(w).substr(start, bounds[bj] - start));
                if (id >= 0) break;
            }
            if (id < 0) {
                bad = true;
                break;
            }
            out.push_back(id);
            bi = bj;
        }
        if (bad) {
            out.resize(before);
            out.push_back(spec.unk_id);
        }
    }
}

// ---- Tokenizer ----

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Expected<std::unique_ptr<Tokenizer>> Tokenizer::create(VocabSpec spec) {
    auto impl = std::make_unique<Impl>();
    impl->spec = std::move(spec);
    FERROX_RETURN_IF_ERROR(impl->build());
    return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special,
                                       bool parse_special) const {
    std::vector<int32_t> out;
    encode_into(text, add_special, parse_special, out);
    return out;
}

void Tokenizer::encode_into(std::string_view text, bool add_special, bool parse_special,
                            std::vector<int32_t>& out) const {
    const Impl& m = *impl_;
    const VocabSpec& s = m.spec;
    if (s.hf_pipeline) {
        s.hf_pipeline->encode(text, add_special, parse_special, out);
        return;
    }
    std::vector<Fragment> frags;
    if (!text.empty()) m.partition(text, parse_special, frags);

    if (add_special) {
        if (s.kind == VocabKind::kWpm) {
            const int32_t cls = s.cls_id >= 0 ? s.cls_id : s.bos_id;
            if (cls >= 0) out.push_back(cls);
        } else if (s.add_bos && s.bos_id >= 0) {
            out.push_back(s.bos_id);
        }
    }
    bool prev_special = true;  // SPM: a space prefix goes before text at the start/after specials
    std::string buf;
    for (const Fragment& f : frags) {
        if (f.token >= 0) {
            out.push_back(f.token);
            prev_special = true;
            continue;
        }
        std::string_view frag = text.substr(f.offset, f.length);
        switch (s.kind) {
            case VocabKind::kSpm:
                buf.clear();
                if (s.add_space_prefix && prev_special) buf.push_back(' ');
                buf.append(frag);
                replace_all(buf, " ", kSpace);
                m.encode_spm(buf, out);
                break;
            case VocabKind::kBpe:
                if (s.normalizer == Normalizer::kSpmEscape) {
                    // HF Prepend("▁") + Replace(" ", "▁"): every text segment is prefixed.
                    buf.clear();
                    if (s.add_space_prefix) buf.append(kSpace);
                    buf.append(frag);
                    replace_all(buf, " ", kSpace);
                    m.encode_bpe(buf, out);
                } else {
                    m.encode_bpe(frag, out);
                }
                break;
            case VocabKind::kWpm:
                m.encode_wpm(frag, out);
                break;
        }
        prev_special = false;
    }
    if (add_special) {
        if (s.kind == VocabKind::kWpm) {
            if (s.sep_id >= 0) out.push_back(s.sep_id);
        } else {
            if (s.add_eos && s.eos_id >= 0) out.push_back(s.eos_id);
            if (s.add_sep && s.sep_id >= 0) out.push_back(s.sep_id);
        }
    }
}

std::string_view Tokenizer::token_to_piece(int32_t id, bool special) const {
    const Impl& m = *impl_;
    if (id < 0 || id >= static_cast<int32_t>(m.pieces.size())) return {};
    if (!special && m.is_special_type(id)) return {};
    return m.pieces[id];
}

bool Tokenizer::has_hf_pipeline() const { return impl_->spec.hf_pipeline != nullptr; }

std::optional<std::string> Tokenizer::hf_stream_piece(int32_t prev, int32_t id, bool special) const {
    const VocabSpec& s = impl_->spec;
    if (s.hf_pipeline) return s.hf_pipeline->stream_piece(prev, id, !special);
    return std::string(token_to_piece(id, special));
}

namespace {

// llama.cpp's detokenize clean-up of tokenization spaces.
void clean_up_spaces(std::string& t) {
    auto pass = [&t](auto&& body) {
        if (t.empty()) return;
        std::string out;
        out.reserve(t.size());
        out.push_back(t[0]);
        for (size_t i = 1; i < t.size(); ++i) body(out, i);
        t.swap(out);
    };
    // " ?", " !", " .", " ,"
    pass([&t](std::string& out, size_t& i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
        out.push_back(x);
    });
    // " ' " -> "'"
    pass([&t](std::string& out, size_t& i) {
        const char x = t[i];
        if (x == '\'' && i + 1 < t.size() && t[i - 1] == ' ' && t[i + 1] == ' ') {
            out.pop_back();
            out.push_back(x);
            ++i;  // drop the next space
            return;
        }
        out.push_back(x);
    });
    // " 's", " 'm", " 're", " 've" -> no space
    pass([&t](std::string& out, size_t& i) {
        const char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < t.size()) {
            const char x1 = t[i + 1];
            if (x1 == 's' || x1 == 'm') {
                out.pop_back();
            } else if (i + 2 < t.size()) {
                const char x2 = t[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out.pop_back();
            }
        }
        out.push_back(x);
    });
}

}  // namespace

std::string Tokenizer::decode(std::span<const int32_t> ids, const DecodeOptions& o) const {
    const VocabSpec& s = impl_->spec;
    if (s.hf_pipeline) {
        // HF's decode; remove_special drops every special added token.
        if (o.remove_special || !o.special) return s.hf_pipeline->decode(ids, true);
        return s.hf_pipeline->decode(ids, false);
    }
    bool remove_space = o.strip_leading_space && s.add_space_prefix;
    if (o.remove_special && s.add_bos && !ids.empty() && ids.front() == s.bos_id) {
        remove_space = false;
        ids = ids.subspan(1);
    }
    if (o.remove_special && s.add_eos && !ids.empty() && ids.back() == s.eos_id) {
        ids = ids.first(ids.size() - 1);
    }
    std::string out;
    for (int32_t id : ids) {
        std::string_view p = token_to_piece(id, o.special);
        if (remove_space && !p.empty() && p.front() == ' ') p.remove_prefix(1);
        remove_space = false;
        out.append(p);
    }
    if (o.clean_spaces && s.clean_spaces) clean_up_spaces(out);
    return out;
}

int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->spec.tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->spec.bos_id; }
int32_t Tokenizer::eos() const { return impl_->spec.eos_id; }
int32_t Tokenizer::eot() const { return impl_->spec.eot_id; }
int32_t Tokenizer::eom() const { return impl_->spec.eom_id; }
int32_t Tokenizer::unk() const { return impl_->spec.unk_id; }
int32_t Tokenizer::pad() const { return impl_->spec.pad_id; }
int32_t Tokenizer::sep() const { return impl_->spec.sep_id; }
int32_t Tokenizer::cls() const { return impl_->spec.cls_id; }
int32_t Tokenizer::mask() const { return impl_->spec.mask_id; }
bool Tokenizer::add_bos() const { return impl_->spec.add_bos; }
bool Tokenizer::add_eos() const { return impl_->spec.add_eos; }
bool Tokenizer::add_space_prefix() const { return impl_->spec.add_space_prefix; }
bool Tokenizer::is_eog(int32_t id) const {
    return id >= 0 && id < n_vocab() && impl_->eog_flag[id] != 0;
}
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog_list; }
std::string_view Tokenizer::token_text(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return {};
    return impl_->spec.tokens[id];
}
TokenType Tokenizer::token_type(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return TokenType::kUndefined;
    return impl_->types[id];
}
int32_t Tokenizer::token_id(std::string_view text) const { return impl_->find(text); }
const VocabSpec& Tokenizer::spec() const { return impl_->spec; }

}  // namespace ferrox

// HF tokenizer.json (+ tokenizer_config.json) -> VocabSpec.
// Two routes. The fast path fills VocabSpec's own fields and runs Tokenizer's GGUF-shaped
// encoders; it is taken only when legacy_exact() finds every component to be one that path
// reproduces exactly (byte-level BPE as GPT-2/llama3/qwen, llama2-style SentencePiece BPE, BERT
// WordPiece). Everything else goes through HfPipeline (hf_pipeline.h), which implements the
// remaining components or rejects them with a one-line error naming the component.

#include <functional>
#include <nlohmann/json.hpp>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "core/json_depth.h"
#include "core/mmap_file.h"
#include "tokenizer/hf_pipeline.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

namespace {

using nlohmann::json;

constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string regex_quote(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}/-").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

struct PreState {
    std::vector<std::string> regexes;
    bool byte_level = false;
    bool add_prefix_space = false;
};

Status parse_pre(const json& p, PreState& st) {
    if (p.is_null()) return Status::ok();
    const std::string type = p.value("type", "");
    if (type == "Sequence") {
        for (const json& q : p.at("pretokenizers")) FERROX_RETURN_IF_ERROR(parse_pre(q, st));
        return Status::ok();
    }
    if (type == "Split") {
        const std::string behavior = p.value("behavior", "");
        if (behavior != "Isolated" || p.value("invert", false)) {
            return unimplemented("tokenizer.json: Split behavior '" + behavior + "'" +
                                 (p.value("invert", false) ? " inverted" : ""));
        }
        const json& pat = p.at("pattern");
        if (pat.contains("Regex")) {
            st.regexes.push_back(pat.at("Regex").get<std::string>());
        } else {
            st.regexes.push_back(regex_quote(pat.at("String").get<std::string>()));
        }
        return Status::ok();
    }
    if (type == "ByteLevel") {
        st.byte_level = true;
        if (p.value("add_prefix_space", false)) st.add_prefix_space = true;
        if (p.value("use_regex", true)) st.regexes.push_back(kGpt2Regex);
        return Status::ok();
    }
    if (type == "Digits") {
        st.regexes.push_back(p.value("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
        return Status::ok();
    }
    if (type == "Punctuation") {
        const std::string behavior = p.value("behavior", "Isolated");
        if (behavior == "Isolated") {
            st.regexes.push_back(R"([\p{P}!-/:-@\[-`{-~])");
        } else if (behavior == "Contiguous") {
            st.regexes.push_back(R"([\p{P}!-/:-@\[-`{-~]+)");
        } else {
            return unimplemented("tokenizer.json: Punctuation behavior '" + behavior + "'");
        }
        return Status::ok();
    }
    if (type == "BertPreTokenizer") return Status::ok();  // WordPiece does this itself
    return unimplemented("tokenizer.json: pre-tokenizer '" + type + "'");
}

Status parse_normalizer(const json& n, VocabSpec& spec) {
    if (n.is_null()) return Status::ok();
    const std::string type = n.value("type", "");
    if (type == "Sequence") {
        for (const json& q : n.at("normalizers")) FERROX_RETURN_IF_ERROR(parse_normalizer(q, spec));
        return Status::ok();
    }
    if (type == "NFC") {
        spec.normalizer = Normalizer::kNfc;
        return Status::ok();
    }
    if (type == "Prepend" && n.value("prepend", "") == "\xE2\x96\x81") {
        spec.normalizer = Normalizer::kSpmEscape;
        spec.add_space_prefix = true;
        return Status::ok();
    }
    if (type == "Replace" && n.at("pattern").value("String", "") == " " &&
        n.value("content", "") == "\xE2\x96\x81") {
        spec.normalizer = Normalizer::kSpmEscape;
        return Status::ok();
    }
    if (type == "BertNormalizer") {
        spec.lowercase = n.value("lowercase", true);
        const json& sa = n.contains("strip_accents") ? n.at("strip_accents") : json();
        spec.strip_accents = sa.is_null() ? spec.lowercase : sa.get<bool>();
        return Status::ok();
    }
    return unimplemented("tokenizer.json: normalizer '" + type + "'");
}

// A config token field: "text" or {"content": "text", ...}; "" when absent/null.
std::string config_token(const json& cfg, const char* key) {
    if (!cfg.contains(key)) return {};
    const json& v = cfg.at(key);
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
    return {};
}

json field(const json& j, const char* key) { return j.contains(key) ? j.at(key) : json(); }

bool is_null_or_empty(const json& j, const char* key) {
    const json v = field(j, key);
    return v.is_null() || (v.is_string() && v.get<std::string>().empty());
}

// The pre-tokenizers the fast path reproduces: Split(Isolated), ByteLevel without a prefix
// space, Digits, Punctuation(Isolated/Contiguous), in any Sequence.
bool legacy_pre_ok(const json& p, bool& byte_level) {
    if (p.is_null()) return true;
    const std::string type = p.value("type", "");
    if (type == "Sequence") {
        for (const json& q : p.at("pretokenizers")) {
            if (!legacy_pre_ok(q, byte_level)) return false;
        }
        return true;
    }
    if (type == "Split") return p.value("behavior", "") == "Isolated" && !p.value("invert", false);
    if (type == "ByteLevel") {
        byte_level = true;
        return !p.value("add_prefix_space", true);
    }
    if (type == "Digits") return true;
    if (type == "Punctuation") {
        const std::string b = p.value("behavior", "Isolated");
        return b == "Isolated" || b == "Contiguous";
    }
    return false;
}

bool is_type(const json& j, const char* type) {
    return j.is_object() && j.value("type", "") == type;
}

// A TemplateProcessing whose single template is [one special] $A [one special] (each side
// optional unless `before`/`after` names it), each special a single id: what the fast path's
// bos/eos (cls/sep) express.
bool simple_template(const json& post, const std::string& before, const std::string& after) {
    if (!is_type(post, "TemplateProcessing")) return false;
    const json& single = post.at("single");
    const json& special = post.at("special_tokens");
    std::vector<std::string> pre, post_names;
    bool seen = false;
    for (const json& item : single) {
        if (item.contains("Sequence")) {
            if (seen) return false;
            seen = true;
            continue;
        }
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        if (!special.contains(name) || special.at(name).at("ids").size() != 1) return false;
        (seen ? post_names : pre).push_back(name);
    }
    if (!seen || pre.size() > 1 || post_names.size() > 1) return false;
    if (!before.empty() && (pre.size() != 1 || pre[0] != before)) return false;
    if (!after.empty() && (post_names.size() != 1 || post_names[0] != after)) return false;
    return true;
}

// llama2's decoder: Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0).
bool is_llama2_decoder(const json& d) {
    if (!is_type(d, "Sequence")) return false;
    const json& ds = d.at("decoders");
    return ds.size() == 4 && is_type(ds[0], "Replace") &&
           ds[0].at("pattern").value("String", "") == "\xE2\x96\x81" &&
           ds[0].value("content", "") == " " && is_type(ds[1], "ByteFallback") &&
           is_type(ds[2], "Fuse") && is_type(ds[3], "Strip") && ds[3].value("start", 0) == 1 &&
           ds[3].value("stop", 0) == 0;
}

// llama2's normalizer: Prepend("▁") then Replace(" ", "▁").
bool is_llama2_normalizer(const json& n) {
    if (!is_type(n, "Sequence")) return false;
    const json& ns = n.at("normalizers");
    return ns.size() == 2 && is_type(ns[0], "Prepend") &&
           ns[0].value("prepend", "") == "\xE2\x96\x81" && is_type(ns[1], "Replace") &&
           ns[1].at("pattern").value("String", "") == " " &&
           ns[1].value("content", "") == "\xE2\x96\x81";
}

// Whether the fast path gives exactly HF's ids for this file (see the file comment).
bool legacy_exact(const json& tj) {
    const json model = field(tj, "model");
    const json norm = field(tj, "normalizer");
    const json pre = field(tj, "pre_tokenizer");
    const json dec = field(tj, "decoder");
    const json post = field(tj, "post_processor");
    const json added = field(tj, "added_tokens");
    const std::string mtype = model.value("type", "");
    for (const json& a : added) {
        if (a.value("single_word", false)) return false;
        const bool special = a.value("special", false);
        if (!norm.is_null() && a.value("normalized", !special) && !special) return false;
    }
    if (mtype == "BPE") {
        if (!field(model, "dropout").is_null() ||
            !is_null_or_empty(model, "continuing_subword_prefix") ||
            !is_null_or_empty(model, "end_of_word_suffix")) {
            return false;
        }
        bool byte_level = false;
        if (!legacy_pre_ok(pre, byte_level)) return false;
        if (!post.is_null() && !simple_template(post, "", "") && !is_type(post, "ByteLevel")) {
            return false;
        }
        if (byte_level) {
            return (norm.is_null() || is_type(norm, "NFC")) && is_type(dec, "ByteLevel");
        }
        return is_llama2_normalizer(norm) && pre.is_null() && is_llama2_decoder(dec) &&
               model.value("fuse_unk", false) && model.value("byte_fallback", false);
    }
    if (mtype == "WordPiece") {
        return is_type(norm, "BertNormalizer") && norm.value("clean_text", true) &&
               norm.value("handle_chinese_chars", true) && is_type(pre, "BertPreTokenizer") &&
               model.value("continuing_subword_prefix", "##") == "##" &&
               is_type(dec, "WordPiece") &&
               (is_type(post, "BertProcessing") || simple_template(post, "[CLS]", "[SEP]"));
    }
    return false;
}

// tokenizer_config.json's special tokens and flags, over what tokenizer.json said.
void apply_config(const json& cfg, const std::function<int32_t(const std::string&)>& id_of,
                  VocabSpec& spec) {
    if (!cfg.is_null()) {
        if (const std::string b = config_token(cfg, "bos_token"); !b.empty())
            spec.bos_id = id_of(b);
        if (const std::string e = config_token(cfg, "eos_token"); !e.empty())
            spec.eos_id = id_of(e);
        if (const std::string p = config_token(cfg, "pad_token"); !p.empty())
            spec.pad_id = id_of(p);
        if (const std::string u = config_token(cfg, "unk_token"); !u.empty())
            spec.unk_id = id_of(u);
        if (cfg.contains("add_bos_token") && cfg.at("add_bos_token").is_boolean()) {
            spec.add_bos = cfg.at("add_bos_token").get<bool>();
        }
        if (cfg.contains("add_eos_token") && cfg.at("add_eos_token").is_boolean()) {
            spec.add_eos = cfg.at("add_eos_token").get<bool>();
        }
        if (cfg.contains("clean_up_tokenization_spaces") &&
            cfg.at("clean_up_tokenization_spaces").is_boolean()) {
            spec.clean_spaces = cfg.at("clean_up_tokenization_spaces").get<bool>();
        }
    }
    if (spec.add_bos && spec.bos_id < 0) spec.add_bos = false;
    if (spec.add_eos && spec.eos_id < 0) spec.add_eos = false;
}

// Every file the fast path does not reproduce exactly.
Expected<VocabSpec> build_pipeline_spec(const json& tj, const json& cfg) {
    FERROX_ASSIGN_OR_RETURN(std::shared_ptr<const HfPipeline> p, HfPipeline::from_json(tj));
    VocabSpec spec;
    spec.kind = p->kind();
    spec.tokens = p->tokens();
    spec.token_types = p->token_types();
    if (spec.kind == VocabKind::kSpm) spec.scores = p->scores();
    spec.unk_id = p->unk_id();
    spec.pre = "none";
    spec.byte_level = p->byte_level();
    spec.hf_pipeline = p;
    std::unordered_map<std::string, int32_t> ids;
    for (size_t i = spec.tokens.size(); i-- > 0;) ids[spec.tokens[i]] = static_cast<int32_t>(i);
    auto id_of = [&](const std::string& t) -> int32_t {
        auto it = ids.find(t);
        return it == ids.end() ? -1 : it->second;
    };
    // The post-processor's tokens around an empty sequence: BOS(CLS) ... EOS(SEP).
    std::vector<int32_t> with;
    p->encode("", true, true, with);
    if (spec.kind == VocabKind::kWpm) {
        spec.cls_id = id_of("[CLS]");
        spec.sep_id = id_of("[SEP]");
        spec.mask_id = id_of("[MASK]");
        spec.pad_id = id_of("[PAD]");
    }
    if (!with.empty()) {
        spec.bos_id = with.front();
        spec.add_bos = true;
        if (with.size() > 1) {
            spec.eos_id = with.back();
            spec.add_eos = true;
        }
    }
    // Informational only: the pipeline's post-processor decides what encode adds.
    apply_config(cfg, id_of, spec);
    return spec;
}

Expected<VocabSpec> build_spec(const json& tj, const json& cfg) {
    if (!legacy_exact(tj)) return build_pipeline_spec(tj, cfg);
    VocabSpec spec;
    const json& model = tj.at("model");
    const std::string mtype = model.value("type", "");
    const json& vocab = model.at("vocab");
    if (!vocab.is_object()) return unimplemented("tokenizer.json: model.vocab is not a map");

    // id -> text, from the vocab and the added tokens: ids checked as HfPipeline checks them
    // (integers, in range, a vocab id given to one text only).
    const json added = tj.contains("added_tokens") ? tj.at("added_tokens") : json::array();
    if (!added.is_array()) return invalid_argument("tokenizer.json: added_tokens is not an array");
    const int64_t limit = static_cast<int64_t>(vocab.size() + added.size()) + kHfMaxIdHoles;
    std::vector<std::pair<int32_t, const std::string*>> vocab_ids;
    std::vector<int32_t> added_ids;
    int64_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        FERROX_ASSIGN_OR_RETURN(const int32_t id, hf_token_id(it.value(), limit, "model vocab"));
        vocab_ids.emplace_back(id, &it.key());
        max_id = std::max<int64_t>(max_id, id);
    }
    for (const json& a : added) {
        FERROX_ASSIGN_OR_RETURN(const int32_t id, hf_token_id(a.at("id"), limit, "added token"));
        added_ids.push_back(id);
        max_id = std::max<int64_t>(max_id, id);
    }
    if (max_id < 0) return invalid_argument("tokenizer.json: empty vocab");
    const size_t n = static_cast<size_t>(max_id + 1);
    spec.tokens.assign(n, std::string());
    spec.token_types.assign(n, TokenType::kNormal);
    spec.token_strip.assign(n, 0);
    std::vector<uint8_t> present(n, 0);
    std::vector<uint8_t> is_added(n, 0);
    for (const auto& [id, text] : vocab_ids) {
        if (present[id]) {
            return invalid_argument("tokenizer.json: model vocab gives id " + std::to_string(id) + " to both " +
                                    hf_quote(spec.tokens[id]) + " and " + hf_quote(*text));
        }
        spec.tokens[id] = *text;
        present[id] = 1;
    }
    for (size_t i = 0; i < added.size(); ++i) {
        const json& a = added[i];
        const int32_t id = added_ids[i];
        spec.tokens[id] = a.at("content").get<std::string>();
        present[id] = 1;
        is_added[id] = 1;
        spec.token_types[id] =
            a.value("special", false) ? TokenType::kControl : TokenType::kUserDefined;
        spec.token_strip[id] = (a.value("lstrip", false) ? kTokenLstrip : 0) |
                               (a.value("rstrip", false) ? kTokenRstrip : 0);
    }
    for (size_t i = 0; i < n; ++i) {
        if (!present[i]) {
            spec.tokens[i] = "<ferrox:unassigned:" + std::to_string(i) + ">";
            spec.token_types[i] = TokenType::kUndefined;
        }
    }

    FERROX_RETURN_IF_ERROR(
        parse_normalizer(tj.contains("normalizer") ? tj.at("normalizer") : json(), spec));
    PreState pre;
    FERROX_RETURN_IF_ERROR(
        parse_pre(tj.contains("pre_tokenizer") ? tj.at("pre_tokenizer") : json(), pre));
    const json dec = tj.contains("decoder") ? tj.at("decoder") : json();
    if (!dec.is_null() && dec.value("type", "") == "ByteLevel") pre.byte_level = true;

    auto id_of = [&](const std::string& text) -> int32_t {
        if (text.empty()) return -1;
        for (const json& a : added) {
            if (a.at("content").get<std::string>() == text) return a.at("id").get<int32_t>();
        }
        auto it = vocab.find(text);
        return it == vocab.end() ? -1 : it.value().get<int32_t>();
    };

    if (mtype == "BPE") {
        spec.kind = VocabKind::kBpe;
        spec.byte_level = pre.byte_level;
        spec.byte_fallback = model.value("byte_fallback", false);
        spec.ignore_merges = model.value("ignore_merges", false);
        if (model.contains("unk_token") && model.at("unk_token").is_string()) {
            spec.unk_id = id_of(model.at("unk_token").get<std::string>());
        }
        if (pre.add_prefix_space) {
            return unimplemented("tokenizer.json: ByteLevel add_prefix_space");
        }
        spec.pre_regexes = pre.regexes;
        if (spec.pre_regexes.empty()) spec.pre = "none";
        // Each merge's two tokens and their join must be in the vocab (HF refuses the file
        // otherwise; the fast path's BPE would drop the characters it cannot spell).
        for (const json& m : model.at("merges")) {
            std::string left, right;
            if (m.is_string()) {
                const std::string s = m.get<std::string>();
                const size_t sp = s.find(' ', 1);
                if (sp == std::string::npos) return invalid_argument("tokenizer.json: merge " + hf_quote(s));
                left = s.substr(0, sp);
                right = s.substr(sp + 1);
            } else {
                left = m.at(0).get<std::string>();
                right = m.at(1).get<std::string>();
            }
            for (const std::string* t : {&left, &right}) {
                if (!vocab.contains(*t)) return hf_merge_out_of_vocab(left, right, *t);
            }
            if (!vocab.contains(left + right)) return hf_merge_out_of_vocab(left, right, left + right);
            spec.merges.push_back(left + " " + right);
        }
        if (!spec.byte_level && spec.byte_fallback) {
            for (size_t i = 0; i < n; ++i) {
                const std::string& t = spec.tokens[i];
                if (spec.token_types[i] == TokenType::kNormal && t.size() == 6 &&
                    t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
                    spec.token_types[i] = TokenType::kByte;
                }
            }
        }
        if (spec.normalizer == Normalizer::kSpmEscape && spec.unk_id >= 0 &&
            spec.token_types[spec.unk_id] == TokenType::kControl) {
            spec.token_types[spec.unk_id] = TokenType::kUnknown;
        }
    } else if (mtype == "WordPiece") {
        spec.kind = VocabKind::kWpm;
        spec.unk_id = id_of(model.value("unk_token", "[UNK]"));
        spec.max_input_chars_per_word = model.value("max_input_chars_per_word", 100);
        const std::string prefix = model.value("continuing_subword_prefix", "##");
        // llama.cpp's convention: "##x" -> "x", word-initial "x" -> "▁x".
        for (size_t i = 0; i < n; ++i) {
            if (is_added[i] || spec.token_types[i] != TokenType::kNormal) continue;
            std::string& t = spec.tokens[i];
            if (!prefix.empty() && t.size() > prefix.size() &&
                t.compare(0, prefix.size(), prefix) == 0) {
                t.erase(0, prefix.size());
            } else {
                t.insert(0, "\xE2\x96\x81");
            }
        }
        spec.cls_id = id_of("[CLS]");
        spec.sep_id = id_of("[SEP]");
        spec.mask_id = id_of("[MASK]");
        spec.pad_id = id_of("[PAD]");
        spec.bos_id = spec.cls_id;
        spec.add_bos = spec.cls_id >= 0;
        spec.add_sep = spec.sep_id >= 0;
        if (spec.unk_id >= 0) spec.token_types[spec.unk_id] = TokenType::kUnknown;
    } else {
        return unimplemented("tokenizer.json: model type '" + mtype + "'");
    }

    // BOS/EOS: the post-processor template, then tokenizer_config.json.
    const json pp = tj.contains("post_processor") ? tj.at("post_processor") : json();
    if (!pp.is_null() && pp.value("type", "") == "TemplateProcessing" &&
        spec.kind == VocabKind::kBpe) {
        const json& single = pp.at("single");
        if (!single.empty() && single.front().contains("SpecialToken")) {
            spec.bos_id = id_of(single.front().at("SpecialToken").at("id").get<std::string>());
            spec.add_bos = spec.bos_id >= 0;
        }
        if (single.size() > 1 && single.back().contains("SpecialToken")) {
            spec.eos_id = id_of(single.back().at("SpecialToken").at("id").get<std::string>());
            spec.add_eos = spec.eos_id >= 0;
        }
    }
    apply_config(cfg, id_of, spec);
    return spec;
}

}  // namespace

Expected<VocabSpec> Tokenizer::vocab_from_hf_json_text(std::string_view tokenizer_json,
                                                       std::string_view config_json) {
    // Depth first: the parse and every walk below recurse over the document's nesting.
    for (const std::string_view text : {tokenizer_json, config_json}) {
        if (json_nesting_depth(text, kMaxModelJsonDepth) > kMaxModelJsonDepth) {
            return invalid_argument("tokenizer.json: JSON nested deeper than " + std::to_string(kMaxModelJsonDepth) +
                                    " levels");
        }
    }
    try {
        const json tj = json::parse(tokenizer_json);
        const json cfg = config_json.empty() ? json() : json::parse(config_json);
        return build_spec(tj, cfg);
    } catch (const json::exception& e) {
        return invalid_argument(std::string("tokenizer.json: ") + e.what());
    } catch (const std::length_error&) {  // a table sized by a corrupt count
        return invalid_argument("tokenizer.json: a table too large to build (a corrupt count or id?)");
    } catch (const std::bad_alloc&) {
        return invalid_argument("tokenizer.json: a table too large to build (a corrupt count or id?)");
    }
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json_text(std::string_view tokenizer_json,
                                                                  std::string_view config_json) {
    FERROX_ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_hf_json_text(tokenizer_json, config_json));
    return create(std::move(spec));
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::from_hf_json(const std::string& tokenizer_json_path,
                                                             const std::string& config_path) {
    FERROX_ASSIGN_OR_RETURN(std::string tj, read_file(tokenizer_json_path));
    std::string cfg;
    if (!config_path.empty()) {
        FERROX_ASSIGN_OR_RETURN(cfg, read_file(config_path));
    }
    auto r = from_hf_json_text(tj, cfg);
    if (!r) return Status(r.status().code(), tokenizer_json_path + ": " + r.status().message());
    return r;
}

}  // namespace ferrox

#include "tokenizer/vocab.h"

#include <unordered_set>

namespace ferrox {

namespace {

// HF's GPT-2 ByteLevel split.
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kPoro =
    " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{FF0C}\\x{3001}\\x{964}\\x{6D4}\\x{60C})]+";

struct PreAlias {
    const char* name;
    const char* canonical;
};

// Every name llama.cpp accepts for the families ferrox implements, and its family.
constexpr PreAlias kPreAliases[] = {
    {"default", "default"},
    {"none", "none"},  // no split: the whole text is one word (HF BPE without pre-tokenizer)
    {"llama3", "llama-bpe"},
    {"llama-v3", "llama-bpe"},
    {"llama-bpe", "llama-bpe"},
    {"falcon3", "llama-bpe"},
    {"falcon-h1", "llama-bpe"},
    {"pixtral", "llama-bpe"},
    {"midm-2.0", "llama-bpe"},
    {"lfm2", "llama-bpe"},
    {"dbrx", "dbrx"},
    {"smaug-bpe", "dbrx"},
    {"deepseek-llm", "deepseek-llm"},
    {"deepseek-coder", "deepseek-coder"},
    {"deepseek-v3", "deepseek-v3"},
    {"falcon", "falcon"},
    {"mpt", "gpt-2"},
    {"olmo", "gpt-2"},
    {"jais", "gpt-2"},
    {"trillion", "gpt-2"},
    {"gpt-2", "gpt-2"},
    {"phi-2", "gpt-2"},
    {"jina-es", "gpt-2"},
    {"jina-de", "gpt-2"},
    {"gigachat", "gpt-2"},
    {"jina-v2-es", "gpt-2"},
    {"jina-v2-de", "gpt-2"},
    {"a.x-4.0", "gpt-2"},
    {"mellum", "gpt-2"},
    {"exaone4", "gpt-2"},
    {"jina-v1-en", "gpt-2"},
    {"jina-v2-code", "gpt-2"},
    {"roberta-bpe", "gpt-2"},
    {"starcoder", "starcoder"},
    {"refact", "starcoder"},
    {"command-r", "starcoder"},
    {"smollm", "starcoder"},
    {"codeshell", "starcoder"},
    {"exaone", "starcoder"},
    {"minerva-7b", "starcoder"},
    {"qwen2", "qwen2"},
    {"deepseek-r1-qwen", "qwen2"},
    {"megrez", "qwen2"},
    {"stablelm2", "qwen2"},
    {"hunyuan", "qwen2"},
    {"poro-chat", "poro"},
    {"bloom", "poro"},
    {"gpt3-finnish", "poro"},
    {"chatglm-bpe", "llama3-noignore"},
    {"glm4", "llama3-noignore"},
    {"viking", "viking"},
    {"tekken", "tekken"},
    {"gpt-4o", "gpt-4o"},
    {"llama4", "gpt-4o"},
};

}  // namespace

std::string vocab_canonical_pre(const std::string& pre) {
    for (const auto& a : kPreAliases) {
        if (pre == a.name) return a.canonical;
    }
    return {};
}

Expected<std::vector<std::string>> vocab_pre_regexes(const std::string& pre) {
    const std::string c = vocab_canonical_pre(pre);
    if (c == "none") return std::vector<std::string>{};
    if (c == "default") {
        return std::vector<std::string>{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)",
                                        "[0-9][0-9][0-9]"};
    }
    if (c == "llama-bpe" || c == "dbrx" || c == "llama3-noignore") {
        return std::vector<std::string>{kLlama3};
    }
    if (c == "deepseek-llm") {
        return std::vector<std::string>{
            "[\r\n]",
            "\\s?[A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{"
            "1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{"
            "37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{"
            "481}\\x{48A}-\\x{52F}\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-"
            "\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}"
            "\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-"
            "\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-"
            "\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}\\x{1FD0}-"
            "\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-\\x{1FFC}"
            "\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}"
            "\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-"
            "\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-"
            "\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}"
            "\\x{A771}-\\x{A787}\\x{A78B}-\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-"
            "\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{"
            "104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{"
            "118DF}\\x{1E900}-\\x{1E943}]+",
            "\\s?[!-/"
            ":-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
            "\\s+$",
            "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+",
            "\\p{N}+",
        };
    }
    if (c == "deepseek-coder") {
        return std::vector<std::string>{
            "[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
            "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+", R"(\p{N})"};
    }
    if (c == "deepseek-v3") {
        return std::vector<std::string>{
            R"(\p{N}{1,3})", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
            R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"};
    }
    if (c == "falcon") {
        return std::vector<std::string>{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"};
    }
    if (c == "gpt-2") return std::vector<std::string>{kGpt2};
    if (c == "starcoder") return std::vector<std::string>{R"(\p{N})", kGpt2};
    if (c == "qwen2") return std::vector<std::string>{kQwen2};
    if (c == "poro") return std::vector<std::string>{kPoro};
    if (c == "viking") return std::vector<std::string>{kPoro, R"(\p{N})"};
    if (c == "tekken") return std::vector<std::string>{kTekken};
    if (c == "gpt-4o") return std::vector<std::string>{kGpt4o};
    return unimplemented("unknown pre-tokenizer '" + pre + "'");
}

void vocab_apply_pre_defaults(VocabSpec& spec) {
    switch (spec.kind) {
        case VocabKind::kSpm:
            spec.add_space_prefix = true;
            spec.add_bos = true;
            spec.add_eos = false;
            spec.clean_spaces = false;
            return;
        case VocabKind::kWpm:
            spec.add_space_prefix = false;
            spec.add_bos = true;
            spec.add_eos = false;
            spec.add_sep = true;
            spec.clean_spaces = true;
            return;
        case VocabKind::kBpe:
            break;
    }
    spec.add_space_prefix = false;
    spec.clean_spaces = true;
    const std::string c = vocab_canonical_pre(spec.pre);
    static const std::unordered_set<std::string> kNoClean = {
        "deepseek-llm",     "deepseek-coder", "deepseek-v3", "command-r", "qwen2",
        "deepseek-r1-qwen", "poro-chat",      "viking",      "tekken",    "smollm",
        "chameleon",        "gpt-4o",         "llama4",      "trillion",  "megrez"};
    if (kNoClean.count(spec.pre)) spec.clean_spaces = false;
    if (c == "llama-bpe" || c == "tekken") {
        spec.ignore_merges = true;
        spec.add_bos = true;
    }
    if (spec.pre == "jina-v1-en" || spec.pre == "jina-v2-code" || spec.pre == "roberta-bpe") {
        spec.add_sep = true;
    }
}

Status vocab_validate(const VocabSpec& spec) {
    const size_t n = spec.tokens.size();
    if (n == 0) return invalid_argument("vocab: no tokens");
    if (n > static_cast<size_t>(INT32_MAX)) return invalid_argument("vocab: too many tokens");
    if (!spec.scores.empty() && spec.scores.size() != n) {
        return invalid_argument("vocab: " + std::to_string(spec.scores.size()) + " scores for " +
                                std::to_string(n) + " tokens");
    }
    if (!spec.token_types.empty() && spec.token_types.size() != n) {
        return invalid_argument("vocab: " + std::to_string(spec.token_types.size()) +
                                " token types for " + std::to_string(n) + " tokens");
    }
    if (!spec.token_strip.empty() && spec.token_strip.size() != n) {
        return invalid_argument("vocab: token_strip size does not match tokens");
    }
    for (size_t i = 0; i < spec.token_types.size(); ++i) {
        const int32_t t = static_cast<int32_t>(spec.token_types[i]);
        if (t < 0 || t > 6) {
            return invalid_argument("vocab: token " + std::to_string(i) + " has invalid type " +
                                    std::to_string(t));
        }
    }
    const std::pair<const char*, int32_t> ids[] = {
        {"bos", spec.bos_id}, {"eos", spec.eos_id}, {"eot", spec.eot_id},
        {"eom", spec.eom_id}, {"unk", spec.unk_id}, {"pad", spec.pad_id},
        {"sep", spec.sep_id}, {"cls", spec.cls_id}, {"mask", spec.mask_id}};
    for (const auto& [name, id] : ids) {
        if (id < -1 || id >= static_cast<int64_t>(n)) {
            return invalid_argument(std::string("vocab: ") + name + " id " + std::to_string(id) +
                                    " out of range [0, " + std::to_string(n) + ")");
        }
    }
    for (int32_t id : spec.eog_ids) {
        if (id < 0 || id >= static_cast<int64_t>(n)) {
            return invalid_argument("vocab: end-of-generation id " + std::to_string(id) +
                                    " out of range");
        }
    }
    if (spec.add_bos && spec.bos_id < 0) return invalid_argument("vocab: add_bos without a bos id");
    if (spec.add_eos && spec.eos_id < 0)
        return invalid_argument("vocab: add_eos without an eos id");
    if (spec.hf_pipeline) return Status::ok();  // the pipeline checked its own model
    if (spec.kind == VocabKind::kSpm && spec.scores.empty()) {
        return invalid_argument("vocab: SentencePiece vocab without scores");
    }
    if (spec.kind == VocabKind::kWpm && spec.unk_id < 0) {
        return invalid_argument("vocab: WordPiece vocab without an unknown token id");
    }
    if (spec.kind == VocabKind::kBpe && spec.pre_regexes.empty()) {
        auto r = vocab_pre_regexes(spec.pre);
        if (!r) return r.status();
    }
    return Status::ok();
}

}  // namespace ferrox

#pragma once
// VocabSpec: everything a Tokenizer needs, independent of where it came from (GGUF
// `tokenizer.ggml.*` metadata, or an HF tokenizer.json). Plain data; build one, then hand it
// to Tokenizer::create(), which validates it.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferrox {

class HfPipeline;  // tokenizer/hf_pipeline.h

// tokenizer.ggml.model
enum class VocabKind {
    kBpe,  // "gpt2": BPE over merges (byte-level unless BpeOptions::byte_level is false)
    kSpm,  // "llama": SentencePiece BPE driven by token scores, <0xNN> byte fallback
    kWpm,  // "bert": WordPiece
};

// tokenizer.ggml.token_type, with GGUF's numbering.
enum class TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
};

// Bits of VocabSpec::token_strip: whitespace beside a special token written in the text is
// absorbed into it (HF added-token lstrip/rstrip).
inline constexpr uint8_t kTokenLstrip = 1;
inline constexpr uint8_t kTokenRstrip = 2;

// How text is normalized before pre-tokenization (HF "normalizer"; GGUF vocabs imply it).
enum class Normalizer {
    kNone,
    kNfc,        // Qwen2/3 tokenizer.json
    kSpmEscape,  // HF llama2: prepend "▁" (when add_space_prefix) and replace ' ' with "▁"
};

struct VocabSpec {
    VocabKind kind = VocabKind::kBpe;
    // Pre-tokenizer name (tokenizer.ggml.pre), e.g. "llama-bpe", "qwen2", "gpt-2". Selects the
    // split regexes for kBpe; ignored otherwise. Use pre_regexes to give regexes directly.
    std::string pre = "default";
    // When non-empty, these PCRE2 patterns (applied in order, each splitting the pieces of
    // the previous one into matches and the gaps between them) replace the ones of `pre`.
    std::vector<std::string> pre_regexes;
    Normalizer normalizer = Normalizer::kNone;

    std::vector<std::string> tokens;     // id -> text, as stored (byte-level chars, ▁, ##...)
    std::vector<float> scores;           // empty or tokens.size()
    std::vector<TokenType> token_types;  // empty (all normal) or tokens.size()
    std::vector<uint8_t> token_strip;    // empty or tokens.size(): kTokenLstrip | kTokenRstrip
    // BPE merges, rank order, each "left right" (split at the first space after index 0).
    std::vector<std::string> merges;

    // Special ids; -1 when the vocab has none.
    int32_t bos_id = -1;
    int32_t eos_id = -1;
    int32_t eot_id = -1;
    int32_t eom_id = -1;
    int32_t unk_id = -1;
    int32_t pad_id = -1;
    int32_t sep_id = -1;
    int32_t cls_id = -1;
    int32_t mask_id = -1;
    // Extra end-of-generation ids beyond eos/eot/eom and the ones detected by text.
    std::vector<int32_t> eog_ids;

    bool add_bos = false;
    bool add_eos = false;
    bool add_sep = false;           // WordPiece: append [SEP] when adding specials
    bool add_space_prefix = false;  // SPM: prefix " " to text that follows BOS/a special token
    // BPE: a word that is itself a token skips the merges (llama3, tekken, HF ignore_merges).
    bool ignore_merges = false;
    // BPE: map bytes through the GPT-2 byte-to-unicode alphabet (false for SPM-style BPE
    // such as HF llama2, whose byte fallback uses <0xNN> tokens).
    bool byte_level = true;
    // BPE without byte_level: characters not in the vocab become <0xNN> byte tokens.
    bool byte_fallback = false;
    // llama.cpp's detokenize clean-up (" ," -> ","...), applied by decode() when asked.
    bool clean_spaces = false;
    // WordPiece (BertNormalizer): lowercase and strip accents.
    bool lowercase = true;
    bool strip_accents = true;
    // WordPiece: HF's limit; longer words become [UNK]. 0 = no limit (llama.cpp).
    int32_t max_input_chars_per_word = 100;
    // HF tokenizer.json whose components the fields above cannot express: when set, encode
    // and decode run this pipeline (tokens/types/special ids above still describe the vocab;
    // kind, merges, pre and normalizer are then informational only).
    std::shared_ptr<const HfPipeline> hf_pipeline;
};

// Canonical name for a pre-tokenizer alias ("llama3" -> "llama-bpe"); empty if unknown.
std::string vocab_canonical_pre(const std::string& pre);
// The split regexes of a known pre-tokenizer name; error for an unknown one.
Expected<std::vector<std::string>> vocab_pre_regexes(const std::string& pre);
// Applies llama.cpp's per-pre defaults that GGUF files leave implicit (ignore_merges for
// llama3/tekken, clean_spaces...). Call before explicit GGUF flags are read.
void vocab_apply_pre_defaults(VocabSpec& spec);

// Checks sizes, id ranges and that BPE merges/SPM scores are present. One-line errors.
Status vocab_validate(const VocabSpec& spec);

}  // namespace ferrox

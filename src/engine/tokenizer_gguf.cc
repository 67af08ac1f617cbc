#include "engine/tokenizer_gguf.h"

#include <algorithm>
#include <cctype>

namespace ferrox {

namespace {

// Reads an optional token id; out-of-range is an error (llama.cpp only warns).
Status read_id(const GgufFile& f, const char* key, size_t n_tokens, int32_t& id) {
    auto v = f.get_int(key);
    if (!v) return v.status();
    if (!v->has_value()) return Status::ok();
    const int64_t x = **v;
    if (x < 0 || static_cast<uint64_t>(x) >= n_tokens) {
        return f.error(std::string(key) + " = " + std::to_string(x) + " is out of range [0, " +
                       std::to_string(n_tokens) + ")");
    }
    id = static_cast<int32_t>(x);
    return Status::ok();
}

Status read_flag(const GgufFile& f, const char* key, bool& flag) {
    auto v = f.get_bool(key);
    if (!v) return v.status();
    if (v->has_value()) flag = **v;
    return Status::ok();
}

// The tokenizer model and its pre-tokenizer.
Status read_kind(const GgufFile& f, VocabSpec& spec) {
    FERROX_ASSIGN_OR_RETURN(auto model, f.get_string("tokenizer.ggml.model"));
    if (!model) return f.error("no tokenizer.ggml.model");
    if (*model == "gpt2") {
        spec.kind = VocabKind::kBpe;
    } else if (*model == "llama") {
        spec.kind = VocabKind::kSpm;
    } else if (*model == "bert") {
        spec.kind = VocabKind::kWpm;
    } else {
        return Status(StatusCode::kUnimplemented,
                      f.path() + ": tokenizer.ggml.model '" + *model + "' is not supported");
    }
    FERROX_ASSIGN_OR_RETURN(auto pre, f.get_string("tokenizer.ggml.pre"));
    spec.pre = pre && !pre->empty() ? *pre : "default";
    if (spec.kind == VocabKind::kBpe && vocab_canonical_pre(spec.pre).empty()) {
        return Status(StatusCode::kUnimplemented,
                      f.path() + ": tokenizer.ggml.pre '" + spec.pre + "' is not supported");
    }
    if (spec.kind != VocabKind::kBpe) spec.pre = "default";

    return Status::ok();
}

// Tokens, scores, types and merges.
Status read_tokens(const GgufFile& f, VocabSpec& spec) {
    FERROX_ASSIGN_OR_RETURN(auto tokens, f.get_string_array("tokenizer.ggml.tokens"));
    if (!tokens || tokens->empty()) return f.error("no tokenizer.ggml.tokens");
    spec.tokens = std::move(*tokens);
    const size_t n = spec.tokens.size();
    if (n > static_cast<size_t>(INT32_MAX)) return f.error("too many tokens");
    for (size_t i = 0; i < n; ++i) {
        if (spec.tokens[i].empty()) spec.tokens[i] = "[EMPTY_" + std::to_string(i) + "]";
    }

    FERROX_ASSIGN_OR_RETURN(auto scores, f.get_float_array("tokenizer.ggml.scores"));
    if (scores) {
        if (scores->size() != n) {
            return f.error("tokenizer.ggml.scores has " + std::to_string(scores->size()) +
                           " entries for " + std::to_string(n) + " tokens");
        }
        spec.scores = std::move(*scores);
    } else if (spec.kind == VocabKind::kSpm) {
        return f.error("tokenizer.ggml.model 'llama' without tokenizer.ggml.scores");
    }

    FERROX_ASSIGN_OR_RETURN(auto types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types) {
        if (types->size() != n) {
            return f.error("tokenizer.ggml.token_type has " + std::to_string(types->size()) +
                           " entries for " + std::to_string(n) + " tokens");
        }
        spec.token_types.resize(n);
        for (size_t i = 0; i < n; ++i) {
            const int64_t t = (*types)[i];
            // llama.cpp maps unknown type numbers to "undefined".
            spec.token_types[i] =
                (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
        }
    }

    if (spec.kind == VocabKind::kBpe) {
        FERROX_ASSIGN_OR_RETURN(auto merges, f.get_string_array("tokenizer.ggml.merges"));
        if (!merges) return f.error("tokenizer.ggml.model 'gpt2' without tokenizer.ggml.merges");
        spec.merges = std::move(*merges);
        for (size_t i = 0; i < spec.merges.size(); ++i) {
            if (spec.merges[i].find(' ', 1) == std::string::npos) {
                return f.error("tokenizer.ggml.merges[" + std::to_string(i) + "] has no space");
            }
        }
    }

    return Status::ok();
}

// Special ids and flags: llama.cpp's defaults per model, then the file's keys.
Status read_specials(const GgufFile& f, VocabSpec& spec) {
    const size_t n = spec.tokens.size();
    // llama.cpp's defaults per model, dropped when outside the vocab.
    auto default_id = [n](int32_t id) { return id >= 0 && static_cast<size_t>(id) < n ? id : -1; };
    switch (spec.kind) {
        case VocabKind::kSpm:
            spec.bos_id = default_id(1);
            spec.eos_id = default_id(2);
            spec.unk_id = default_id(0);
            break;
        case VocabKind::kWpm:
            spec.bos_id = default_id(101);
            spec.unk_id = default_id(100);
            spec.sep_id = default_id(102);
            spec.pad_id = default_id(0);
            spec.mask_id = default_id(103);
            break;
        case VocabKind::kBpe:
            spec.bos_id = default_id(11);
            spec.eos_id = default_id(11);
            break;
    }
    vocab_apply_pre_defaults(spec);

    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.bos_token_id", n, spec.bos_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eos_token_id", n, spec.eos_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eot_token_id", n, spec.eot_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.eom_token_id", n, spec.eom_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.unknown_token_id", n, spec.unk_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.seperator_token_id", n, spec.sep_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.padding_token_id", n, spec.pad_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.mask_token_id", n, spec.mask_id));
    FERROX_RETURN_IF_ERROR(read_id(f, "tokenizer.ggml.cls_token_id", n, spec.cls_id));
    if (spec.kind == VocabKind::kWpm) {
        // BERT's "BOS" is [CLS].
        if (spec.cls_id < 0) spec.cls_id = spec.bos_id;
        spec.bos_id = spec.cls_id;
    }

    FERROX_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_bos_token", spec.add_bos));
    FERROX_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_eos_token", spec.add_eos));
    FERROX_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_sep_token", spec.add_sep));
    FERROX_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.add_space_prefix", spec.add_space_prefix));
    FERROX_RETURN_IF_ERROR(read_flag(f, "tokenizer.ggml.normalizer.lowercase", spec.lowercase));
    spec.strip_accents = spec.lowercase;
    FERROX_RETURN_IF_ERROR(
        read_flag(f, "tokenizer.ggml.normalizer.strip_accents", spec.strip_accents));
    if (spec.kind == VocabKind::kWpm) spec.max_input_chars_per_word = 0;  // as llama.cpp
    if (spec.add_bos && spec.bos_id < 0) {
        return f.error("tokenizer.ggml.add_bos_token is true but there is no BOS token");
    }
    if (spec.add_eos && spec.eos_id < 0) {
        return f.error("tokenizer.ggml.add_eos_token is true but there is no EOS token");
    }

    return Status::ok();
}

// Phi-3 GGUFs don't carry HF's rstrip flags; llama.cpp sets them by model name.
Status read_strip_flags(const GgufFile& f, VocabSpec& spec) {
    const size_t n = spec.tokens.size();
    FERROX_ASSIGN_OR_RETURN(auto name, f.get_string("general.name"));
    std::string lname = name ? *name : "";
    std::transform(lname.begin(), lname.end(), lname.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lname.find("phi-3") != std::string::npos || lname.find("phi3") != std::string::npos) {
        spec.token_strip.assign(n, 0);
        for (size_t i = 0; i < n; ++i) {
            const TokenType t = spec.token_types.empty() ? TokenType::kNormal : spec.token_types[i];
            const std::string& s = spec.tokens[i];
            if (t == TokenType::kControl || t == TokenType::kUserDefined ||
                t == TokenType::kUnknown || s == "</s>") {
                spec.token_strip[i] = kTokenRstrip;
            }
            if (s == "<unk>" || s == "<s>" || s == "<|endoftext|>") spec.token_strip[i] = 0;
        }
    }

    return Status::ok();
}

}  // namespace

Expected<VocabSpec> vocab_from_gguf(const GgufFile& f) {
    VocabSpec spec;
    FERROX_RETURN_IF_ERROR(read_kind(f, spec));
    FERROX_RETURN_IF_ERROR(read_tokens(f, spec));
    FERROX_RETURN_IF_ERROR(read_specials(f, spec));
    FERROX_RETURN_IF_ERROR(read_strip_flags(f, spec));
    Status st = vocab_validate(spec);
    if (!st) return f.error(st.message());
    return spec;
}

}  // namespace ferrox

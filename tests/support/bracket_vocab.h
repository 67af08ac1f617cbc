#pragma once
// The vocabulary of the engine tests' fake models: token 0 is the control token <|endoftext|>
// (EOS, no text) and token i > 0 is the text "[i]", so an answer's text spells its ids.

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace ferrox {

inline std::string bracket_piece(int32_t t) { return t == 0 ? "" : "[" + std::to_string(t) + "]"; }

inline std::unique_ptr<Tokenizer> bracket_tokenizer(int n_vocab) {
    VocabSpec spec;
    spec.kind = VocabKind::kBpe;
    spec.pre = "default";
    spec.tokens.push_back("<|endoftext|>");
    spec.token_types.push_back(TokenType::kControl);
    for (int i = 1; i < n_vocab; ++i) {
        spec.tokens.push_back(bracket_piece(i));
        spec.token_types.push_back(TokenType::kNormal);
    }
    spec.eos_id = 0;
    auto tok = Tokenizer::create(std::move(spec));
    EXPECT_TRUE(tok.has_value()) << tok.status().message();
    return tok.has_value() ? std::move(*tok) : nullptr;
}

}  // namespace ferrox

#pragma once
// A stand-in model for end-to-end tests: instead of running the transformer it replays
// scripted replies, so the real server can be made to answer with any text (tool-call markup,
// <think> blocks, ...) deterministically. `ferrox serve --test-script FILE` installs it as
// LoadedModel::stand_in.
//
// A script is a JSON file: [{"when": "substring", "reply": "text"}, ...]. The reply of a
// sequence is chosen from its whole token history (prompt and tokens generated so far), which
// forward() keeps in the sequence's own KV rows, so the prefix cache, preemption and chunked
// prefill see exactly what they would with the real model: the answer is a function of the
// history alone.
//
// Choosing the next token of a history H (decoded with special tokens rendered):
//  - for every rule, k = the longest prefix reply[0..k) that H ends with (the part of that
//    reply already emitted; 0 when none);
//  - a rule applies when its `when` occurs in the text of H before those k tokens (so a reply
//    never re-triggers a rule with its own text); the default, the last rule with an empty
//    `when`, always applies; other rules with an empty `when` never do;
//  - of the rules that apply, the one with the largest k wins (a reply in progress keeps
//    going), ties going to the first in the file and the default last. On a fresh prompt
//    (every k = 0) that is the first rule whose `when` occurs in the prompt, else the default;
//  - the wanted token is reply[k], or end-of-generation when the whole reply is there; with
//    no rule applying, end-of-generation.
// The wanted token's logit is 0 and every other -30: greedy and sampled decoding both pick it
// (an unmasked alternative has probability below 1e-8 at temperature 1) and logprobs stay
// finite. A prompt that happens to end with the first tokens of the chosen reply makes the
// reply start after them (the history alone cannot say where the prompt ends).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/loaded_model.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

struct ScriptRule {
    std::string when;             // substring of the history's text; "" for the default
    std::string reply_text;       // as written in the script, for messages
    std::vector<int32_t> reply;   // reply_text tokenized (special markup as its tokens) + EOS
};

// Reads and tokenizes a script. Each reply is encoded with parse_special (so "<|im_end|>" or
// "<tool_call>" in the text becomes its token when the vocabulary has one) and ends with the
// tokenizer's end-of-generation token (EOS, else the first of eog_ids()). Errors (missing file,
// bad JSON, wrong shape, a vocabulary with no end-of-generation token) are one line naming the
// file.
Expected<std::vector<ScriptRule>> load_script(const std::string& path, const Tokenizer& tok);

// A ForwardModel that answers by `rules`. Its limits, KV geometry and accepted KV types are
// `real`'s, read once here (so the engine sizes its pool as for the real model, and `real` may
// go away first). `tok` must outlive the result (LoadedModel declares `tokenizer` before
// `stand_in`, so it does). forward() runs on the engine thread only, one call at a time; it
// writes each position's token id into the first 4 bytes of its layer-0 K row and reads the
// history back from there.
std::unique_ptr<ForwardModel> make_scripted_model(const ForwardModel& real, const Tokenizer& tok,
                                                  std::vector<ScriptRule> rules);

// The stand-in for ModelSpec::stand_in: the script at `path` over the loaded model's tokenizer
// and limits.
Expected<std::unique_ptr<ForwardModel>> scripted_stand_in(const LoadedModel& lm, const std::string& path);

}  // namespace ferrox

#pragma once
// The protocol-neutral half of every generating route: submit n choices of one prompt, refuse
// before the response starts (queue full, prompt too long: a proper HTTP status, never an
// error inside a 200 stream), cancel on disconnect, cut off a client that stops reading, run
// the stream parsers (reasoning, tool calls) per choice, and add up usage. A protocol only
// supplies a GenerationSink that turns neutral deltas into its wire format.
//
// Threading: the engine's callback only queues the event into the generation's mailbox; a
// worker drains it, one drain at a time, so a sink is never called concurrently and sees each
// choice's events in order. Sinks write to the (thread-safe) responder.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/request.h"
#include "engine/served_model.h"
#include "server/api_error.h"
#include "server/cache_audit.h"
#include "server/http.h"

namespace ferrox {

struct ServerContext;
struct RouteRequest;

struct Usage {
    int n_prompt = 0;
    int n_completion = 0;  // all choices
    int n_cached = 0;      // prompt tokens reused from the prefix cache
    int n_reasoning = 0;   // completion tokens spent inside reasoning (approximate: by text share)
};

struct ChoiceEnd {
    FinishReason finish = FinishReason::kStop;  // kStop, kLength, kCancelled or kError
    bool tool_calls = false;  // the answer holds tool calls
    std::string stop_word;    // the stop string that ended it ("" for EOS or length)
    int n_completion = 0;
    int n_prompt = 0, n_cached = 0;  // its prompt's tokens, and those reused from the cache
    int n_draft = 0, n_draft_accepted = 0;  // speculative decoding: draft tokens verified, accepted
};

class GenerationSink {
  public:
    virtual ~GenerationSink() = default;
    // Every choice was accepted: a stream writes its status line and opening events.
    virtual void start(HttpResponder& res) = 0;
    // A piece of choice `i`: text, reasoning or one complete tool call. `logprobs` are those of
    // the tokens behind this text (may be empty; they may come with an empty text).
    virtual void delta(HttpResponder& res, int i, const ChatDelta& d,
                       std::span<const TokenLogprob> logprobs) = 0;
    // Every sampled token of choice `i` before its text (which may be held back) is delivered.
    virtual void token(int i, int32_t id) {}
    virtual void choice_end(HttpResponder& res, int i, const ChoiceEnd& end) = 0;
    // A prefill chunk went by: streams may send a keep-alive (Anthropic: ping).
    virtual void progress(HttpResponder& res) {}
    // With GenerationParams::prompt_logprobs: the logprobs of choice i's next prompt tokens
    // (tokens 1.. of its prompt over one or more calls, before its first delta). A sink that
    // wraps another forwards it.
    virtual void prompt_logprobs(HttpResponder& res, int i, std::span<const TokenLogprob> lps) {}
    // Every choice ended normally: the final response, or the end of the stream.
    virtual void finish(HttpResponder& res, const Usage& usage) = 0;
    // Refused before start() (`started` false: answer with e.status), or failed after it.
    virtual void fail(HttpResponder& res, const ApiError& e, bool started) = 0;
};

struct GenerationJob {
    ModelLease model;
    std::vector<int32_t> prompt;
    // A batch (a list of prompts on the completion routes): when not empty, these run instead
    // of `prompt`, submitted together, n choices each, prompt-major (choice i is prompts[i / n]'s,
    // as OpenAI and vLLM index them); `prompt` is then the first (access log, slots).
    std::vector<std::vector<int32_t>> prompts;
    GenerationParams params;
    int n = 1;
    bool stream = false;
    // llama.cpp's id_slot: the slot (of the model's -np) the first choice shows on in GET /slots,
    // taken modulo their number as llama-server does; a busy one is waited for. -1: any.
    int id_slot = -1;
    // How answers are parsed; nullopt: plain text (legacy completions, /completion).
    std::optional<OutputFormat> output;
    std::string prompt_param = "messages";  // the field a too-long prompt is blamed on
    // What of the conversation decides the prompt's beginning (cache_audit.h): tells a changed
    // system prompt or tool list from other cache misses. Zero for raw prompts.
    PromptFingerprint fingerprint;
};

// Every choice of a job: n, times the prompts of a batch.
inline int n_choices(const GenerationJob& job) {
    return job.n * std::max<int>(1, static_cast<int>(job.prompts.size()));
}

// Applies the server's limits (prompt tokens, max_tokens cap, wall-clock timeout), submits,
// and returns at once; the sink is called from workers until finish() or fail(). The
// request's access record gets the model, token counts and time to first token.
void run_generation(ServerContext& ctx, RouteRequest& req, GenerationJob job,
                    std::shared_ptr<HttpResponder> res, std::unique_ptr<GenerationSink> sink);

}  // namespace ferrox

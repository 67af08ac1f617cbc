#pragma once
// OpenAI's protocols: Chat Completions, legacy Completions, Responses, and the model list.
// Each file holds one wire format: parse(json) -> neutral request, a sink turning neutral
// deltas into its events. Shared parsing of chat messages lives here because /apply-template
// (llama.cpp's utility) takes OpenAI messages too.

#include <string>

#include "chat/messages.h"
#include "server/api_error.h"
#include "server/json_util.h"

namespace ferrox {

class Router;
class ServedModel;
struct ServerContext;
struct TokenLogprob;
struct GenerationJob;

void add_openai_routes(Router& router, ServerContext& ctx);
void add_responses_routes(Router& router, ServerContext& ctx);
// POST /v1/embeddings (and /embeddings), and llama.cpp's POST /embedding on the same code.
void add_embeddings_routes(Router& router, ServerContext& ctx);

// Chat Completions' messages / tools / tool_choice / parallel_tool_calls / chat_template_kwargs
// into a Conversation. Errors name the field (messages[2].tool_calls[0].function.arguments).
bool parse_openai_conversation(const json& body, Conversation* conv, ApiError* err);

// What Chat Completions and Completions share: model (acquired), sampling, logit_bias,
// max_tokens (chat: also max_completion_tokens), n, stream, stream_options, stop, user.
bool read_openai_job(ServerContext& ctx, const Fields& f, bool chat, GenerationJob* job, bool* include_usage,
                     ApiError* err);

// An OpenAI call id: "call_" + 24 hex digits.
std::string openai_call_id();

// One entry of vLLM's prompt_logprobs list: {token_id: {logprob, rank, decoded_token}} for the
// prompt token and each alternative (an alternative that is the token itself is not repeated).
json vllm_prompt_logprob(const TokenLogprob& t, const ServedModel& model);

}  // namespace ferrox

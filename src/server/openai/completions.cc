// OpenAI legacy Completions: POST /v1/completions (and /completions). Plain text: no chat
// template, no stream parsers. A list of prompts runs as one batch (choices prompt-major, n
// per prompt); echo returns the prompt first, with its tokens' logprobs when logprobs are
// asked (the first token's null, as OpenAI and vLLM); vLLM's prompt_logprobs likewise.
#include "server/context.h"
#include "server/generation.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"
#include "server/structured.h"
#include "server/workers.h"

namespace ferrox {

namespace {

constexpr const char* kFingerprint = "fp_ferrox_0_1";

// A list of prompts is one batch: at most this many prompts (and choices) per request.
constexpr size_t kMaxPrompts = 128;

// What the sink needs of each prompt of the request: its echo (the text as given, or the ids
// detokenized) and its first token (echoed with a null logprob).
struct PromptEcho {
    std::string text;
    int32_t first_token = -1;
};

class CompletionSink final : public GenerationSink {
  public:
    struct Options {
        int n = 1;  // choices per prompt
        bool stream = false, include_usage = false, logprobs = false;
        bool echo = false;
        bool prompt_logprobs_field = false;  // vLLM's prompt_logprobs in each choice
    };
    CompletionSink(ModelLease model, const Options& o, std::vector<PromptEcho> prompts)
        : model_(std::move(model)), o_(o), prompts_(std::move(prompts)), choices_(prompts_.size() * o.n) {
        id_ = random_id("cmpl-");
        created_ = unix_now();
        for (size_t i = 0; i < choices_.size(); ++i) {
            Choice& ch = choices_[i];
            const PromptEcho& p = prompts_[i / o_.n];
            if (o_.prompt_logprobs_field) ch.prompt_lp = json::array({nullptr});
            if (!o_.echo) continue;
            ch.text = p.text;
            if (o_.logprobs && p.first_token >= 0) {
                ch.lp["tokens"].push_back(model_->token_piece(p.first_token));
                ch.lp["token_logprobs"].push_back(nullptr);
                ch.lp["top_logprobs"].push_back(nullptr);
                ch.lp["text_offset"].push_back(0);
                ch.echo_offset = static_cast<int64_t>(model_->token_piece(p.first_token).size());
            }
        }
    }

    void start(HttpResponder& res) override {
        if (o_.stream) res.start_stream(200);
    }

    // Prompt tokens after the first: echoed with their logprobs, and/or vLLM's prompt_logprobs.
    void prompt_logprobs(HttpResponder&, int i, std::span<const TokenLogprob> lps) override {
        Choice& ch = choices_[i];
        for (const TokenLogprob& t : lps) {
            const std::string piece = model_->token_piece(t.token);
            if (o_.echo && o_.logprobs) {
                json top = json::object();
                for (const auto& [id, l] : t.top) top[model_->token_piece(id)] = l;
                ch.lp["tokens"].push_back(piece);
                ch.lp["token_logprobs"].push_back(t.logprob);
                ch.lp["top_logprobs"].push_back(top);
                ch.lp["text_offset"].push_back(ch.echo_offset);
                ch.echo_offset += static_cast<int64_t>(piece.size());
            }
            if (o_.prompt_logprobs_field) ch.prompt_lp.push_back(vllm_prompt_logprob(t, *model_));
        }
    }

    void delta(HttpResponder& res, int i, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        flush_echo(res, i);
        Choice& ch = choices_[i];
        json lp = nullptr;
        if (o_.logprobs && !lps.empty()) {
            lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                  {"top_logprobs", json::array()}, {"text_offset", json::array()}};
            for (const TokenLogprob& t : lps) {
                const std::string piece = model_->token_piece(t.token);
                json top = json::object();
                for (const auto& [id, l] : t.top) top[model_->token_piece(id)] = l;
                const int64_t offset = static_cast<int64_t>(ch.text.size());
                for (auto* dst : {&lp, &ch.lp}) {
                    (*dst)["tokens"].push_back(piece);
                    (*dst)["token_logprobs"].push_back(t.logprob);
                    (*dst)["top_logprobs"].push_back(top);
                    (*dst)["text_offset"].push_back(offset);
                }
            }
        }
        ch.text += d.text;
        if (!o_.stream || (d.text.empty() && lp.is_null())) return;
        if (!lp.is_null()) return write_chunk(res, i, d.text, lp, nullptr);
        if (text_chunks_.size() <= static_cast<size_t>(i)) text_chunks_.resize(i + 1);
        ChunkTemplate& t = text_chunks_[i];
        if (t.empty()) t = ChunkTemplate(chunk(i, ChunkTemplate::marker(), nullptr, nullptr));
        res.write(t.render(d.text));
    }

    void choice_end(HttpResponder& res, int i, const ChoiceEnd& end) override {
        Choice& ch = choices_[i];
        ch.finish = end.finish == FinishReason::kLength ? "length" : "stop";
        if (o_.stream && end.finish != FinishReason::kCancelled && end.finish != FinishReason::kError) {
            flush_echo(res, i);
            write_chunk(res, i, "", nullptr, ch.finish.c_str());
        }
    }

    void progress(HttpResponder& res) override {
        if (o_.stream) res.write(": keep-alive\n\n");
    }

    void finish(HttpResponder& res, const Usage& u) override {
        if (o_.stream) {
            if (o_.include_usage) {
                json c = chunk_base();
                c["choices"] = json::array();
                c["usage"] = usage_json(u);
                res.write(sse_event(dump(c)));
            }
            res.write("data: [DONE]\n\n");
            res.end();
            return;
        }
        json arr = json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
            const Choice& ch = choices_[i];
            json c = {{"text", ch.text}, {"index", i}};
            c["logprobs"] = o_.logprobs ? ch.lp : json(nullptr);
            c["finish_reason"] = ch.finish;
            if (o_.prompt_logprobs_field) c["prompt_logprobs"] = ch.prompt_lp;
            arr.push_back(c);
        }
        json out = chunk_base();
        out["choices"] = arr;
        out["usage"] = usage_json(u);
        res.send(200, dump(out));
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !o_.stream) {
            Router::send_error(res, Protocol::kOpenAI, e);
            return;
        }
        res.write(sse_event(error_body(Protocol::kOpenAI, e)));
        res.write("data: [DONE]\n\n");
        res.end();
    }

  private:
    struct Choice {
        std::string text, finish;
        json lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                   {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        json prompt_lp;              // vLLM's prompt_logprobs: null, then one object per token
        int64_t echo_offset = 0;     // the next echoed prompt token's text_offset
        bool echo_sent = false;      // (streams) the first chunk, with the echo, went out
    };

    // A stream's first chunk of choice i: the echoed prompt (with its logprobs) and vLLM's
    // prompt_logprobs, once the prompt's logprobs are all in (before its first token).
    void flush_echo(HttpResponder& res, int i) {
        Choice& ch = choices_[i];
        if (!o_.stream || ch.echo_sent || (!o_.echo && !o_.prompt_logprobs_field)) return;
        ch.echo_sent = true;
        json c = chunk(i, o_.echo ? ch.text : std::string(), o_.echo && o_.logprobs ? ch.lp : json(nullptr), nullptr);
        if (o_.prompt_logprobs_field) c["choices"][0]["prompt_logprobs"] = ch.prompt_lp;
        res.write(sse_event(dump(c)));
        if (o_.echo && o_.logprobs) {  // the completion's logprobs follow on their own
            ch.lp = {{"tokens", json::array()}, {"token_logprobs", json::array()},
                     {"top_logprobs", json::array()}, {"text_offset", json::array()}};
        }
    }

    json chunk_base() const {
        return json{{"id", id_}, {"object", "text_completion"}, {"created", created_},
                    {"model", model_->info().id}, {"system_fingerprint", kFingerprint}};
    }

    json chunk(int i, const std::string& text, const json& lp, const char* finish) const {
        json c = chunk_base();
        json choice = {{"text", text}, {"index", i}};
        choice["logprobs"] = lp;
        choice["finish_reason"] = finish ? json(finish) : json(nullptr);
        c["choices"] = json::array({choice});
        return c;
    }

    void write_chunk(HttpResponder& res, int i, const std::string& text, const json& lp, const char* finish) {
        res.write(sse_event(dump(chunk(i, text, lp, finish))));
    }

    static json usage_json(const Usage& u) {
        return json{{"prompt_tokens", u.n_prompt},
                    {"completion_tokens", u.n_completion},
                    {"total_tokens", u.n_prompt + u.n_completion},
                    {"prompt_tokens_details", {{"cached_tokens", u.n_cached}}}};
    }

    ModelLease model_;
    Options o_;
    std::vector<PromptEcho> prompts_;
    std::string id_;
    int64_t created_ = 0;
    std::vector<Choice> choices_;
    std::vector<ChunkTemplate> text_chunks_;  // per choice: the chunk of a text delta alone
};

// OpenAI's prompt: a string, an array of token ids, or a list of prompts, each a string or an
// array of token ids (a batch). Errors name the element (prompt[2][5]).
bool read_prompts(const json& p, const ServedModel& model, std::vector<std::vector<int32_t>>* prompts,
                  std::vector<PromptEcho>* echoes, ApiError* err) {
    const auto one = [&](const json& e, const std::string& name) -> bool {
        std::vector<int32_t> ids;
        PromptEcho echo;
        if (e.is_string()) {
            echo.text = e.get<std::string>();
            ids = model.prompt().tokenize(echo.text);
        } else if (e.is_array() && !e.empty() && e[0].is_number()) {
            if (!read_token_ids(e, name, model, &ids, err)) return false;
            echo.text = model.detokenize(ids);
        } else if (e.is_array() && e.empty()) {
            *err = bad_param(name, "Invalid '" + name + "': the prompt is empty.");
            return false;
        } else {
            *err = wrong_type(name, "a string or an array of token ids", e);
            return false;
        }
        if (ids.empty()) {
            *err = bad_param(name, "The prompt is empty after tokenization.");
            return false;
        }
        echo.first_token = ids.front();
        prompts->push_back(std::move(ids));
        echoes->push_back(std::move(echo));
        return true;
    };
    if (p.is_string() || (p.is_array() && !p.empty() && p[0].is_number())) return one(p, "prompt");
    if (!p.is_array()) {
        *err = wrong_type("prompt", "a string, an array of token ids, or a list of prompts", p);
        return false;
    }
    if (p.empty()) {
        *err = bad_param("prompt", "Invalid 'prompt': the list of prompts is empty.");
        return false;
    }
    if (p.size() > kMaxPrompts) {
        *err = bad_param("prompt", "Invalid 'prompt': " + std::to_string(p.size()) + " prompts; at most " +
                                       std::to_string(kMaxPrompts) + " per request.");
        return false;
    }
    for (size_t i = 0; i < p.size(); ++i) {
        if (!one(p[i], "prompt[" + std::to_string(i) + "]")) return false;
    }
    return true;
}

void route_completions(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const json& body = req.body;
    const Fields f{body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kOpenAI, e); };
    GenerationJob job;
    CompletionSink::Options o;
    if (!read_openai_job(ctx, f, /*chat=*/false, &job, &o.include_usage, &err)) return fail(err);
    int64_t lp = -1, prompt_lp = -1;
    if (!f.integer("logprobs", 0, 5, &lp, &err)) return fail(err);
    job.params.top_logprobs = f.find("logprobs") ? static_cast<int>(lp) : -1;
    if (!f.boolean("echo", &o.echo, &err)) return fail(err);
    // vLLM's prompt_logprobs: each prompt token's logprob and that many alternatives.
    if (!f.integer("prompt_logprobs", 0, 20, &prompt_lp, &err)) return fail(err);
    o.prompt_logprobs_field = f.find("prompt_logprobs") != nullptr;
    if (job.params.max_tokens == 0 && !o.echo && !o.prompt_logprobs_field) {
        return fail(bad_param("max_tokens", "'max_tokens' of 0 is only allowed with 'echo' or 'prompt_logprobs' "
                                            "(the answer is then the prompt alone)."));
    }
    o.logprobs = job.params.top_logprobs >= 0;
    if (o.echo && o.logprobs) job.params.prompt_logprobs = job.params.top_logprobs;
    if (o.prompt_logprobs_field) job.params.prompt_logprobs = std::max(job.params.prompt_logprobs, static_cast<int>(prompt_lp));

    const json* p = f.find("prompt");
    if (!p) return fail(bad_param("prompt", "Missing required parameter: 'prompt'."));
    std::vector<PromptEcho> echoes;
    if (!read_prompts(*p, *job.model, &job.prompts, &echoes, &err)) return fail(err);
    if (job.prompts.size() * static_cast<size_t>(job.n) > kMaxPrompts) {
        return fail(bad_param("n", "'n' times the number of prompts is " +
                                       std::to_string(job.prompts.size() * static_cast<size_t>(job.n)) +
                                       "; at most " + std::to_string(kMaxPrompts) + " choices per request."));
    }
    job.prompt_param = "prompt";
    if (!read_openai_constraint(f, &job.params.grammar, &err)) return fail(err);
    o.n = job.n;
    o.stream = job.stream;
    auto sink = std::make_unique<CompletionSink>(job.model, o, std::move(echoes));
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

}  // namespace

json vllm_prompt_logprob(const TokenLogprob& t, const ServedModel& model) {
    json entry = json::object();
    entry[std::to_string(t.token)] = {{"logprob", t.logprob}, {"rank", t.rank}, {"decoded_token", model.token_piece(t.token)}};
    for (size_t k = 0; k < t.top.size(); ++k) {
        const std::string key = std::to_string(t.top[k].first);
        if (entry.contains(key)) continue;
        entry[key] = {{"logprob", t.top[k].second},
                      {"rank", static_cast<int>(k) + 1},
                      {"decoded_token", model.token_piece(t.top[k].first)}};
    }
    return entry;
}

bool read_openai_job(ServerContext& ctx, const Fields& f, bool chat, GenerationJob* job, bool* include_usage,
                     ApiError* err) {
    std::string model_name, user;
    if (!f.string("model", &model_name, err) || !ctx.acquire(model_name, &job->model, err)) return false;
    bool seeded = false;
    if (!read_sampling(f, {.defaults = &ctx.opts.sampling}, &job->params, &seeded, err) ||
        !read_logit_bias(f, *job->model, &job->params.sampling, err))
        return false;
    int64_t max_tokens = ctx.opts.default_max_tokens;
    // (Completions: 0 with echo, the prompt alone: evaluation harnesses score prompts so.)
    if (!f.integer("max_tokens", chat ? 1 : 0, 1 << 24, &max_tokens, err) ||
        (chat && !f.integer("max_completion_tokens", 1, 1 << 24, &max_tokens, err)) ||
        !f.integer("n_predict", -1, 1 << 24, &max_tokens, err))  // llama.cpp's name
        return false;
    job->params.max_tokens = static_cast<int>(max_tokens);
    // The server's -n, not the request's: capped to what fits the context (an explicit
    // max_tokens beyond it stays a 400, as OpenAI answers).
    job->params.max_tokens_soft = !f.find("max_tokens") && !f.find("max_completion_tokens") && !f.find("n_predict");
    // llama.cpp's id_slot, which llama-server reads on its OpenAI routes too.
    int64_t id_slot = -1;
    if (!f.integer("id_slot", -1, 1 << 20, &id_slot, err)) return false;
    job->id_slot = static_cast<int>(id_slot);
    int64_t n = 1;
    if (!f.integer("n", 1, 16, &n, err) || !f.boolean("stream", &job->stream, err)) return false;
    job->n = static_cast<int>(n);
    const json* so = nullptr;
    if (!f.object("stream_options", &so, err)) return false;
    if (so && !Fields{*so, "stream_options."}.boolean("include_usage", include_usage, err)) return false;
    return f.strings("stop", 16, &job->params.stop, err) && f.string("user", &user, err);
}

void add_completions_routes(Router& router, ServerContext& ctx) {
    for (const char* path : {"/v1/completions", "/completions"}) {
        router.add({.method = "POST",
                    .path = path,
                    .protocol = Protocol::kOpenAI,
                    .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        route_completions(ctx, req, std::move(res));
                    },
                    .json_body = true});
    }
}

}  // namespace ferrox

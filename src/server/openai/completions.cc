// OpenAI legacy Completions: POST /v1/completions (and /completions). Plain text: no chat
// template, no stream parsers.
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

class CompletionSink final : public GenerationSink {
  public:
    CompletionSink(ModelLease model, int n, bool stream, bool include_usage, bool logprobs)
        : model_(std::move(model)), stream_(stream), include_usage_(include_usage), logprobs_(logprobs),
          choices_(n) {
        id_ = random_id("cmpl-");
        created_ = unix_now();
    }

    void start(HttpResponder& res) override {
        if (stream_) res.start_stream(200);
    }

    void delta(HttpResponder& res, int i, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        Choice& ch = choices_[i];
        json lp = nullptr;
        if (logprobs_ && !lps.empty()) {
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
        if (!stream_ || (d.text.empty() && lp.is_null())) return;
        if (!lp.is_null()) return write_chunk(res, i, d.text, lp, nullptr);
        if (text_chunks_.size() <= static_cast<size_t>(i)) text_chunks_.resize(i + 1);
        ChunkTemplate& t = text_chunks_[i];
        if (t.empty()) t = ChunkTemplate(chunk(i, ChunkTemplate::marker(), nullptr, nullptr));
        res.write(t.render(d.text));
    }

    void choice_end(HttpResponder& res, int i, const ChoiceEnd& end) override {
        Choice& ch = choices_[i];
        ch.finish = end.finish == FinishReason::kLength ? "length" : "stop";
        if (stream_ && end.finish != FinishReason::kCancelled && end.finish != FinishReason::kError) {
            write_chunk(res, i, "", nullptr, ch.finish.c_str());
        }
    }

    void progress(HttpResponder& res) override {
        if (stream_) res.write(": keep-alive\n\n");
    }

    void finish(HttpResponder& res, const Usage& u) override {
        if (stream_) {
            if (include_usage_) {
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
            c["logprobs"] = logprobs_ ? ch.lp : json(nullptr);
            c["finish_reason"] = ch.finish;
            arr.push_back(c);
        }
        json out = chunk_base();
        out["choices"] = arr;
        out["usage"] = usage_json(u);
        res.send(200, dump(out));
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !stream_) {
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
    };

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
    bool stream_, include_usage_, logprobs_;
    std::string id_;
    int64_t created_ = 0;
    std::vector<Choice> choices_;
    std::vector<ChunkTemplate> text_chunks_;  // per choice: the chunk of a text delta alone
};

void route_completions(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const json& body = req.body;
    const Fields f{body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kOpenAI, e); };
    GenerationJob job;
    bool include_usage = false;
    if (!read_openai_job(ctx, f, /*chat=*/false, &job, &include_usage, &err)) return fail(err);
    int64_t lp = -1;
    if (!f.integer("logprobs", 0, 5, &lp, &err)) return fail(err);
    job.params.top_logprobs = f.find("logprobs") ? static_cast<int>(lp) : -1;
    bool echo = false;
    if (!f.boolean("echo", &echo, &err)) return fail(err);
    if (echo) return fail(bad_param("echo", "'echo' is not supported."));

    const json* p = f.find("prompt");
    if (!p) return fail(bad_param("prompt", "Missing required parameter: 'prompt'."));
    const json* one = p;
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) one = &(*p)[0];
    if (one->is_string()) {
        job.prompt = job.model->prompt().tokenize(one->get<std::string>());
    } else if (one->is_array() && !one->empty() && (*one)[0].is_number()) {
        if (!read_token_ids(*one, "prompt", *job.model, &job.prompt, &err)) return fail(err);
    } else if (one->is_array() && !one->empty()) {
        return fail(bad_param("prompt", "Only one prompt per request is supported."));
    } else {
        return fail(wrong_type("prompt", "a string or an array of token ids", *one));
    }
    if (job.prompt.empty()) return fail(bad_param("prompt", "The prompt is empty after tokenization."));
    job.prompt_param = "prompt";
    if (!read_openai_constraint(f, &job.params.grammar, &err)) return fail(err);
    const bool logprobs = job.params.top_logprobs >= 0;
    auto sink = std::make_unique<CompletionSink>(job.model, job.n, job.stream, include_usage, logprobs);
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

}  // namespace

bool read_openai_job(ServerContext& ctx, const Fields& f, bool chat, GenerationJob* job, bool* include_usage,
                     ApiError* err) {
    std::string model_name, user;
    if (!f.string("model", &model_name, err) || !ctx.acquire(model_name, &job->model, err)) return false;
    bool seeded = false;
    if (!read_sampling(f, {.defaults = &ctx.opts.sampling}, &job->params, &seeded, err) ||
        !read_logit_bias(f, *job->model, &job->params.sampling, err))
        return false;
    int64_t max_tokens = ctx.opts.default_max_tokens;
    if (!f.integer("max_tokens", 1, 1 << 24, &max_tokens, err) ||
        (chat && !f.integer("max_completion_tokens", 1, 1 << 24, &max_tokens, err)) ||
        !f.integer("n_predict", -1, 1 << 24, &max_tokens, err))  // llama.cpp's name
        return false;
    job->params.max_tokens = static_cast<int>(max_tokens);
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

// llama.cpp's POST /completion, as its server README documents: prompt as text, token ids or a
// mix, n_predict (0 only fills the cache), cache_prompt, n_probs, its stream chunks and the
// final object with stop_type and timings.
#include <chrono>
#include <cmath>

#include "server/context.h"
#include "server/generation.h"
#include "server/llamacpp/llamacpp.h"
#include "server/request_fields.h"
#include "server/router.h"
#include "server/structured.h"
#include "server/workers.h"

namespace ferrox {

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
    GenerationParams params;
    int n_probs = 0;
    bool post_sampling_probs = false;  // probabilities after the sampler chain ("prob", "top_probs")
    bool return_tokens = false;
    std::string prompt_text;
    int n_prompt = 0;
};

class CompletionSink final : public GenerationSink {
  public:
    CompletionSink(ModelLease model, Settings settings, bool stream)
        : model_(std::move(model)), s_(std::move(settings)), stream_(stream), t_start_(Clock::now()) {}

    void start(HttpResponder& res) override {
        if (stream_) res.start_stream(200);
    }

    void token(int, int32_t id) override {
        if (tokens_.empty()) t_first_ = Clock::now();
        tokens_.push_back(id);
        pending_tokens_.push_back(id);
    }

    void delta(HttpResponder& res, int, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        json probs = json::array();
        for (const TokenLogprob& lp : lps) probs.push_back(prob_entry(lp));
        for (auto& p : probs) probs_.push_back(p);
        content_ += d.text;
        if (!stream_) return;
        if (d.text.empty() && probs.empty()) return;
        json c = {{"index", 0},         {"content", d.text},          {"tokens", pending_tokens_},
                  {"stop", false},      {"id_slot", 0},               {"tokens_predicted", tokens_.size()},
                  {"tokens_evaluated", s_.n_prompt}};
        if (!probs.empty()) c["completion_probabilities"] = probs;
        pending_tokens_.clear();
        res.write(sse_event(dump(c)));
    }

    void choice_end(HttpResponder&, int, const ChoiceEnd& end) override { end_ = end; }

    void finish(HttpResponder& res, const Usage& u) override {
        const auto now = Clock::now();
        const auto first = tokens_.empty() ? now : t_first_;
        const double prompt_ms = std::chrono::duration<double, std::milli>(first - t_start_).count();
        const double predicted_ms = std::chrono::duration<double, std::milli>(now - first).count();
        const int n_computed = u.n_prompt - u.n_cached;
        std::string stop_type = "none";
        if (end_.finish == FinishReason::kLength) {
            stop_type = "limit";
        } else if (!end_.stop_word.empty()) {
            stop_type = "word";
        } else if (end_.finish == FinishReason::kStop) {
            stop_type = "eos";
        }
        const SamplingParams& sp = s_.params.sampling;
        json settings = {{"n_predict", s_.params.max_tokens}, {"seed", sp.seed},
                         {"temperature", echo_float(sp.temperature)},     {"top_k", sp.top_k},
                         {"top_p", echo_float(sp.top_p)},                 {"min_p", echo_float(sp.min_p)},
                         {"repeat_penalty", sp.repeat_penalty}, {"repeat_last_n", sp.penalty_last_n},
                         {"presence_penalty", sp.presence_penalty}, {"frequency_penalty", sp.frequency_penalty},
                         {"stop", s_.params.stop},            {"ignore_eos", s_.params.ignore_eos},
                         {"n_probs", s_.n_probs},             {"cache_prompt", s_.params.cache_prompt},
                         {"post_sampling_probs", s_.post_sampling_probs}};
        json out = {{"index", 0},
                    {"content", stream_ ? std::string() : content_},
                    {"tokens", stream_ ? json(pending_tokens_) : json(s_.return_tokens ? tokens_ : std::vector<int32_t>{})},
                    {"id_slot", 0},
                    {"stop", true},
                    {"model", model_->info().id},
                    {"tokens_predicted", u.n_completion},
                    {"tokens_evaluated", u.n_prompt},
                    {"generation_settings", settings},
                    {"prompt", s_.prompt_text},
                    {"has_new_line", content_.find('\n') != std::string::npos},
                    {"truncated", false},
                    {"stop_type", stop_type},
                    {"stopping_word", end_.stop_word},
                    {"tokens_cached", u.n_prompt + u.n_completion},
                    {"timings",
                     {{"cache_n", u.n_cached},
                      {"prompt_n", n_computed},
                      {"prompt_ms", prompt_ms},
                      {"prompt_per_token_ms", n_computed > 0 ? prompt_ms / n_computed : 0.0},
                      {"prompt_per_second", prompt_ms > 0 ? n_computed * 1000.0 / prompt_ms : 0.0},
                      {"predicted_n", u.n_completion},
                      {"predicted_ms", predicted_ms},
                      {"predicted_per_token_ms", u.n_completion > 0 ? predicted_ms / u.n_completion : 0.0},
                      {"predicted_per_second", predicted_ms > 0 ? u.n_completion * 1000.0 / predicted_ms : 0.0}}}};
        if (s_.n_probs > 0 && !stream_) out["completion_probabilities"] = probs_;
        if (stream_) {
            res.write(sse_event(dump(out)));
            res.end();
        } else {
            res.send(200, dump(out));
        }
    }

    void fail(HttpResponder& res, const ApiError& e, bool started) override {
        if (!started || !stream_) {
            Router::send_error(res, Protocol::kLlamaCpp, e);
            return;
        }
        res.write(sse_event(error_body(Protocol::kLlamaCpp, e)));
        res.end();
    }

  private:
    // llama-server's shape: logprobs, or with post_sampling_probs the probabilities themselves
    // ("prob", "top_probs"); the engine gives log-probabilities either way.
    json prob_entry(const TokenLogprob& lp) const {
        const bool post = s_.post_sampling_probs;
        auto one = [&](int32_t id, float l) {
            const std::string piece = model_->token_piece(id);
            json bytes = json::array();
            for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
            return json{{"id", id}, {"token", piece}, {"bytes", bytes}, {post ? "prob" : "logprob", post ? std::exp(l) : l}};
        };
        json e = one(lp.token, lp.logprob);
        json top = json::array();
        for (const auto& [id, l] : lp.top) top.push_back(one(id, l));
        e[post ? "top_probs" : "top_logprobs"] = top;
        return e;
    }

    ModelLease model_;
    Settings s_;
    bool stream_;
    Clock::time_point t_start_, t_first_;
    std::vector<int32_t> tokens_, pending_tokens_;
    std::string content_;
    json probs_ = json::array();
    ChoiceEnd end_;
};

// A string, token ids, or a mix of both ([12, "text", 34]); strings after the first element
// are tokenized without BOS, as llama.cpp's tokenize_mixed does.
bool read_prompt(const json& p, const ServedModel& model, std::vector<int32_t>* out, std::string* text,
                 ApiError* err) {
    if (p.is_string()) {
        *text = p.get<std::string>();
        *out = model.prompt().tokenize(*text);
        return true;
    }
    if (!p.is_array()) {
        *err = wrong_type("prompt", "a string, an array of token ids, or a mix of both", p);
        return false;
    }
    for (size_t i = 0; i < p.size(); ++i) {
        const json& e = p[i];
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const std::vector<int32_t> ids =
                i == 0 ? model.prompt().tokenize(s) : model.tokenize(s, false, true);
            out->insert(out->end(), ids.begin(), ids.end());
        } else if (e.is_number()) {
            if (!read_token_ids(json::array({e}), "prompt[" + std::to_string(i) + "]", model, out, err)) return false;
        } else {
            *err = bad_param("prompt[" + std::to_string(i) + "]",
                             e.is_array() ? "Only one prompt per request is supported."
                                          : "Invalid 'prompt': elements must be token ids or strings.");
            return false;
        }
    }
    *text = model.detokenize(*out);
    return true;
}

void route_completion(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const json& body = req.body;
    const Fields f{body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    std::string model_name;
    if (!f.string("model", &model_name, &err)) return fail(err);
    GenerationJob job;
    if (!ctx.acquire(model_name, &job.model, &err)) return fail(err);
    Settings s;
    bool seeded = false;
    if (!read_sampling(f, {.defaults = &ctx.opts.sampling}, &s.params, &seeded, &err)) return fail(err);
    if (!read_logit_bias(f, *job.model, &s.params.sampling, &err)) return fail(err);
    int64_t n_predict = ctx.opts.default_max_tokens;
    if (!f.integer("n_predict", -1, 1 << 24, &n_predict, &err) || !f.integer("max_tokens", -1, 1 << 24, &n_predict, &err))
        return fail(err);
    s.params.max_tokens = static_cast<int>(n_predict);
    int64_t n_probs = 0, id_slot = -1;
    if (!f.integer("n_probs", 0, 20, &n_probs, &err) || !f.integer("id_slot", -1, 1 << 20, &id_slot, &err))
        return fail(err);
    s.n_probs = static_cast<int>(n_probs);
    s.params.top_logprobs = n_probs > 0 ? static_cast<int>(n_probs) : -1;
    if (!f.strings("stop", 16, &s.params.stop, &err)) return fail(err);
    if (!f.boolean("stream", &job.stream, &err) || !f.boolean("return_tokens", &s.return_tokens, &err) ||
        !f.boolean("post_sampling_probs", &s.post_sampling_probs, &err))
        return fail(err);
    s.params.post_sampling_probs = s.post_sampling_probs;
    const json* p = f.find("prompt");
    if (!p) return fail(bad_param("prompt", "Missing required parameter: 'prompt'."));
    if (!read_prompt(*p, *job.model, &job.prompt, &s.prompt_text, &err)) return fail(err);
    if (job.prompt.empty()) return fail(bad_param("prompt", "The prompt is empty after tokenization."));
    s.n_prompt = static_cast<int>(job.prompt.size());
    job.params = s.params;
    job.prompt_param = "prompt";
    if (!read_llamacpp_constraint(f, &job.params.grammar, &err)) return fail(err);
    auto sink = std::make_unique<CompletionSink>(job.model, std::move(s), job.stream);
    run_generation(ctx, req, std::move(job), std::move(res), std::move(sink));
}

}  // namespace

// /infill's second half: its FIM prompt, as token ids in req.body["prompt"], runs as a /completion.
void run_completion(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    route_completion(ctx, req, std::move(res));
}

void add_completion_route(Router& router, ServerContext& ctx) {
    router.add({.method = "POST",
                .path = "/completion",
                .protocol = Protocol::kLlamaCpp,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    route_completion(ctx, req, std::move(res));
                },
                .json_body = true});
}

}  // namespace ferrox

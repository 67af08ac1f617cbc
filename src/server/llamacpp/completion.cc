// llama.cpp's POST /completion, as its server README documents: prompt as text, token ids or a
// mix, or a list of those (one batch; the answer is an array, the stream's chunks carry their
// prompt's index), n_predict (0 only fills the cache), cache_prompt, n_probs, its stream chunks and the
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
    int id_slot = 0;                        // the slot asked for (modulo -np), else 0
    bool batch = false;                     // a list of prompts: the answer is an array
    std::vector<std::string> prompt_texts;  // per prompt
    std::vector<int> n_prompts;             // per prompt
};

// A list of prompts is one batch of at most this many.
constexpr size_t kMaxPrompts = 128;

class CompletionSink final : public GenerationSink {
  public:
    CompletionSink(ModelLease model, Settings settings, bool stream)
        : model_(std::move(model)), s_(std::move(settings)), stream_(stream), t_start_(Clock::now()),
          choices_(s_.n_prompts.size()) {}

    void start(HttpResponder& res) override {
        if (stream_) res.start_stream(200);
    }

    void token(int i, int32_t id) override {
        Choice& ch = choices_[i];
        if (ch.tokens.empty()) ch.t_first = Clock::now();
        ch.tokens.push_back(id);
        ch.pending_tokens.push_back(id);
    }

    void delta(HttpResponder& res, int i, const ChatDelta& d, std::span<const TokenLogprob> lps) override {
        Choice& ch = choices_[i];
        json probs = json::array();
        for (const TokenLogprob& lp : lps) probs.push_back(prob_entry(lp));
        for (auto& p : probs) ch.probs.push_back(p);
        ch.content += d.text;
        if (!stream_) return;
        if (d.text.empty() && probs.empty()) return;
        json c = {{"index", i},         {"content", d.text},          {"tokens", ch.pending_tokens},
                  {"stop", false},      {"id_slot", s_.id_slot},               {"tokens_predicted", ch.tokens.size()},
                  {"tokens_evaluated", s_.n_prompts[i]}};
        if (!probs.empty()) c["completion_probabilities"] = probs;
        ch.pending_tokens.clear();
        res.write(sse_event(dump(c)));
    }

    void choice_end(HttpResponder&, int i, const ChoiceEnd& end) override { choices_[i].end = end; }

    void finish(HttpResponder& res, const Usage& u) override {
        if (!s_.batch) {
            // One prompt: its numbers are the request's (the prefix cache's share included).
            json out = result(0, u.n_prompt, u.n_cached, u.n_completion);
            if (stream_) {
                res.write(sse_event(dump(out)));
                res.end();
            } else {
                res.send(200, dump(out));
            }
            return;
        }
        json arr = json::array();
        for (size_t i = 0; i < choices_.size(); ++i) {
            const ChoiceEnd& e = choices_[i].end;
            json out = result(static_cast<int>(i), e.n_prompt, e.n_cached, e.n_completion);
            if (stream_) {
                res.write(sse_event(dump(out)));
            } else {
                arr.push_back(std::move(out));
            }
        }
        if (stream_) {
            res.end();
        } else {
            res.send(200, dump(arr));  // as llama-server answers a list of prompts
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
    struct Choice {
        Clock::time_point t_first;
        std::vector<int32_t> tokens, pending_tokens;
        std::string content;
        json probs = json::array();
        ChoiceEnd end;
    };

    // The final object of prompt i (its last stream chunk, or its answer).
    json result(int i, int n_prompt, int n_cached, int n_completion) const {
        const Choice& ch = choices_[static_cast<size_t>(i)];
        const auto now = Clock::now();
        const auto first = ch.tokens.empty() ? now : ch.t_first;
        const double prompt_ms = std::chrono::duration<double, std::milli>(first - t_start_).count();
        const double predicted_ms = std::chrono::duration<double, std::milli>(now - first).count();
        const int n_computed = n_prompt - n_cached;
        std::string stop_type = "none";
        if (ch.end.finish == FinishReason::kLength) {
            stop_type = "limit";
        } else if (!ch.end.stop_word.empty()) {
            stop_type = "word";
        } else if (ch.end.finish == FinishReason::kStop) {
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
        add_sampler_settings(sp, &settings);
        // The rest of llama-server's generation_settings (task_params::to_json), as this server
        // has them: no context shift (n_keep, n_discard 0), no LoRA, no chat parsing here.
        json bias = json::array();
        for (const auto& [token, b] : sp.logit_bias) {
            // A banned token (ferrox's -1e30): null, as nlohmann writes llama-server's -INFINITY.
            const bool banned = !std::isfinite(b) || b <= -1e29f;
            bias.push_back({{"bias", banned ? json(nullptr) : json(b)}, {"token", token}});
        }
        settings["max_tokens"] = s_.params.max_tokens;
        settings["n_keep"] = 0;
        settings["n_discard"] = 0;
        settings["stream"] = stream_;
        settings["logit_bias"] = std::move(bias);
        settings["min_keep"] = 0;
        settings["chat_format"] = "Content-only";
        settings["reasoning_format"] = "none";
        settings["reasoning_in_content"] = false;
        settings["generation_prompt"] = "";
        settings["timings_per_token"] = false;
        settings["backend_sampling"] = false;
        settings["lora"] = json::array();
        json out = {{"index", i},
                    {"content", stream_ ? std::string() : ch.content},
                    {"tokens", stream_ ? json(ch.pending_tokens) : json(s_.return_tokens ? ch.tokens : std::vector<int32_t>{})},
                    {"id_slot", s_.id_slot},
                    {"stop", true},
                    {"model", model_->info().id},
                    {"tokens_predicted", n_completion},
                    {"tokens_evaluated", n_prompt},
                    {"generation_settings", settings},
                    {"prompt", s_.prompt_texts[static_cast<size_t>(i)]},
                    {"has_new_line", ch.content.find('\n') != std::string::npos},
                    {"truncated", false},
                    {"stop_type", stop_type},
                    {"stopping_word", ch.end.stop_word},
                    {"tokens_cached", n_prompt + n_completion},
                    {"timings",
                     {{"cache_n", n_cached},
                      {"prompt_n", n_computed},
                      {"prompt_ms", prompt_ms},
                      {"prompt_per_token_ms", n_computed > 0 ? prompt_ms / n_computed : 0.0},
                      {"prompt_per_second", prompt_ms > 0 ? n_computed * 1000.0 / prompt_ms : 0.0},
                      {"predicted_n", n_completion},
                      {"predicted_ms", predicted_ms},
                      {"predicted_per_token_ms", n_completion > 0 ? predicted_ms / n_completion : 0.0},
                      {"predicted_per_second", predicted_ms > 0 ? n_completion * 1000.0 / predicted_ms : 0.0}}}};
        if (ch.end.n_draft > 0) {  // as llama-server: only when speculation ran
            out["timings"]["draft_n"] = ch.end.n_draft;
            out["timings"]["draft_n_accepted"] = ch.end.n_draft_accepted;
        }
        if (s_.n_probs > 0 && !stream_) out["completion_probabilities"] = ch.probs;
        return out;
    }

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
    Clock::time_point t_start_;
    std::vector<Choice> choices_;
};

// One prompt: a string, token ids, or a mix of both ([12, "text", 34]); strings after the
// first element are tokenized without BOS, as llama.cpp's tokenize_mixed does.
bool read_prompt(const json& p, const std::string& name, const ServedModel& model, std::vector<int32_t>* out,
                 std::string* text, ApiError* err) {
    if (p.is_string()) {
        *text = p.get<std::string>();
        *out = model.prompt().tokenize(*text);
        return true;
    }
    if (!p.is_array()) {
        *err = wrong_type(name, "a string, an array of token ids, or a mix of both", p);
        return false;
    }
    for (size_t i = 0; i < p.size(); ++i) {
        const json& e = p[i];
        const std::string at = name + "[" + std::to_string(i) + "]";
        if (e.is_string()) {
            const std::string s = e.get<std::string>();
            const std::vector<int32_t> ids =
                i == 0 ? model.prompt().tokenize(s) : model.tokenize(s, false, true);
            out->insert(out->end(), ids.begin(), ids.end());
        } else if (e.is_number()) {
            if (!read_token_ids(json::array({e}), at, model, out, err)) return false;
        } else {
            *err = bad_param(at, "Invalid '" + at + "': elements must be token ids or strings.");
            return false;
        }
    }
    *text = model.detokenize(*out);
    return true;
}

// llama.cpp's rule (tokenize_input_prompts): a string, an array of ids, or an array mixing ids
// and strings is one prompt; any other array is a list of prompts, each one of those.
bool is_one_prompt(const json& p) {
    if (!p.is_array()) return true;
    bool numbers = false;
    for (const json& e : p) {
        if (e.is_number()) numbers = true;
    }
    return numbers;
}

bool read_prompts(const json& p, const ServedModel& model, GenerationJob* job, Settings* s, ApiError* err) {
    std::vector<std::vector<int32_t>> prompts;
    const auto one = [&](const json& e, const std::string& name) -> bool {
        std::vector<int32_t> ids;
        std::string text;
        if (!read_prompt(e, name, model, &ids, &text, err)) return false;
        if (ids.empty()) {
            *err = bad_param(name, "The prompt is empty after tokenization.");
            return false;
        }
        s->n_prompts.push_back(static_cast<int>(ids.size()));
        s->prompt_texts.push_back(std::move(text));
        prompts.push_back(std::move(ids));
        return true;
    };
    if (is_one_prompt(p)) {
        if (!one(p, "prompt")) return false;
        job->prompt = std::move(prompts.front());
        return true;
    }
    if (p.empty() || p.size() > kMaxPrompts) {
        *err = bad_param("prompt", "Invalid 'prompt': " + std::to_string(p.size()) + " prompts; between 1 and " +
                                       std::to_string(kMaxPrompts) + " per request.");
        return false;
    }
    for (size_t i = 0; i < p.size(); ++i) {
        if (!one(p[i], "prompt[" + std::to_string(i) + "]")) return false;
    }
    s->batch = true;
    job->prompts = std::move(prompts);
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
    s.params.max_tokens_soft = !f.find("n_predict") && !f.find("max_tokens");  // -n: capped to the context
    int64_t n_probs = 0, id_slot = -1;
    if (!f.integer("n_probs", 0, 20, &n_probs, &err) || !f.integer("id_slot", -1, 1 << 20, &id_slot, &err))
        return fail(err);
    job.id_slot = static_cast<int>(id_slot);
    if (id_slot >= 0) s.id_slot = static_cast<int>(id_slot % std::max(1, job.model->info().n_parallel));
    s.n_probs = static_cast<int>(n_probs);
    s.params.top_logprobs = n_probs > 0 ? static_cast<int>(n_probs) : -1;
    if (!f.strings("stop", 16, &s.params.stop, &err)) return fail(err);
    if (!f.boolean("stream", &job.stream, &err) || !f.boolean("return_tokens", &s.return_tokens, &err) ||
        !f.boolean("post_sampling_probs", &s.post_sampling_probs, &err))
        return fail(err);
    s.params.post_sampling_probs = s.post_sampling_probs;
    const json* p = f.find("prompt");
    if (!p) return fail(bad_param("prompt", "Missing required parameter: 'prompt'."));
    if (!read_prompts(*p, *job.model, &job, &s, &err)) return fail(err);
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

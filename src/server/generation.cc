#include "server/generation.h"

#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>

#include "core/thread_pool.h"
#include "server/context.h"
#include "server/llamacpp/slots.h"
#include "server/router.h"
#include "server/workers.h"

namespace ferrox {

namespace {

// A client that stopped reading: its queued output is capped, then it is cut off.
constexpr size_t kMaxPendingBytes = 16 << 20;

struct Generation : std::enable_shared_from_this<Generation> {
    struct Choice {
        std::optional<OutputParser> parser;
        bool done = false;
    };
    struct Queued {
        int i = 0;
        EngineEvent ev;
    };

    Workers* workers = nullptr;
    // Drain on the thread that queues (the engine's, mostly) instead of a worker: when the
    // forward pass's threads take every core there is no core for the worker to run on, and the
    // hop only adds wake-ups that preempt the forward pass (16 streams over HTTP, 2 threads on
    // 2 cores: ~+3 % tok/s; the events are built on the engine thread, between steps).
    bool drain_here = false;
    GenerationJob job;
    std::shared_ptr<AccessRecord> record;
    PromptCacheAudit* audit = nullptr;
    std::chrono::steady_clock::time_point t_start = std::chrono::steady_clock::now();
    bool first_token = true;
    std::shared_ptr<HttpResponder> res;
    std::unique_ptr<GenerationSink> sink;
    std::vector<Choice> choices;
    std::vector<std::shared_ptr<RequestHandle>> handles;  // guarded by mu once started

    std::mutex mu;  // the mailbox and the flags below
    std::deque<Queued> mailbox;
    bool started = false;   // sink->start() ran: events may be drained
    bool draining = false;  // a worker owns the sink now
    bool aborted = false;   // refused: later events are dropped

    // Worker-only (one drain at a time).
    Usage usage;
    std::vector<int> n_prompt_of, n_cached_of;  // per prompt of the job (usage sums them)
    int n_done = 0;
    bool failed = false;
    ApiError error;

    // Before the answer goes out, so the client's next turn is judged against this one.
    CacheMiss audit_turn() {
        const ModelInfo& info = job.model->info();
        PromptCacheAudit::Turn t;
        t.model = info.id + "#" + std::to_string(info.generation);
        if (record) {
            std::lock_guard<std::mutex> lk(record->mu);
            t.key = record->cache_key;
        }
        t.prompt = &job.prompt;
        t.fingerprint = job.fingerprint;
        t.n_cached = usage.n_cached;
        t.block_size = info.kv_block_size;
        t.cache_prompt = job.params.cache_prompt && info.prefix_cache;
        t.is_clock_token = [](const void* m, int32_t id) {
            const std::string piece = static_cast<const ServedModel*>(m)->token_piece(id);
            bool digit = false;
            for (char c : piece) {
                if (c >= '0' && c <= '9') digit = true;
                else if (!std::strchr(" :-/.TZ", c)) return false;
            }
            return digit;
        };
        t.clock_ctx = &*job.model;
        return audit->record(t);
    }

    void cancel_all() {
        std::lock_guard<std::mutex> lk(mu);
        for (auto& h : handles) h->cancel();
    }

    // Engine thread: only queue.
    void enqueue(int i, EngineEvent&& ev) {
        bool schedule = false;
        {
            std::lock_guard<std::mutex> lk(mu);
            if (aborted) return;
            mailbox.push_back({i, std::move(ev)});
            schedule = started && !draining;
            if (schedule) draining = true;
        }
        if (schedule) post_drain();
    }

    void post_drain() {
        if (drain_here) return drain();
        auto self = shared_from_this();
        workers->post([self] { self->drain(); });
    }

    void drain() {
        for (;;) {
            std::deque<Queued> batch;
            {
                std::lock_guard<std::mutex> lk(mu);
                if (mailbox.empty()) {
                    draining = false;
                    return;
                }
                batch.swap(mailbox);
            }
            for (Queued& q : batch) process(q.i, std::move(q.ev));
        }
    }

    void deliver(int i, std::vector<ChatDelta>& deltas, std::span<const TokenLogprob> lps) {
        bool lps_sent = lps.empty();
        for (const ChatDelta& d : deltas) {
            if (!lps_sent && d.kind == ChatDelta::Kind::kText) {
                sink->delta(*res, i, d, lps);
                lps_sent = true;
            } else {
                sink->delta(*res, i, d, {});
            }
        }
        if (!lps_sent) sink->delta(*res, i, ChatDelta{}, lps);  // held-back text: logprobs alone
    }

    void process(int i, EngineEvent&& ev) {
        Choice& ch = choices[i];
        if (ev.kind == EngineEvent::Kind::kProgress) {
            if (!res->client_gone()) sink->progress(*res);
            return;
        }
        if (ev.kind == EngineEvent::Kind::kPromptLogprobs) {
            sink->prompt_logprobs(*res, i, ev.logprobs);
            return;
        }
        if (ev.kind == EngineEvent::Kind::kText) {
            if (job.stream && res->pending_bytes() > kMaxPendingBytes) cancel_all();
            if (ev.token >= 0) sink->token(i, ev.token);
            if (first_token && record) {
                first_token = false;
                std::lock_guard<std::mutex> lk(record->mu);
                record->ttft_ms =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count();
            }
            std::vector<ChatDelta> deltas;
            if (ch.parser) {
                ch.parser->push(ev.text, &deltas);
            } else if (!ev.text.empty()) {
                deltas.push_back(ChatDelta{ChatDelta::Kind::kText, std::move(ev.text), {}, {}});
            }
            for (const ChatDelta& d : deltas) {
                if (d.kind == ChatDelta::Kind::kReasoning) {
                    ++usage.n_reasoning;
                    break;
                }
            }
            deliver(i, deltas, ev.logprobs);
            return;
        }
        // kDone
        std::vector<ChatDelta> deltas;
        if (ch.parser) ch.parser->finish(&deltas);
        deliver(i, deltas, {});
        ch.done = true;
        ++n_done;
        // Each prompt's tokens count once, whatever its n (OpenAI's usage for a list of prompts).
        const size_t k = static_cast<size_t>(i / job.n);
        n_prompt_of[k] = ev.n_prompt;
        n_cached_of[k] = std::max(n_cached_of[k], ev.n_cached);
        usage.n_prompt = usage.n_cached = 0;
        for (size_t j = 0; j < n_prompt_of.size(); ++j) {
            usage.n_prompt += n_prompt_of[j];
            usage.n_cached += n_cached_of[j];
        }
        usage.n_completion += ev.n_completion;
        if (ev.finish == FinishReason::kError && !failed) {
            failed = true;
            error = from_status(ev.error);
        }
        ChoiceEnd end;
        end.finish = ev.finish;
        end.tool_calls = ch.parser && ch.parser->n_tool_calls() > 0;
        end.stop_word = ev.stop_matched;
        end.n_completion = ev.n_completion;
        end.n_prompt = ev.n_prompt;
        end.n_cached = ev.n_cached;
        end.n_draft = ev.n_draft;
        end.n_draft_accepted = ev.n_draft_accepted;
        sink->choice_end(*res, i, end);
        if (n_done < static_cast<int>(choices.size())) return;
        CacheMiss miss;
        if (audit && !failed && job.prompts.size() <= 1) miss = audit_turn();
        if (record) {
            std::lock_guard<std::mutex> lk(record->mu);
            record->n_prompt = usage.n_prompt;
            record->n_cached = usage.n_cached;
            record->n_generated = usage.n_completion;
            record->cache_miss = std::move(miss);
        }
        if (res->client_gone()) return;
        if (failed) {
            sink->fail(*res, error, true);
        } else {
            sink->finish(*res, usage);
        }
    }
};

// The client's name for the conversation, which the cache audit follows turn to turn: a
// session header (Claude Code's, Codex's), else the body's cache key or user.
std::string conversation_key(const RouteRequest& req) {
    for (const char* h : {"x-claude-code-session-id", "session_id", "x-session-id"}) {
        if (const std::string* v = req.http.header(h); v && !v->empty()) return v->substr(0, 256);
    }
    if (!req.body.is_object()) return "";
    for (const char* k : {"prompt_cache_key", "user", "safety_identifier"}) {
        if (const auto it = req.body.find(k); it != req.body.end() && it->is_string() && !it->get<std::string>().empty()) {
            return it->get<std::string>().substr(0, 256);
        }
    }
    if (const auto md = req.body.find("metadata"); md != req.body.end() && md->is_object()) {
        if (const auto u = md->find("user_id"); u != md->end() && u->is_string()) return u->get<std::string>().substr(0, 256);
    }
    return "";
}

}  // namespace

void run_generation(ServerContext& ctx, RouteRequest& req, GenerationJob job,
                    std::shared_ptr<HttpResponder> res, std::unique_ptr<GenerationSink> sink) {
    const ApiServerOptions& o = ctx.opts;
    if (!job.prompts.empty()) job.prompt = job.prompts.front();
    size_t n_prompt_total = 0;
    for (size_t k = 0; k < std::max<size_t>(1, job.prompts.size()); ++k) {
        const std::vector<int32_t>& p = job.prompts.empty() ? job.prompt : job.prompts[k];
        n_prompt_total += p.size();
        if (o.max_prompt_tokens > 0 && static_cast<int>(p.size()) > o.max_prompt_tokens) {
            ApiError e = bad_param(job.prompt_param, "The prompt" +
                                                         (job.prompts.empty() ? std::string() : " " + std::to_string(k)) +
                                                         " has " + std::to_string(p.size()) +
                                                         " tokens; this server takes at most " +
                                                         std::to_string(o.max_prompt_tokens) + " (--max-prompt-tokens).");
            e.code = "context_length_exceeded";
            sink->fail(*res, e, false);
            return;
        }
    }
    if (o.max_tokens_limit > 0 && (job.params.max_tokens < 0 || job.params.max_tokens > o.max_tokens_limit)) {
        if (job.params.max_tokens < 0) job.params.max_tokens_soft = true;  // the server's cap, not the request's
        job.params.max_tokens = o.max_tokens_limit;  // as vLLM's max_model_len caps it: answers stop at the cap
    }
    if (o.request_timeout_s > 0) job.params.timeout_s = o.request_timeout_s;
    if (req.record) {
        std::lock_guard<std::mutex> lk(req.record->mu);
        req.record->model = job.model->info().id;
        req.record->n_prompt = static_cast<int>(n_prompt_total);
        if (o.log_prompts) req.record->prompt = job.model->detokenize(job.prompt);
        if (req.record->cache_key.empty()) req.record->cache_key = conversation_key(req);
    }
    if (ctx.slots) sink = ctx.slots->track(job, std::move(sink));  // GET /slots sees it
    auto g = std::make_shared<Generation>();
    g->workers = ctx.workers.get();
    g->drain_here = job.model->info().n_threads >= hardware_threads();
    g->record = req.record;
    g->audit = &ctx.cache_audit;
    g->res = std::move(res);
    g->sink = std::move(sink);
    const int n_total = n_choices(job);
    g->choices.resize(static_cast<size_t>(n_total));
    g->n_prompt_of.assign(std::max<size_t>(1, job.prompts.size()), 0);
    g->n_cached_of.assign(g->n_prompt_of.size(), 0);
    if (job.output) {
        for (auto& ch : g->choices) ch.parser.emplace(*job.output);
    }
    g->job = std::move(job);
    const GenerationJob& j = g->job;
    // Submit every choice before answering: a refused request still gets its HTTP status.
    for (int i = 0; i < n_total; ++i) {
        GenerationParams p = j.params;
        p.sampling.seed += static_cast<uint64_t>(i % j.n);  // a prompt's choices as if it came alone
        // The engine keeps the sink, and so the generation, until the choice's last event.
        auto h = j.model->submit(j.prompts.empty() ? j.prompt : j.prompts[static_cast<size_t>(i / j.n)], std::move(p),
                                 [g, i](EngineEvent&& ev) { g->enqueue(i, std::move(ev)); });
        if (!h.has_value()) {
            {
                std::lock_guard<std::mutex> lk(g->mu);
                g->aborted = true;  // events of the cancelled choices are dropped
                for (auto& prev : g->handles) prev->cancel();
            }
            const bool blame_prompt = h.status().code() == StatusCode::kInvalidArgument;
            ApiError e = from_status(h.status(), blame_prompt ? j.prompt_param : "");
            if (blame_prompt) e.code = "context_length_exceeded";  // what Codex and the SDKs look for
            g->sink->fail(*g->res, e, false);
            return;
        }
        std::lock_guard<std::mutex> lk(g->mu);
        g->handles.push_back(*h);
    }
    g->sink->start(*g->res);
    bool schedule = false;
    {
        std::lock_guard<std::mutex> lk(g->mu);
        g->started = true;
        schedule = !g->mailbox.empty() && !g->draining;
        if (schedule) g->draining = true;
    }
    if (schedule) g->post_drain();
    std::weak_ptr<Generation> weak = g;
    g->res->on_disconnect([weak] {
        if (auto gen = weak.lock()) gen->cancel_all();
    });
}

}  // namespace ferrox

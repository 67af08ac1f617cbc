// ferrox: the command-line front end. `ferrox run` generates from a prompt, `ferrox tokenize`
// prints token ids. Errors are one line on stderr and a non-zero exit.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <memory>
#include <string>

#include "chat/builtin_templates.h"
#include "chat/jinja.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "core/log.h"
#include "core/mmap_file.h"
#include "engine/embedder.h"
#include "engine/engine_core.h"
#include "engine/loaded_model.h"
#include "engine/prompt.h"
#include "engine/model_registry.h"
#include "engine/model_spec.h"
#include "engine/tokenizer_gguf.h"
#include "loader/gguf.h"
#include "kernels/quants.h"
#include "model/model.h"
#include "server/api_server.h"
#include "testing/scripted_model.h"
#include "engine/engine.h"
#include "tokenizer/incremental_decoder.h"
#include "tokenizer/tokenizer.h"

namespace ferrox::cli {
namespace {

const std::vector<FlagSpec> kRunFlags = {
    {{"-m", "--model"}, true, "model file (GGUF)"},
    {{"-p", "--prompt"}, true, "prompt text"},
    {{"-f", "--file"}, true, "read the prompt from a file"},
    {{"-n", "--n-predict"}, true, "tokens to generate (default 128; -1: until end)"},
    {{"-c", "--ctx-size"}, true, "context size (default: the model's, at most 4096)"},
    {{"-t", "--threads"}, true, "threads (default: all cores)"},
    {{"--temp"}, true, "temperature (default 0.8; 0: greedy)"},
    {{"--top-k"}, true, "top-k (default 40; 0: off)"},
    {{"--top-p"}, true, "top-p (default 0.95; 1: off)"},
    {{"--min-p"}, true, "min-p (default 0.05; 0: off)"},
    {{"--repeat-penalty"}, true, "repetition penalty (default 1.0: off)"},
    {{"--repeat-last-n"}, true, "window of the penalties (default 64)"},
    {{"--presence-penalty"}, true, "presence penalty (default 0)"},
    {{"--frequency-penalty"}, true, "frequency penalty (default 0)"},
    {{"--seed", "-s"}, true, "sampling seed"},
    {{"--chat"}, false, "render the prompt as one user turn with the model's chat template"},
    {{"--ids"}, false, "print generated token ids instead of text"},
    {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens"},
    {{"--no-display-prompt"}, false, "accepted for llama.cpp compatibility (the prompt is never echoed)"},
    {{"--mmap"}, false, "map the weights instead of copying them into huge-page memory (less load time and memory; slower prompts; a mixture's experts stay mapped too); the default for files over 3/4 of memory"},
    {{"--no-mmap"}, false, "copy the weights into huge-page memory (the default for files that fit)"},
    {{"--ggml-order"}, false, "matrix products in llama.cpp's x86 order: logits bit-identical to llama.cpp's AVX2 build for Q4_1, Q5_0, Q8_0, Q4_K and Q6_K models (SmolLM2, Gemma 3), slower in batches and prompts (default: one fixed order per type)"},
    {{"-h", "--help"}, false, "this help"},
};

const std::vector<FlagSpec> kTokenizeFlags = {
    {{"-m", "--model"}, true, "GGUF file (weights or vocab only) or tokenizer.json"},
    {{"-p", "--prompt"}, true, "text"},
    {{"-f", "--file"}, true, "read the text from a file, exactly"},
    {{"--bos"}, false, "add BOS when the vocabulary adds one by default"},
    {{"--no-parse-special"}, false, "treat special-token text as plain text"},
    {{"-h", "--help"}, false, "this help"},
};

int fail(const Status& s) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
}

Expected<std::string> prompt_text(const Args& a) {
    if (auto f = a.get("-f")) return read_file(*f);
    if (auto p = a.get("-p")) return *p;
    return invalid_argument("no prompt: give -p TEXT or -f FILE");
}

Expected<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& path,
                                                    std::unique_ptr<GgufFile>* gguf_out) {
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
        // tokenizer_config.json beside it says whether BOS is added.
        std::string config = path.substr(0, path.find_last_of('/') + 1) + "tokenizer_config.json";
        if (FILE* f = std::fopen(config.c_str(), "rb")) {
            std::fclose(f);
        } else {
            config.clear();
        }
        return Tokenizer::from_hf_json(path, config);
    }
    FERROX_ASSIGN_OR_RETURN(auto g, GgufFile::open(path));
    FERROX_ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_gguf(*g));
    auto tok = Tokenizer::create(std::move(spec));
    if (!tok.has_value()) return Status(tok.status().code(), path + ": " + tok.status().message());
    if (gguf_out) *gguf_out = std::move(g);
    return tok;
}

int cmd_tokenize(int argc, char** argv) {
    auto args = Args::parse(argc, argv, 2, kTokenizeFlags);
    if (!args.has_value()) return fail(args.status());
    if (args->has("-h")) {
        std::printf("usage: ferrox tokenize -m FILE (-p TEXT | -f FILE) [--bos]\n%s", usage(kTokenizeFlags).c_str());
        return 0;
    }
    auto model = args->get("-m");
    if (!model) return fail(invalid_argument("no model: give -m FILE"));
    auto text = prompt_text(*args);
    if (!text.has_value()) return fail(text.status());
    auto tok = load_tokenizer(*model, nullptr);
    if (!tok.has_value()) return fail(tok.status());
    const bool add_special = args->has("--bos");
    auto ids = (*tok)->encode(*text, add_special, !args->has("--no-parse-special"));
    std::string line;
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
}

int cmd_run(int argc, char** argv) {
    auto args = Args::parse(argc, argv, 2, kRunFlags);
    if (!args.has_value()) return fail(args.status());
    if (args->has("-h")) {
        std::printf("usage: ferrox run -m MODEL -p PROMPT [options]\n%s", usage(kRunFlags).c_str());
        return 0;
    }
    auto model_path = args->get("-m");
    if (!model_path) return fail(invalid_argument("no model: give -m MODEL"));
    auto text = prompt_text(*args);
    if (!text.has_value()) return fail(text.status());

    SamplingParams sp;
    auto n_predict = args->get_int("-n", 128);
    auto n_ctx = args->get_int("-c", 0);
    auto n_threads = args->get_int("-t", 0);
    auto temp = args->get_float("--temp", sp.temperature);
    auto top_k = args->get_int("--top-k", sp.top_k);
    auto top_p = args->get_float("--top-p", sp.top_p);
    auto min_p = args->get_float("--min-p", sp.min_p);
    auto rep = args->get_float("--repeat-penalty", sp.repeat_penalty);
    auto rep_n = args->get_int("--repeat-last-n", sp.penalty_last_n);
    auto pres = args->get_float("--presence-penalty", sp.presence_penalty);
    auto freq = args->get_float("--frequency-penalty", sp.frequency_penalty);
    auto seed = args->get_u64("--seed", sp.seed);
    for (const Status* s : {n_predict.has_value() ? nullptr : &n_predict.status(),
                            n_ctx.has_value() ? nullptr : &n_ctx.status(),
                            n_threads.has_value() ? nullptr : &n_threads.status(),
                            temp.has_value() ? nullptr : &temp.status(),
                            top_k.has_value() ? nullptr : &top_k.status(),
                            top_p.has_value() ? nullptr : &top_p.status(),
                            min_p.has_value() ? nullptr : &min_p.status(),
                            rep.has_value() ? nullptr : &rep.status(),
                            rep_n.has_value() ? nullptr : &rep_n.status(),
                            pres.has_value() ? nullptr : &pres.status(),
                            freq.has_value() ? nullptr : &freq.status(),
                            seed.has_value() ? nullptr : &seed.status()}) {
        if (s) return fail(*s);
    }
    if (*n_threads < 0 || *n_ctx < 0) return fail(invalid_argument("-t and -c must be >= 0"));
    sp.temperature = *temp;
    sp.top_k = *top_k;
    sp.top_p = *top_p;
    sp.min_p = *min_p;
    sp.repeat_penalty = *rep;
    sp.penalty_last_n = *rep_n;
    sp.presence_penalty = *pres;
    sp.frequency_penalty = *freq;
    sp.seed = *seed;

    // The server's load path and engine, one request: the same prompt step, scheduler,
    // speculation and sampler as `ferrox serve`.
    ModelOptions mo;
    mo.n_threads = *n_threads;
    mo.ggml_order = args->has("--ggml-order");
    mo.mmap = args->has("--mmap");
    mo.mmap_auto = !args->has("--no-mmap");
    mo.max_ctx = *n_ctx > 0 ? *n_ctx : 4096;
    auto lm = load_model(*model_path, mo);
    if (!lm.has_value()) return fail(lm.status());
    const Tokenizer& tk = *(*lm)->tokenizer;
    const int ctx = *n_ctx > 0 ? *n_ctx : std::min(4096, (*lm)->model->n_ctx_train());

    std::vector<int32_t> ids;
    if (args->has("--chat")) {
        // The prompt step the server uses: the model's template (ChatML when it has none),
        // the same BOS rule.
        auto builder = PromptBuilder::create(tk, (*lm)->chat_template);
        if (!builder.has_value()) return fail(builder.status());
        Conversation conv;
        conv.messages.push_back({.role = "user", .content = *text});
        auto p = (*builder)->build(conv);
        if (!p.has_value()) return fail(p.status());
        ids = std::move(p->tokens);
    } else {
        ids = tk.encode(*text, /*add_special=*/true, /*parse_special=*/true);
    }
    if (ids.empty()) return fail(invalid_argument("the prompt is empty after tokenization"));
    if (static_cast<int>(ids.size()) >= ctx) {
        return fail(invalid_argument("prompt of " + std::to_string(ids.size()) +
                                     " tokens does not fit the context of " + std::to_string(ctx)));
    }
    EngineOptions eo;
    eo.n_parallel = 1;
    eo.n_ctx = ctx;
    eo.max_queue = 1;
    auto core = EngineCore::create(*lm, eo);
    if (!core.has_value()) return fail(core.status());

    const bool print_ids = args->has("--ids");
    GenerationParams params;
    params.sampling = sp;
    params.max_tokens = *n_predict < 0 ? -1 : std::min(*n_predict, ctx - static_cast<int>(ids.size()));
    params.ignore_eos = args->has("--ignore-eos");
    // With --ids the end-of-generation token is printed too: an event with logprobs carries it.
    if (print_ids) params.top_logprobs = 0;
    const int n_prompt = static_cast<int>(ids.size());
    const auto t_start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point t_first{};
    int n_gen = 0;
    Status error;
    auto sink = [&](EngineEvent&& ev) {
        if (ev.kind == EngineEvent::Kind::kDone) {
            if (ev.finish == FinishReason::kError) error = ev.error;
            return;
        }
        if (ev.kind != EngineEvent::Kind::kText || ev.token < 0) {
            if (ev.kind == EngineEvent::Kind::kText && !print_ids) std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
            return;
        }
        if (n_gen++ == 0) t_first = std::chrono::steady_clock::now();
        if (print_ids) {
            std::printf(n_gen == 1 ? "%d" : " %d", ev.token);
        } else {
            std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
        }
        std::fflush(stdout);
    };
    auto handle = (*core)->submit(std::move(ids), params, sink);
    if (!handle.has_value()) return fail(handle.status());
    (*core)->run_until_idle();
    const auto t_end = std::chrono::steady_clock::now();
    if (!error.is_ok()) return fail(error);
    std::printf("\n");
    std::fflush(stdout);

    const auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    const double prompt_ms = n_gen > 0 ? ms(t_start, t_first) : ms(t_start, t_end);
    const double gen_ms = n_gen > 0 ? ms(t_first, t_end) : 0;
    const int n_decode = std::max(0, n_gen - 1);
    std::fprintf(stderr, "\nferrox: load time = %10.2f ms\n", (*lm)->load_ms);
    std::fprintf(stderr, "ferrox: prompt eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                 prompt_ms, n_prompt, prompt_ms / std::max(1, n_prompt), n_prompt * 1000.0 / std::max(1e-9, prompt_ms));
    std::fprintf(stderr, "ferrox:        eval time = %10.2f ms / %5d tokens (%8.2f ms per token, %8.2f tokens per second)\n",
                 gen_ms, n_decode, gen_ms / std::max(1, n_decode), n_decode * 1000.0 / std::max(1e-9, gen_ms));
    std::fprintf(stderr, "ferrox: threads = %d, kernels = %s\n", (*lm)->model->n_threads(), kernels_isa_name());
    return 0;
}


const std::vector<FlagSpec> kServeFlags = {
    {{}, false, "server"},
    {{"--host"}, true, "address to bind (default 127.0.0.1)"},
    {{"--port"}, true, "port (default 8080)"},
    {{"-np", "--parallel"}, true, "sequences generated at once (default 4)"},
    {{"--max-queue"}, true, "requests that may wait for a slot; beyond, 429 (default 64)"},
    {{"--api-key"}, true, "require this API key (repeatable)"},
    {{"--api-key-file"}, true, "file with one API key per line"},
    {{"--cors-origin"}, true, "allow browser requests from this origin (repeatable; * for any); default: CORS off"},
    {{"--admin-key"}, true, "enables /admin/models/* with this key (Authorization: Bearer KEY); without it they answer 403"},
    {{"--access-log"}, true, "one JSON line per request to FILE (- for stderr): route, model, status, tokens, times"},
    {{"--log-prompts"}, false, "include prompts in the access log (off by default)"},
    {{"--max-prompt-tokens"}, true, "refuse prompts longer than this many tokens (400; default: the context)"},
    {{"--max-tokens-cap"}, true, "cap every request's max_tokens at this (default: no cap)"},
    {{"--request-timeout"}, true, "end a request after this many seconds, with what it has (default: none)"},
    {{"--config"}, true, "read flags from FILE, one per line (\"--port 8080\"; '#' comments); later flags win"},
    {{"--metrics-compat"}, true, "llamacpp, vllm (repeatable or comma-separated): /metrics also carries llama-server's llamacpp:* names (its dashboards work unchanged) or vLLM's vllm:* names (the Inference Extension's endpoint picker, vllm-router)"},
    {{"--drain-timeout"}, true, "on SIGTERM: not ready at once, new requests 503, running ones get this many seconds to finish, then end (default 30)"},
    {{"--state-dir"}, true, "keep stored Responses (previous_response_id) in DIR/responses.sqlite3: they survive a restart (default: in memory)"},
    {{"--responses-store"}, true, "redis://HOST:PORT[/DB]: keep stored Responses in Redis, shared by replicas (instead of --state-dir or memory)"},
    {{"--responses-ttl"}, true, "stored Responses expire after this many seconds (default 2592000, 30 days; 0: never)"},
    {{"--responses-max"}, true, "stored Responses kept at most, the oldest evicted first (default 1000)"},
    {{"--responses-max-mib"}, true, "MiB of stored Responses kept at most, the oldest evicted first (default 64)"},
    {{"--slots"}, false, "llama-server: GET /slots lists the parallel slots (the default)"},
    {{"--no-slots"}, false, "llama-server: GET /slots answers 501, as llama-server's"},
    {{"--no-webui"}, false, "no chat page at / and no dashboard at /dashboard (404)"},
    {{"--test-script"}, true, "for tests: replay scripted answers from a JSON file [{\"when\": TEXT, \"reply\": TEXT}, ...] instead of running the model"},
    {{"-h", "--help"}, false, "this help"},
    {{}, false, "model"},
    {{"-m", "--model"}, true, "model file (GGUF); repeatable: each model is served under its own name"},
    {{"--alias"}, true, "name to report and accept for the model of the same position (repeatable)"},
    {{"--default-model"}, true, "the alias that serves requests naming no served model (default: with one chat model, any name is served by it; with several, an unknown name is a 404)"},
    {{"--max-memory"}, true, "MiB that loaded models may use (weights + KV); a load beyond is refused (default: no limit)"},
    {{"-t", "--threads"}, true, "threads (default: all cores)"},
    {{"-c", "--ctx-size"}, true, "KV cache size in tokens, shared by all slots (default 4096); with --kv-budget, the longest context of one request"},
    {{"-b", "--batch-size"}, true, "tokens per forward step (default 512, at least 2)"},
    {{"-ub", "--ubatch-size"}, true, "llama-server's physical batch: a forward step takes min(-b, -ub) tokens"},
    {{"--mmap"}, false, "map the weights instead of copying them into huge-page memory (less load time and memory; slower prompts; a mixture's experts stay mapped too); the default for files over 3/4 of memory"},
    {{"--no-mmap"}, false, "copy the weights into huge-page memory (the default for files that fit)"},
    {{"--ggml-order"}, false, "matrix products in llama.cpp's x86 order: logits bit-identical to llama.cpp's AVX2 build for Q4_1, Q5_0, Q8_0, Q4_K and Q6_K models (SmolLM2, Gemma 3), slower in batches and prompts (default: one fixed order per type)"},
    {{"--embedding", "--embeddings"}, false, "llama-server: serve embeddings only; the generating routes answer 501 (the model must be an encoder checkpoint)"},
    {{"--pooling"}, true, "llama-server: embedding pooling mean, cls or last, replacing the checkpoint's (none and rank are refused)"},
    {{}, false, "cache"},
    {{"--kv-budget"}, true, "KV cache size in MiB (replaces -c as the pool size)"},
    {{"--kv-type"}, true, "KV cache type: f16 (default) or q8_0"},
    {{"--no-prefix-cache"}, false, "do not share KV blocks between requests"},
    {{"--cache-dir"}, true, "keep the prompt cache on disk in this directory too: prefixes evicted from the pool or computed before a restart are read back, not recomputed"},
    {{"--cache-disk"}, true, "most MiB the prompt cache takes in --cache-dir, least recently used first (default 8192)"},
    {{"--cache-ram", "-cram"}, true, "most MiB of host memory that keeps KV blocks the pool evicts, read back instead of recomputed (default 8192, at most a quarter of memory; -1: half of memory; 0: off)"},
    {{}, false, "speculative decoding"},
    {{"--spec-ngram"}, true,
     "speculative decoding by prompt lookup: match the last N tokens (down to 2) earlier in the context "
     "and verify what followed (default 3; 0: off)"},
    {{"--draft-max"}, true, "most draft tokens one sequence verifies per step (default 8; 0: no speculation)"},
    {{"-md", "--model-draft"}, true,
     "draft model for speculative decoding of the first -m model (a smaller model of its vocabulary); "
     "replaces prompt lookup"},
    {{}, false, "chat templates and reasoning"},
    {{"--chat-template"}, true, "llama-server: a built-in template name (chatml, llama3, mistral-v7, gemma, ...; see below) or a Jinja template text"},
    {{"--chat-template-file"}, true, "Jinja chat template replacing the model's"},
    {{"--jinja"}, false, "llama-server: accepted (chat templates are always rendered as Jinja)"},
    {{"--no-jinja"}, false, "llama-server: accepted with a note (ferrox renders every chat template as Jinja)"},
    {{"--reasoning-format"}, true, "auto: thinking goes to its own field/blocks (default); none: it stays in the text"},
    {{"--reasoning-field"}, true, "Chat Completions' name for it: reasoning_content, reasoning or both (default both)"},
    {{"-rea", "--reasoning"}, true, "llama-server: on|off|auto: enable_thinking true/false for every chat template, or the template's default (auto)"},
    {{"--reasoning-budget"}, true, "llama-server: -1 unlimited (default), 0 no thinking (enable_thinking false); a token budget is refused"},
    {{}, false, "sampling (defaults of requests that set none)"},
    {{"-n", "--n-predict"}, true, "default max_tokens when a request gives none (default: until the end)"},
    {{"--temp"}, true, "llama-server: default temperature of requests that set none (default 0.8)"},
    {{"--top-k"}, true, "llama-server: default top-k (default 40; 0: off)"},
    {{"--top-p"}, true, "llama-server: default top-p (default 0.95)"},
    {{"--min-p"}, true, "llama-server: default min-p (default 0.05)"},
    {{"--repeat-penalty"}, true, "llama-server: default repetition penalty (default 1.0: off)"},
    {{"--repeat-last-n"}, true, "llama-server: default penalty window (default 64)"},
    {{"--presence-penalty"}, true, "llama-server: default presence penalty (default 0)"},
    {{"--frequency-penalty"}, true, "llama-server: default frequency penalty (default 0)"},
    {{"-s", "--seed"}, true, "llama-server: default seed of requests that set none (default -1: random)"},
    {{"--dry-multiplier"}, true, "llama-server: default DRY multiplier (default 0: off)"},
    {{"--dry-base"}, true, "llama-server: default DRY base (default 1.75)"},
    {{"--dry-allowed-length"}, true, "llama-server: default DRY allowed length (default 2)"},
    {{"--dry-penalty-last-n"}, true, "llama-server: default DRY window (default 64; -1: the whole sequence; 0: off)"},
    {{"--dry-sequence-breaker"}, true, "llama-server: a DRY sequence breaker replacing the defaults (\\n : \" *); none: no breakers"},
    {{"--xtc-probability"}, true, "llama-server: default XTC probability (default 0: off)"},
    {{"--xtc-threshold"}, true, "llama-server: default XTC threshold (default 0.1)"},
    {{"--typical", "--typical-p"}, true, "llama-server: default typical-p (default 1: off)"},
    {{"--top-nsigma", "--top-n-sigma"}, true, "llama-server: default top-n-sigma (default -1: off)"},
    {{"--dynatemp-range"}, true, "llama-server: default dynamic temperature range (default 0: off)"},
    {{"--dynatemp-exp"}, true, "llama-server: default dynamic temperature exponent (default 1)"},
    {{"--mirostat"}, true, "llama-server: default mirostat version (0 off, 1, 2)"},
    {{"--mirostat-lr"}, true, "llama-server: default mirostat eta (default 0.1)"},
    {{"--mirostat-ent"}, true, "llama-server: default mirostat tau (default 5)"},
    {{"--samplers"}, true, "llama-server: default sampler order, names separated by ';' (default penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)"},
    {{"--sampler-seq", "--sampling-seq"}, true, "llama-server: default sampler order in letters (default edskypmxt)"},
    {{}, false, "llama-server compatibility"},
    {{"-ctk", "--cache-type-k"}, true, "llama-server: KV cache type (f16 or q8_0; K and V share one type here)"},
    {{"-ctv", "--cache-type-v"}, true, "llama-server: the same for V"},
    {{"--metrics"}, false, "llama-server: /metrics also carries llama-server's llamacpp:* names (as --metrics-compat llamacpp; ferrox's own are always on)"},
    {{"--offline"}, false, "llama-server: accepted (ferrox never downloads)"},
    {{"-ngl", "--gpu-layers", "--n-gpu-layers"}, true, "llama-server: accepted with a note (this build computes on the CPU)"},
    {{"-fa", "--flash-attn"}, true, "llama-server: on|off|auto, accepted with a note (this build computes on the CPU)"},
    {{"--n-cpu-moe"}, true, "llama-server: accepted with a note (this build computes on the CPU)"},
    {{"-hf", "--hf-repo"}, true, "llama-server: refused (ferrox does not download models: give -m FILE)"},
    {{"-kvu", "--kv-unified"}, false, "llama-server: accepted (ferrox's KV is always one pool shared by every sequence)"},
    {{"-no-kvu", "--no-kv-unified"}, false, "llama-server: accepted with a note (the KV pool stays shared)"},
    {{"--swa-full"}, false, "llama-server: accepted (sliding-window layers keep their KV for the whole context here)"},
    {{"--no-context-shift"}, false, "llama-server: accepted (the default: a request that fills its context ends with finish_reason length)"},
    {{"--context-shift"}, false, "llama-server: refused (ferrox does not drop the oldest tokens to go on generating)"},
    {{"-cb", "--cont-batching"}, false, "llama-server: accepted (batching is always continuous)"},
    {{"-v", "--verbose", "--log-verbose"}, false, "llama-server: debug logging"},
    {{"--no-ui"}, false, "llama-server: the same as --no-webui"},
    {{"--backend_sampling", "--backend-sampling"}, false, "llama-server: accepted with a note (sampling runs on the CPU here)"},
    {{"--spec-type"}, true, "llama-server: none, draft-simple (needs -md) or an ngram type (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache: prompt lookup, --spec-ngram)"},
    {{"--spec-draft-n-max"}, true, "llama-server: the same as --draft-max"},
    {{"--spec-draft-n-min"}, true, "llama-server: accepted (ferrox verifies every draft, however short)"},
    {{"--slot-save-path"}, true, "llama-server: directory of POST /slots/{id}?action=save|restore files (without it, those actions answer 501)"},
};

// llama-server's defaults of its further samplers (DRY, XTC, typical-p, top-n-sigma, dynamic
// temperature, mirostat, the order), with the ranges the request fields take.
Status read_llama_sampler_flags(const Args& a, SamplingParams* sp) {
    FERROX_ASSIGN_OR_RETURN(sp->dry_multiplier, a.get_float("--dry-multiplier", sp->dry_multiplier));
    FERROX_ASSIGN_OR_RETURN(sp->dry_base, a.get_float("--dry-base", sp->dry_base));
    FERROX_ASSIGN_OR_RETURN(sp->dry_allowed_length, a.get_int("--dry-allowed-length", sp->dry_allowed_length));
    FERROX_ASSIGN_OR_RETURN(sp->dry_penalty_last_n, a.get_int("--dry-penalty-last-n", sp->dry_penalty_last_n));
    if (auto b = a.get("--dry-sequence-breaker")) {
        sp->dry_sequence_breakers.clear();
        if (*b != "none") sp->dry_sequence_breakers.push_back(*b);
    }
    FERROX_ASSIGN_OR_RETURN(sp->xtc_probability, a.get_float("--xtc-probability", sp->xtc_probability));
    FERROX_ASSIGN_OR_RETURN(sp->xtc_threshold, a.get_float("--xtc-threshold", sp->xtc_threshold));
    FERROX_ASSIGN_OR_RETURN(sp->typical_p, a.get_float("--typical", sp->typical_p));
    FERROX_ASSIGN_OR_RETURN(sp->top_n_sigma, a.get_float("--top-nsigma", sp->top_n_sigma));
    FERROX_ASSIGN_OR_RETURN(sp->dynatemp_range, a.get_float("--dynatemp-range", sp->dynatemp_range));
    FERROX_ASSIGN_OR_RETURN(sp->dynatemp_exponent, a.get_float("--dynatemp-exp", sp->dynatemp_exponent));
    FERROX_ASSIGN_OR_RETURN(sp->mirostat, a.get_int("--mirostat", sp->mirostat));
    FERROX_ASSIGN_OR_RETURN(sp->mirostat_eta, a.get_float("--mirostat-lr", sp->mirostat_eta));
    FERROX_ASSIGN_OR_RETURN(sp->mirostat_tau, a.get_float("--mirostat-ent", sp->mirostat_tau));
    std::string bad;
    if (auto names = a.get("--samplers")) {
        std::vector<std::string> list;
        for (size_t at = 0; at <= names->size();) {
            const size_t end = std::min(names->find(';', at), names->size());
            list.push_back(names->substr(at, end - at));
            at = end + 1;
        }
        if (!parse_sampler_names(list, &sp->samplers, &bad)) return invalid_argument("--samplers: unknown sampler '" + bad + "'");
    }
    if (auto seq = a.get("--sampler-seq"); seq && !parse_sampler_chars(*seq, &sp->samplers, &bad)) {
        return invalid_argument("--sampler-seq: unknown sampler letter '" + bad + "' (letters: e d s k y p m x t)");
    }
    if (!(sp->dry_multiplier >= 0) || !(sp->dry_base >= 0) || sp->dry_allowed_length < 0 ||
        sp->dry_penalty_last_n < -1 || !(sp->xtc_probability >= 0 && sp->xtc_probability <= 1) ||
        !(sp->xtc_threshold >= 0 && sp->xtc_threshold <= 1) || !(sp->typical_p >= 0) ||
        !(sp->dynatemp_range >= 0) || !(sp->dynatemp_exponent >= 0) || sp->mirostat < 0 || sp->mirostat > 2 ||
        !(sp->mirostat_tau >= 0) || !(sp->mirostat_eta >= 0)) {
        return invalid_argument("sampler defaults out of range: --dry-* >= 0 (--dry-penalty-last-n >= -1), "
                                "--xtc-* in [0, 1], --mirostat 0, 1 or 2, the rest >= 0");
    }
    if (sp->dry_base < 1.0f) sp->dry_base = SamplingParams{}.dry_base;  // llama.cpp: < 1 takes the default
    return Status::ok();
}

// llama-server's flags that ferrox takes with their meaning: the sampling defaults of requests
// that set none, the KV cache type (-ctk/-ctv: one type for K and V here), and flags with
// nothing to do on this build (accepted; a note where llama-server would use a GPU).
Status read_llama_server_flags(const Args& a, SamplingDefaults* sd, KvType* kv_type) {
    if (a.has("-hf")) return invalid_argument("-hf: ferrox does not download models; give -m FILE (a GGUF on disk)");
    SamplingParams& sp = sd->params;
    FERROX_ASSIGN_OR_RETURN(sp.temperature, a.get_float("--temp", sp.temperature));
    FERROX_ASSIGN_OR_RETURN(sp.top_k, a.get_int("--top-k", sp.top_k));
    FERROX_ASSIGN_OR_RETURN(sp.top_p, a.get_float("--top-p", sp.top_p));
    FERROX_ASSIGN_OR_RETURN(sp.min_p, a.get_float("--min-p", sp.min_p));
    FERROX_ASSIGN_OR_RETURN(sp.repeat_penalty, a.get_float("--repeat-penalty", sp.repeat_penalty));
    FERROX_ASSIGN_OR_RETURN(sp.penalty_last_n, a.get_int("--repeat-last-n", sp.penalty_last_n));
    FERROX_ASSIGN_OR_RETURN(sp.presence_penalty, a.get_float("--presence-penalty", sp.presence_penalty));
    FERROX_ASSIGN_OR_RETURN(sp.frequency_penalty, a.get_float("--frequency-penalty", sp.frequency_penalty));
    if (!(sp.temperature >= 0 && sp.temperature <= 100) || sp.top_k < -1 || !(sp.top_p >= 0 && sp.top_p <= 1) ||
        !(sp.min_p >= 0 && sp.min_p <= 1) || !(sp.repeat_penalty > 0) || sp.penalty_last_n < -1 ||
        !(std::abs(sp.presence_penalty) <= 2) || !(std::abs(sp.frequency_penalty) <= 2)) {
        return invalid_argument("sampling defaults out of range: --temp >= 0, --top-k >= -1, --top-p and --min-p in "
                                "[0, 1], --repeat-penalty > 0, --repeat-last-n >= -1, penalties in [-2, 2]");
    }
    FERROX_RETURN_IF_ERROR(read_llama_sampler_flags(a, &sp));
    if (auto seed = a.get("-s"); seed && *seed != "-1") {
        FERROX_ASSIGN_OR_RETURN(sp.seed, a.get_u64("-s", 0));
        sd->seeded = true;
    }
    const auto k = a.get("-ctk"), v = a.get("-ctv");
    if (k || v) {
        FERROX_ASSIGN_OR_RETURN(const KvType kt, parse_kv_type(k.value_or(*v)));
        FERROX_ASSIGN_OR_RETURN(const KvType vt, parse_kv_type(v.value_or(*k)));
        if (kt != vt) return invalid_argument("-ctk and -ctv: ferrox keeps K and V in one type (f16 or q8_0)");
        if (a.has("--kv-type") && kt != *kv_type) return invalid_argument("--kv-type and -ctk/-ctv disagree");
        *kv_type = kt;
    }
    if (a.has("--context-shift")) {
        return invalid_argument("--context-shift: ferrox does not shift the context (a request that fills it ends with "
                                "finish_reason length); leave the flag out");
    }
    if (a.has("-no-kvu")) std::fprintf(stderr, "ferrox: --no-kv-unified: the KV pool is always shared by every sequence here; ignored\n");
    if (a.has("--backend_sampling")) std::fprintf(stderr, "ferrox: --backend_sampling: sampling runs on the CPU here; ignored\n");
    for (const char* gpu : {"-ngl", "-fa", "--n-cpu-moe"}) {
        if (a.has(gpu)) std::fprintf(stderr, "ferrox: %s: this build computes on the CPU; ignored\n", gpu);
    }
    if (a.has("--no-jinja")) {
        std::fprintf(stderr, "ferrox: --no-jinja: chat templates are always rendered as Jinja here (the built-in "
                             "names of --chat-template are Jinja too); ignored\n");
    }
    return Status::ok();
}

// --spec-type as llama-server names its drafters (a comma-separated list): draft-simple drafts
// with the -md model, the ngram types all mean prompt lookup here (--spec-ngram, kept at its
// value), none turns speculation off. A name llama-server does not know is refused.
Status spec_type_arg(const Args& a, int* spec_ngram, int* draft_max) {
    auto types = a.get("--spec-type");
    if (!types) return Status::ok();
    if (types->empty()) return invalid_argument("--spec-type needs a type (none, draft-simple or an ngram type)");
    bool any = false, ngram = false;
    std::stringstream list(*types);
    for (std::string t; std::getline(list, t, ',');) {
        if (t == "none") continue;
        if (t == "draft-simple") {
            if (!a.has("-md")) return invalid_argument("--spec-type draft-simple needs a draft model (-md FILE)");
        } else if (t == "ngram-simple" || t == "ngram-map-k" || t == "ngram-map-k4v" || t == "ngram-mod" ||
                   t == "ngram-cache") {
            ngram = true;
        } else {
            return invalid_argument("--spec-type: '" + t + "' is none of none, draft-simple, ngram-simple, "
                                    "ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache");
        }
        any = true;
    }
    if (!any) {
        if (a.has("-md")) return invalid_argument("--spec-type none and a draft model (-md) contradict each other");
        *draft_max = 0;
    } else if (ngram && *spec_ngram == 0) {
        *spec_ngram = EngineOptions{}.spec_ngram;
    }
    return Status::ok();
}

// --chat-template: one of llama.cpp's built-in names, or (as llama-server takes it with --jinja)
// the text of a Jinja template. A word that is neither is refused with the list of names.
Expected<std::string> chat_template_arg(const std::string& value) {
    if (auto src = builtin_chat_template(value)) return std::string(*src);
    if (value.find("{%") != std::string::npos || value.find("{{") != std::string::npos) {
        auto t = JinjaTemplate::parse(value);
        if (!t.has_value()) return invalid_argument("--chat-template: not a valid Jinja template: " + t.status().message());
        return value;
    }
    std::string names;
    for (const auto& n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
    return invalid_argument("--chat-template: '" + value + "' is neither a built-in template (" + names +
                            ") nor a Jinja template");
}

// --reasoning on|off|auto and --reasoning-budget N as llama-server reads them: on/off set the
// templates' enable_thinking for every request (a request's chat_template_kwargs still win),
// auto leaves the template's default; a budget of 0 turns thinking off, -1 leaves it alone.
// The JSON object of default template variables ("" when none).
Expected<std::string> reasoning_kwargs(const Args& a) {
    std::string enable;  // "", "true", "false"
    if (auto r = a.get("-rea")) {
        if (*r == "on" || *r == "1" || *r == "true" || *r == "enabled") {
            enable = "true";
        } else if (*r == "off" || *r == "0" || *r == "false" || *r == "disabled") {
            enable = "false";
        } else if (*r != "auto") {
            return invalid_argument("--reasoning must be on, off or auto, not '" + *r + "'");
        }
    }
    FERROX_ASSIGN_OR_RETURN(const int budget, a.get_int("--reasoning-budget", -1));
    if (budget < -1) return invalid_argument("--reasoning-budget must be -1 (unlimited), 0 (no thinking) or a count");
    if (budget > 0) {
        return invalid_argument("--reasoning-budget " + std::to_string(budget) +
                                ": ferrox does not cut thinking at a token count; give -1 (unlimited) or 0 "
                                "(no thinking), or max_tokens per request");
    }
    if (budget == 0) {
        if (enable == "true") return invalid_argument("--reasoning on and --reasoning-budget 0 contradict each other");
        enable = "false";
    }
    return enable.empty() ? std::string() : "{\"enable_thinking\": " + enable + "}";
}

// SIGTERM's graceful drain: the server turns not-ready and refuses new requests (503 with
// Retry-After), the running ones get up to `timeout_s` to finish; a second SIGTERM or a SIGINT
// ends the wait. Idle must hold over a few polls: a request admitted just before the drain may
// still be on its way to the engine.
void drain(ApiServer& server, const sigset_t& sigs, double timeout_s) {
    std::fprintf(stderr, "ferrox: SIGTERM: draining (not ready; up to %gs for running requests)\n", timeout_s);
    server.drain();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    int n_idle = 0;
    while (n_idle < 3) {
        if (std::chrono::steady_clock::now() >= deadline) {
            std::fprintf(stderr, "ferrox: drain timeout: ending the requests still running\n");
            return;
        }
        const timespec poll = {0, 50 * 1000 * 1000};
        if (sigtimedwait(&sigs, nullptr, &poll) > 0) return;  // asked again: stop now
        n_idle = server.idle() ? n_idle + 1 : 0;
    }
}

int cmd_serve(int argc, char** argv) {
    // --config FILE: its flags (one per line, "flag value", '#' comments) go where it stands,
    // so later flags on the command line override earlier ones from the file.
    std::vector<std::string> expanded;
    for (int i = 0; i < argc; ++i) {
        if (i >= 2 && std::string(argv[i]) == "--config" && i + 1 < argc) {
            auto text = read_file(argv[++i]);
            if (!text.has_value()) return fail(text.status());
            std::istringstream lines(*text);
            std::string line;
            while (std::getline(lines, line)) {
                const size_t b = line.find_first_not_of(" \t\r");
                if (b == std::string::npos || line[b] == '#') continue;
                const size_t e = line.find_last_not_of(" \t\r");
                line = line.substr(b, e - b + 1);
                const size_t sp = line.find_first_of(" \t=");
                expanded.push_back(line.substr(0, sp));
                if (sp != std::string::npos) {
                    const size_t v = line.find_first_not_of(" \t=", sp);
                    if (v != std::string::npos) expanded.push_back(line.substr(v));
                }
            }
        } else {
            expanded.push_back(argv[i]);
        }
    }
    std::vector<char*> argv_all;
    for (auto& a : expanded) argv_all.push_back(a.data());
    argc = static_cast<int>(argv_all.size());
    argv = argv_all.data();
    // --api-key, -m, --alias and --cors-origin may repeat: collect every value before the
    // single-value parser sees them (the n-th --alias names the n-th model).
    std::vector<std::string> keys, model_paths, aliases, cors, metrics_compat;
    std::vector<char*> rest;
    for (int i = 0; i < argc; ++i) {
        const std::string a = argv[i];
        if (i >= 2 && a == "--cors-origin" && i + 1 < argc) {
            cors.push_back(argv[++i]);
            continue;
        }
        if (i >= 2 && a == "--metrics-compat" && i + 1 < argc) {
            metrics_compat.push_back(argv[++i]);
            continue;
        }
        if (i >= 2 && a == "--api-key" && i + 1 < argc) {
            keys.push_back(argv[++i]);
        } else if (i >= 2 && (a == "-m" || a == "--model") && i + 1 < argc) {
            model_paths.push_back(argv[++i]);
        } else if (i >= 2 && a == "--alias" && i + 1 < argc) {
            aliases.push_back(argv[++i]);
        } else {
            rest.push_back(argv[i]);
        }
    }
    auto args = Args::parse(static_cast<int>(rest.size()), rest.data(), 2, kServeFlags);
    if (!args.has_value()) return fail(args.status());
    if (args->has("-h")) {
        std::string names;
        for (const auto& n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
        std::printf("usage: ferrox serve -m MODEL [options]\n%s\nbuilt-in chat templates (--chat-template NAME):\n  %s\n",
                    usage(kServeFlags).c_str(), names.c_str());
        return 0;
    }
    if (model_paths.empty()) return fail(invalid_argument("no model: give -m MODEL (repeatable)"));
    if (aliases.size() > model_paths.size()) return fail(invalid_argument("more --alias than -m"));
    auto max_memory = args->get_int("--max-memory", 0);
    if (!max_memory.has_value() || *max_memory < 0) return fail(invalid_argument("--max-memory must be MiB >= 0"));
    auto port = args->get_int("--port", 8080);
    auto n_ctx = args->get_int("-c", 4096);
    auto n_par = args->get_int("-np", 4);
    auto n_threads = args->get_int("-t", 0);
    auto n_batch = args->get_int("-b", 512);
    auto n_ubatch = args->get_int("-ub", 512);
    auto n_predict = args->get_int("-n", -1);
    auto max_queue = args->get_int("--max-queue", 64);
    auto kv_budget = args->get_int("--kv-budget", 0);
    auto cache_disk = args->get_int("--cache-disk", 8192);
    auto cache_ram = args->get_int("--cache-ram", -2);
    auto spec_ngram = args->get_int("--spec-ngram", EngineOptions{}.spec_ngram);
    // --spec-draft-n-max is llama-server's --draft-max; ferrox's own name wins when both are given.
    auto draft_max = args->get_int(args->has("--draft-max") ? "--draft-max" : "--spec-draft-n-max",
                                   EngineOptions{}.draft_max);
    auto draft_min = args->get_int("--spec-draft-n-min", 0);
    if (!draft_min.has_value() || *draft_min < 0) return fail(invalid_argument("--spec-draft-n-min must be >= 0"));
    for (const auto* e : {&port, &n_ctx, &n_par, &n_threads, &n_batch, &n_ubatch, &n_predict, &max_queue, &kv_budget,
                          &spec_ngram, &draft_max, &cache_disk, &cache_ram}) {
        if (!e->has_value()) return fail(e->status());
    }
    if (*spec_ngram < 0 || *spec_ngram > 64 || *draft_max < 0 || *draft_max > 64) {
        return fail(invalid_argument("--spec-ngram and --draft-max (--spec-draft-n-max) must be in [0, 64]"));
    }
    if (Status st = spec_type_arg(*args, &*spec_ngram, &*draft_max); !st.is_ok()) return fail(st);
    if (args->has("-v")) log_set_level(LogLevel::kDebug);
    if (*port < 0 || *port > 65535) return fail(invalid_argument("--port must be in [0, 65535]"));
    if (*cache_disk < 1) return fail(invalid_argument("--cache-disk must be >= 1 (MiB)"));
    if (*cache_ram < -1 && args->has("--cache-ram")) return fail(invalid_argument("--cache-ram must be >= -1 (MiB; -1: half of memory, 0: off)"));
    if (args->has("--cache-dir") && args->get("--cache-dir")->empty()) return fail(invalid_argument("--cache-dir needs a directory"));
    if (*n_ctx < 16 || *n_par < 1 || *n_threads < 0 || *n_batch < 2 || *max_queue < 0 || *kv_budget < 0) {
        return fail(invalid_argument("-c must be >= 16, -np >= 1, -b >= 2, -t, --max-queue and --kv-budget >= 0"));
    }
    if (*n_ubatch < 2) return fail(invalid_argument("-ub must be >= 2"));
    // llama-server's physical batch (-ub) is what one forward step takes: ferrox's -b.
    if (args->has("-ub")) *n_batch = args->has("-b") ? std::min(*n_batch, *n_ubatch) : *n_ubatch;
    auto kv_type = parse_kv_type(args->get("--kv-type").value_or("f16"));
    if (!kv_type.has_value()) return fail(kv_type.status());
    SamplingDefaults sampling;
    if (Status st = read_llama_server_flags(*args, &sampling, &*kv_type); !st.is_ok()) return fail(st);
    if (auto f = args->get("--api-key-file")) {
        auto text = read_file(*f);
        if (!text.has_value()) return fail(text.status());
        size_t pos = 0;
        while (pos < text->size()) {
            size_t nl = text->find('\n', pos);
            if (nl == std::string::npos) nl = text->size();
            std::string k = text->substr(pos, nl - pos);
            while (!k.empty() && (k.back() == '\r' || k.back() == ' ')) k.pop_back();
            if (!k.empty()) keys.push_back(k);
            pos = nl + 1;
        }
    }
    ApiServerOptions so;
    so.http.host = args->get("--host").value_or("127.0.0.1");
    so.http.port = *port;
    so.api_keys = keys;
    so.admin_key = args->get("--admin-key").value_or("");
    so.cors_origins = cors;
    so.access_log = args->get("--access-log").value_or("");
    so.log_prompts = args->has("--log-prompts");
    auto max_prompt = args->get_int("--max-prompt-tokens", 0);
    auto max_tokens_cap = args->get_int("--max-tokens-cap", 0);
    auto timeout = args->get_float("--request-timeout", 0);
    auto drain_timeout = args->get_float("--drain-timeout", 30);
    if (!drain_timeout.has_value() || !(*drain_timeout >= 0) || *drain_timeout > 86400) {
        return fail(invalid_argument("--drain-timeout must be seconds in [0, 86400]"));
    }
    if (!max_prompt.has_value() || !max_tokens_cap.has_value() || !timeout.has_value() || *max_prompt < 0 ||
        *max_tokens_cap < 0 || *timeout < 0) {
        return fail(invalid_argument("--max-prompt-tokens, --max-tokens-cap and --request-timeout must be numbers >= 0"));
    }
    so.max_prompt_tokens = *max_prompt;
    so.max_tokens_limit = *max_tokens_cap;
    so.request_timeout_s = *timeout;
    so.default_max_tokens = *n_predict;
    so.sampling = sampling;
    if (args->has("--chat-template-file") && args->has("--chat-template")) {
        return fail(invalid_argument("give --chat-template or --chat-template-file, not both"));
    }
    if (auto f = args->get("--chat-template-file")) {
        auto text = read_file(*f);
        if (!text.has_value()) return fail(text.status());
        so.chat_template_override = *text;
    }
    if (auto t = args->get("--chat-template")) {
        auto src = chat_template_arg(*t);
        if (!src.has_value()) return fail(src.status());
        so.chat_template_override = *src;
    }
    auto template_kwargs = reasoning_kwargs(*args);
    if (!template_kwargs.has_value()) return fail(template_kwargs.status());
    so.embedding_only = args->has("--embedding");
    so.slots_endpoint = !args->has("--no-slots");
    so.webui = !args->has("--no-webui") && !args->has("--no-ui");
    // Vertex AI's custom-container variables, as llama-server reads them: AIP_MODE=PREDICTION
    // serves AIP_PREDICT_ROUTE (default /predict) on AIP_HTTP_PORT (default 8080).
    if (const char* mode = std::getenv("AIP_MODE"); mode && std::string(mode) == "PREDICTION") {
        const char* route = std::getenv("AIP_PREDICT_ROUTE");
        const char* health = std::getenv("AIP_HEALTH_ROUTE");
        const char* aip_port = std::getenv("AIP_HTTP_PORT");
        so.gcp.predict_route = route && *route ? route : "/predict";
        so.gcp.health_route = health ? health : "";
        for (const std::string& r : {so.gcp.predict_route, so.gcp.health_route}) {
            if (!r.empty() && r[0] != '/') return fail(invalid_argument("AIP_PREDICT_ROUTE and AIP_HEALTH_ROUTE must start with /"));
        }
        const std::string p = aip_port && *aip_port ? aip_port : "8080";
        char* end = nullptr;
        const long v = std::strtol(p.c_str(), &end, 10);
        if (*end != '\0' || v < 0 || v > 65535) return fail(invalid_argument("AIP_HTTP_PORT must be a port number"));
        if (static_cast<int>(v) != so.http.port) {
            std::fprintf(stderr, "ferrox: AIP_MODE=PREDICTION: port %d from AIP_HTTP_PORT replaces %d\n", static_cast<int>(v),
                         so.http.port);
        }
        so.http.port = static_cast<int>(v);
    }
    if (args->has("--state-dir")) {
        so.state_dir = *args->get("--state-dir");
        if (so.state_dir.empty()) return fail(invalid_argument("--state-dir needs a directory"));
    }
    if (args->has("--responses-store")) {
        so.responses_store_url = *args->get("--responses-store");
        if (so.responses_store_url.empty()) return fail(invalid_argument("--responses-store needs redis://HOST:PORT"));
        if (!so.state_dir.empty()) {
            return fail(invalid_argument("give --state-dir or --responses-store for stored Responses, not both"));
        }
    }
    {
        auto ttl = args->get_float("--responses-ttl", so.responses_ttl_s);
        auto max_n = args->get_int("--responses-max", static_cast<int>(so.responses_max_count));
        auto max_mib = args->get_int("--responses-max-mib", static_cast<int>(so.responses_max_bytes >> 20));
        if (!ttl.has_value() || !std::isfinite(*ttl) || *ttl < 0 || *ttl > 100.0 * 365 * 86400) {
            return fail(invalid_argument("--responses-ttl must be seconds in [0, 3153600000] (0: never expire)"));
        }
        if (!max_n.has_value() || *max_n < 1 || !max_mib.has_value() || *max_mib < 1 || *max_mib > (1 << 20)) {
            return fail(invalid_argument("--responses-max must be >= 1 and --responses-max-mib in [1, 1048576]"));
        }
        so.responses_ttl_s = *ttl;
        so.responses_max_count = static_cast<size_t>(*max_n);
        so.responses_max_bytes = static_cast<size_t>(*max_mib) << 20;
    }
    so.slot_save_path = args->get("--slot-save-path").value_or("");
    if (args->has("--slot-save-path")) {
        std::error_code ec;
        if (so.slot_save_path.empty()) return fail(invalid_argument("--slot-save-path needs a directory"));
        std::filesystem::create_directories(so.slot_save_path, ec);
        if (ec || !std::filesystem::is_directory(so.slot_save_path)) {
            return fail(invalid_argument("--slot-save-path " + so.slot_save_path + ": not a directory that can be created"));
        }
    }
    if (args->has("--slots") && args->has("--no-slots")) return fail(invalid_argument("--slots and --no-slots contradict each other"));
    for (const std::string& list : metrics_compat) {
        size_t i = 0;
        while (i <= list.size()) {
            const size_t comma = std::min(list.find(',', i), list.size());
            const std::string name = list.substr(i, comma - i);
            i = comma + 1;
            if (name == "llamacpp") {
                so.metrics_llamacpp = true;
            } else if (name == "vllm") {
                so.metrics_vllm = true;
            } else {
                return fail(invalid_argument("--metrics-compat takes llamacpp (llama-server's metric names) or vllm "
                                             "(vLLM's), repeated or comma-separated; not '" + name + "'"));
            }
        }
    }
    if (args->has("--metrics")) so.metrics_llamacpp = true;  // llama-server's command line: its names
    std::string pooling = args->get("--pooling").value_or("");
    if (pooling == "none" || pooling == "rank") {
        return fail(invalid_argument("--pooling " + pooling + ": ferrox serves pooled embeddings only (mean, cls or last)"));
    }
    if (!pooling.empty() && pooling != "mean" && pooling != "cls" && pooling != "last") {
        return fail(invalid_argument("--pooling must be none, mean, cls, last or rank (ferrox: mean, cls or last)"));
    }
    if (auto rf = args->get("--reasoning-format")) {
        if (*rf != "none" && *rf != "auto" && *rf != "deepseek") {
            return fail(invalid_argument("--reasoning-format must be auto or none"));
        }
        so.split_reasoning = *rf != "none";
    }
    if (auto rf = args->get("--reasoning-field")) {
        if (*rf == "reasoning_content") {
            so.reasoning_field = ReasoningField::kReasoningContent;
        } else if (*rf == "reasoning") {
            so.reasoning_field = ReasoningField::kReasoning;
        } else if (*rf == "both") {
            so.reasoning_field = ReasoningField::kBoth;
        } else {
            return fail(invalid_argument("--reasoning-field must be reasoning_content, reasoning or both"));
        }
    }

    // Signals are taken by sigwait() below, never delivered to a worker thread.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    // Every model gets the same options and its own KV pool (-c tokens or --kv-budget MiB).
    auto defaults = std::make_shared<ModelSpec>();
    ModelOptions& mo = defaults->model;
    mo.n_threads = *n_threads;
    // With --kv-budget the pool's size comes from memory, and -c (when given) only caps one
    // request's context.
    mo.max_ctx = *kv_budget > 0 && !args->has("-c") ? (1 << 17) : *n_ctx;
    mo.max_batch_tokens = *n_batch;
    mo.mmap = args->has("--mmap");
    mo.mmap_auto = !args->has("--no-mmap");
    mo.ggml_order = args->has("--ggml-order");
    EngineOptions& eo = defaults->engine;
    eo.n_parallel = *n_par;
    eo.n_ctx = *n_ctx;
    eo.kv_budget_mib = *kv_budget;
    eo.kv_type = *kv_type;
    eo.prefix_cache = !args->has("--no-prefix-cache");
    eo.cache_dir = args->get("--cache-dir").value_or("");
    eo.cache_disk_mib = *cache_disk;
    {
        const int64_t mem_mib = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE) >> 20;
        eo.cache_ram_mib = *cache_ram == -2 ? std::min<int64_t>(8192, mem_mib / 4) : *cache_ram == -1 ? mem_mib / 2 : *cache_ram;
    }
    eo.max_batch_tokens = *n_batch;
    eo.max_queue = *max_queue;
    eo.spec_ngram = *spec_ngram;
    eo.draft_max = *draft_max;
    defaults->served.chat_template_override = so.chat_template_override;
    defaults->served.prompt.split_reasoning = so.split_reasoning;
    defaults->served.prompt.default_template_kwargs = *template_kwargs;
    defaults->pooling = pooling;
    defaults->test_script = args->get("--test-script").value_or("");
    defaults->stand_in = scripted_stand_in;
    RegistryOptions ro;
    ro.max_memory_bytes = static_cast<int64_t>(*max_memory) << 20;
    ro.defaults = defaults;
    ro.default_model = args->get("--default-model").value_or("");
    if (!ro.default_model.empty()) {
        bool known = false;
        for (size_t i = 0; i < model_paths.size(); ++i) {
            LoadRequest lr;
            lr.path = model_paths[i];
            lr.alias = i < aliases.size() ? aliases[i] : "";
            known |= ModelRegistry::alias_of(lr) == ro.default_model;
        }
        if (!known) return fail(invalid_argument("--default-model " + ro.default_model + " is none of the models' names"));
    }
    if (so.embedding_only) {
        for (const auto& path : model_paths) {
            if (!is_encoder_checkpoint(path)) {
                return fail(invalid_argument("--embedding: " + path +
                                             " is not an embedding model; ferrox embeds with encoder checkpoints "
                                             "(a bert GGUF or a sentence-transformers directory)"));
            }
        }
    }
    auto registry = std::make_shared<ModelRegistry>(ro);

    auto server = ApiServer::start(so, registry);
    if (!server.has_value()) return fail(server.status());
    std::fprintf(stderr, "ferrox: listening on http://%s:%d (loading %zu model%s)\n", so.http.host.c_str(),
                 (*server)->port(), model_paths.size(), model_paths.size() == 1 ? "" : "s");
    for (size_t i = 0; i < model_paths.size(); ++i) {
        LoadRequest lr;
        lr.path = model_paths[i];
        lr.alias = i < aliases.size() ? aliases[i] : "";
        if (i == 0) lr.draft_path = args->get("--model-draft").value_or("");
        Status st = registry->load(lr, /*replace=*/false);
        if (!st.is_ok()) {
            (*server)->shutdown(0);
            return fail(st);
        }
        for (const ModelStatus& m : registry->list()) {
            if (m.id != ModelRegistry::alias_of(lr)) continue;

            if (m.kv_blocks_total == 0) {  // an embedding model: no KV pool
                std::fprintf(stderr, "ferrox: ready: model %s (embeddings)\n", m.id.c_str());
                continue;
            }
            std::fprintf(stderr,
                         "ferrox: ready: model %s, %d slots, KV %s %d blocks of %d tokens (%.1f MiB)%s%s%s\n",
                         m.id.c_str(), eo.n_parallel, kv_type_name(eo.kv_type), m.kv_blocks_total, eo.block_size,
                         static_cast<double>(m.kv_bytes) / (1 << 20), eo.prefix_cache ? ", prefix cache" : "",
                         m.draft_model.empty() ? "" : ", draft model ", m.draft_model.c_str());
        }
    }

    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == SIGTERM) drain(**server, sigs, *drain_timeout);
    std::fprintf(stderr, "ferrox: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    (*server)->shutdown(5000);  // cancels what is still running: each stream gets its end
    return 0;
}

void print_usage() {
    std::printf(
        "usage: ferrox <command> [options]\n"
        "  serve     serve a model over HTTP: OpenAI and llama.cpp routes (ferrox serve -h)\n"
        "  run       generate text from a prompt (ferrox run -h)\n"
        "  tokenize  print the token ids of a text (ferrox tokenize -h)\n"
        "  bench     prompt and generation speed, as llama-bench (ferrox bench -h)\n");
}

}  // namespace
}  // namespace ferrox::cli

int main(int argc, char** argv) {
    using namespace ferrox::cli;
    if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        print_usage();
        return argc < 2 ? 1 : 0;
    }
    const std::string cmd = argv[1];
    // A file-size limit (ulimit -f) makes a write fail with EFBIG instead of killing the process:
    // the prompt cache on disk then shrinks, and serving goes on.
    ::signal(SIGXFSZ, SIG_IGN);
    if (cmd == "serve") return cmd_serve(argc, argv);
    if (cmd == "run") return cmd_run(argc, argv);
    if (cmd == "tokenize") return cmd_tokenize(argc, argv);
    if (cmd == "bench") return cmd_bench(argc, argv);
    std::fprintf(stderr, "error: unknown command '%s'\n", cmd.c_str());
    print_usage();
    return 1;
}

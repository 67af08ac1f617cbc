#pragma once
// The models a server holds, by alias, each in generations: loading one under an alias that
// exists (replace) makes a new generation; requests reach a model only by acquire(), a lease
// (shared pin) of one generation that they hold to their last event. A replaced or unloaded
// generation drains: its running requests finish on it, new ones go to the new generation,
// and once nobody but the registry holds it, the reaper thread shuts its engine down and
// frees it, never one of its own engine callbacks. KV pools are per generation, so blocks
// and prefix-cache entries never cross models or generations.
//
// KV budget: every model has its own pool, sized by its ModelSpec (-c tokens, or
// --kv-budget MiB); the memory in use is the sum over models, checked against max_memory.
//
// Threading: every method may be called from any thread. Loads run on their own thread.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/served_model.h"

namespace ferrox {

struct ModelSpec;  // engine/model_spec.h: everything a load needs (the CLI's flags)

// One model to load: a checkpoint and its alias, and what may differ from the defaults.
struct LoadRequest {
    std::string path;
    std::string alias;        // empty: the file stem
    int n_ctx = 0;            // > 0: this model's KV pool in tokens
    int n_parallel = 0;       // > 0: its slots
    std::string draft_path;   // a draft model for speculative decoding; empty: none
    std::string test_script;  // tests only: replay scripted answers (scripted_model.h)
};
enum class ModelState { kLoading, kReady, kDraining };
const char* model_state_name(ModelState s);  // "loading", "ready", "draining"

struct ModelStatus {
    std::string id, path;
    std::string draft_model;  // the draft model's file, or empty (none, or loading)
    ModelState state = ModelState::kLoading;
    uint64_t generation = 0;
    int64_t weight_bytes = 0, kv_bytes = 0;
    int kv_blocks_used = 0, kv_blocks_total = 0;
    int n_running = 0, n_waiting = 0;
};

struct RegistryOptions {
    int64_t max_memory_bytes = 0;  // weights + KV of every model; 0: no limit
    // A request naming no served model goes to this alias (--default-model); empty: to the one
    // model of the kind it needs when there is just one (llama-server's rule), else kNotFound.
    std::string default_model;
    std::shared_ptr<const ModelSpec> defaults;  // model, engine and prompt options of every load
};

class ModelRegistry {
  public:
    explicit ModelRegistry(RegistryOptions options = {});
    ~ModelRegistry();  // shutdown()

    // Loads and registers on the calling thread. kAlreadyExists when the alias is taken and
    // !replace; load errors are the loader's one-line message; nothing changes on failure.
    Status load(const LoadRequest& req, bool replace);
    // The same on a thread of its own; `done` runs there when it ends. The alias shows as
    // loading in list() meanwhile. Fails at once (and `done` never runs) for a taken alias.
    Status load_async(const LoadRequest& req, bool replace, std::function<void(Status)> done);
    // The alias a load will register: the request's, or the file stem.
    static std::string alias_of(const LoadRequest& req);
    // The alias stops taking requests; its generation drains. kNotFound if unknown.
    Status unload(const std::string& alias);

    // The model a request names ("" : the first loaded). kNotFound (unknown name) or
    // kUnavailable (nothing ready yet).
    Expected<ModelLease> acquire(const std::string& name) const;
    // The same, but "" means the first ready model of `default_kind` (else the first ready), and
    // a name no model has is served as llama-server serves it: by the --default-model alias,
    // or, when there is just one ready model of `default_kind` (and at most one of the other
    // kind), by that one (clients with a fixed model name, such as Claude Code's, work as they
    // are); with several models of that kind it stays kNotFound.
    Expected<ModelLease> acquire(const std::string& name, std::optional<ModelKind> default_kind) const;
    std::vector<ModelLease> ready() const;    // in load order
    std::vector<ModelStatus> list() const;    // ready, loading and draining ones
    bool any_ready() const;
    bool any_loading() const;

    // Cancels everything, shuts every engine down, joins the loads and the reaper. Idempotent.
    void shutdown();

  private:
    ModelLease fallback(ModelKind kind) const;
    struct Entry {
        std::string alias;
        ModelLease current;        // null while the first generation loads
        uint64_t generation = 0;
        bool loading = false;      // a load for this alias is running
        std::string loading_path;
    };
    struct Draining {
        ModelLease model;
        uint64_t generation = 0;
    };
    ModelSpec spec_for(const LoadRequest& req) const;
    Status reserve(const std::string& alias, bool replace, const std::string& path);
    Status finish_load(const std::string& alias, Expected<ModelLease> m);
    int64_t memory_in_use_locked() const;
    void reap_loop();

    RegistryOptions options_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::list<Entry> entries_;  // load order
    std::list<Draining> draining_;
    std::vector<std::thread> loaders_;
    bool stopping_ = false;
    std::chrono::steady_clock::time_point stop_deadline_;
    std::thread reaper_;
};


}  // namespace ferrox

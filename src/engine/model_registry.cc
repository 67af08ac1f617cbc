#include "engine/model_registry.h"

#include <chrono>
#include <filesystem>

#include <malloc.h>

#include "core/log.h"
#include "engine/embedder.h"
#include "engine/model_spec.h"

namespace ferrox {

const char* model_state_name(ModelState s) {
    switch (s) {
        case ModelState::kLoading: return "loading";
        case ModelState::kReady: return "ready";
        case ModelState::kDraining: return "draining";
    }
    return "?";
}

namespace {

// An encoder checkpoint (a safetensors directory or a bert GGUF) as an embedding model.
Expected<ModelLease> load_served_encoder(const ModelSpec& spec) {
    EncoderOptions eo;
    eo.n_threads = spec.model.n_threads;
    if (spec.pooling == "mean") eo.pooling = Pooling::kMean;
    if (spec.pooling == "cls") eo.pooling = Pooling::kCls;
    if (spec.pooling == "last") eo.pooling = Pooling::kLast;
    auto enc = load_encoder(spec.path, eo);
    if (!enc.has_value()) return enc.status();
    ServedModelOptions so = spec.served;
    if (so.alias.empty()) so.alias = spec.alias;
    return ServedModel::create_embedding(std::make_unique<Embedder>(std::move(*enc), spec.engine.max_queue), so);
}

}  // namespace

Expected<ModelLease> load_served_model(const ModelSpec& spec) {
    if (spec.test_script.empty() && is_encoder_checkpoint(spec.path)) return load_served_encoder(spec);
    auto loaded = load_model(spec.path, spec.model);
    if (!loaded.has_value()) return loaded.status();
    LoadedModel& lm = **loaded;
    if (!spec.alias.empty()) lm.name = spec.alias;
    if (!spec.test_script.empty()) {
        // Tests only: the engine runs the scripted stand-in (same limits and KV geometry).
        if (!spec.stand_in) return invalid_argument("this build cannot run a test script");
        auto stand_in = spec.stand_in(lm, spec.test_script);
        if (!stand_in.has_value()) return stand_in.status();
        lm.stand_in = std::move(*stand_in);
    }
    std::shared_ptr<LoadedModel> draft;
    int64_t draft_bytes = 0;
    if (!spec.draft_path.empty() && spec.engine.draft_max == 0) {
        // Nothing would ever be drafted: do not spend the draft model's memory and load time.
        FERROX_LOG_WARN("--draft-max 0: speculation is off, draft model %s not loaded", spec.draft_path.c_str());
    } else if (!spec.draft_path.empty()) {
        if (!spec.test_script.empty()) return invalid_argument("a scripted model takes no draft model");
        auto d = load_model(spec.draft_path, spec.model);
        if (!d.has_value()) return d.status();
        draft = std::move(*d);
        std::error_code ec;
        const auto n = std::filesystem::file_size(spec.draft_path, ec);
        draft_bytes = ec ? 0 : static_cast<int64_t>(n);
    }
    auto engine = Engine::create(*loaded, spec.engine, std::move(draft));
    if (!engine.has_value()) return engine.status();
    ServedModelOptions so = spec.served;
    if (so.alias.empty()) so.alias = spec.alias;
    std::error_code ec;
    const auto file_bytes = std::filesystem::file_size(spec.path, ec);
    auto m = ServedModel::create(std::move(*engine), so);
    if (!m.has_value()) return m.status();
    (*m)->set_weight_bytes((ec ? 0 : static_cast<int64_t>(file_bytes)) + draft_bytes);
    return m;
}

ModelRegistry::ModelRegistry(RegistryOptions options) : options_(options) {
    reaper_ = std::thread([this] { reap_loop(); });
}

ModelRegistry::~ModelRegistry() { shutdown(); }

int64_t ModelRegistry::memory_in_use_locked() const {
    int64_t n = 0;
    for (const Entry& e : entries_) {
        if (e.current) n += e.current->info().weight_bytes + e.current->info().kv_bytes;
    }
    for (const Draining& d : draining_) n += d.model->info().weight_bytes + d.model->info().kv_bytes;
    return n;
}

Status ModelRegistry::reserve(const std::string& alias, bool replace, const std::string& path) {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return unavailable("the server is shutting down");
    for (Entry& e : entries_) {
        if (e.alias != alias) continue;
        if (e.loading) return already_exists("model '" + alias + "' is already loading");
        if (!replace) return already_exists("model '" + alias + "' is already loaded (give \"replace\": true to swap it)");
        e.loading = true;
        e.loading_path = path;
        return Status::ok();
    }
    entries_.push_back({.alias = alias, .loading = true, .loading_path = path});
    return Status::ok();
}

Status ModelRegistry::finish_load(const std::string& alias, Expected<ModelLease> m) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = entries_.begin();
    while (it != entries_.end() && it->alias != alias) ++it;
    if (it == entries_.end()) return internal_error("model registry: lost the entry of '" + alias + "'");
    it->loading = false;
    Status result = Status::ok();
    if (m.has_value() && options_.max_memory_bytes > 0) {
        // The old generation keeps its memory while it drains: count it.
        const int64_t need = (*m)->info().weight_bytes + (*m)->info().kv_bytes;
        const int64_t in_use = memory_in_use_locked();
        if (in_use + need > options_.max_memory_bytes) {
            result = Status(StatusCode::kResourceExhausted,
                            "model '" + alias + "' needs " + std::to_string(need >> 20) + " MiB (weights + KV) and " +
                                std::to_string(in_use >> 20) + " MiB are in use: over --max-memory " +
                                std::to_string(options_.max_memory_bytes >> 20) + " MiB");
            draining_.push_back({std::move(*m), 0});  // the reaper frees it
        }
    } else if (!m.has_value()) {
        result = m.status();
    }
    if (!result.is_ok() || stopping_) {
        if (!it->current) entries_.erase(it);  // a first load that failed leaves nothing
        if (result.is_ok()) result = unavailable("the server is shutting down");
        if (m.has_value() && result.code() == StatusCode::kUnavailable) draining_.push_back({std::move(*m), 0});
        cv_.notify_all();
        return result;
    }
    if (it->current) draining_.push_back({std::move(it->current), it->generation});
    (*m)->set_generation(++it->generation);  // before any other thread can see it
    it->current = std::move(*m);
    cv_.notify_all();
    return Status::ok();
}

std::string ModelRegistry::alias_of(const LoadRequest& req) {
    if (!req.alias.empty()) return req.alias;
    std::string p = req.path;
    while (p.size() > 1 && p.back() == '/') p.pop_back();  // a checkpoint directory
    std::string a = std::filesystem::path(p).filename().string();
    const std::string ext = ".gguf";
    if (a.size() > ext.size() && a.ends_with(ext)) a.resize(a.size() - ext.size());
    return a;
}

ModelSpec ModelRegistry::spec_for(const LoadRequest& req) const {
    ModelSpec spec = options_.defaults ? *options_.defaults : ModelSpec{};
    spec.path = req.path;
    spec.alias = alias_of(req);
    if (req.n_ctx > 0) {
        spec.engine.n_ctx = req.n_ctx;
        spec.engine.kv_budget_mib = 0;
        spec.model.max_ctx = req.n_ctx;
    }
    if (req.n_parallel > 0) spec.engine.n_parallel = req.n_parallel;
    spec.draft_path = req.draft_path;
    if (!req.test_script.empty()) spec.test_script = req.test_script;
    spec.served.alias = spec.alias;
    return spec;
}

Status ModelRegistry::load(const LoadRequest& req, bool replace) {
    ModelSpec spec = spec_for(req);
    if (Status st = reserve(spec.alias, replace, spec.path); !st.is_ok()) return st;
    return finish_load(spec.alias, load_served_model(spec));
}

Status ModelRegistry::load_async(const LoadRequest& req, bool replace, std::function<void(Status)> done) {
    ModelSpec spec = spec_for(req);
    if (Status st = reserve(spec.alias, replace, spec.path); !st.is_ok()) return st;
    std::lock_guard<std::mutex> lk(mu_);
    loaders_.emplace_back([this, spec = std::move(spec), done = std::move(done)] {
        Status st = finish_load(spec.alias, load_served_model(spec));
        if (done) done(st);
    });
    return Status::ok();
}

Status ModelRegistry::unload(const std::string& alias) {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->alias != alias || !it->current) continue;
        if (it->loading) return already_exists("model '" + alias + "' is loading; unload it when it is ready");
        draining_.push_back({std::move(it->current), it->generation});
        entries_.erase(it);
        cv_.notify_all();
        return Status::ok();
    }
    return not_found("no model '" + alias + "' is loaded");
}

// The model that serves a name no model has (mu_ held): the --default-model alias when it is
// ready, else the one ready model of `kind` when the others are at most one of the other kind.
ModelLease ModelRegistry::fallback(ModelKind kind) const {
    if (!options_.default_model.empty()) {
        for (const Entry& e : entries_) {
            if (e.alias == options_.default_model && e.current) return e.current;
        }
        return nullptr;
    }
    ModelLease only;
    int n_kind = 0, n_other = 0;
    for (const Entry& e : entries_) {
        if (!e.current) continue;
        if (e.current->kind() == kind) {
            only = e.current;
            ++n_kind;
        } else {
            ++n_other;
        }
    }
    return n_kind == 1 && n_other <= 1 ? only : nullptr;
}

Expected<ModelLease> ModelRegistry::acquire(const std::string& name) const {
    return acquire(name, std::nullopt);
}

Expected<ModelLease> ModelRegistry::acquire(const std::string& name, std::optional<ModelKind> default_kind) const {
    std::lock_guard<std::mutex> lk(mu_);
    if (name.empty() && default_kind) {
        for (const Entry& e : entries_) {
            if (e.current && e.current->kind() == *default_kind) return e.current;
        }
    }
    bool any_loading = false;
    for (const Entry& e : entries_) {
        any_loading |= e.loading;
        if (!e.current) continue;
        if (name.empty() || name == e.alias || name == e.current->info().id || name == e.current->info().path) {
            return e.current;
        }
    }
    if (name.empty() || (any_loading && entries_.size() == 1 && !entries_.front().current)) {
        return unavailable("no model is ready yet");
    }
    for (const Entry& e : entries_) {
        if (e.alias == name) return unavailable("the model '" + name + "' is still loading");
    }
    if (ModelLease m = fallback(default_kind.value_or(ModelKind::kGenerate))) return m;
    std::string served;
    for (const Entry& e : entries_) {
        if (e.current) served += (served.empty() ? "'" : ", '") + e.alias + "'";
    }
    return not_found("The model '" + name + "' does not exist. This server serves " + (served.empty() ? "none" : served) + ".");
}

std::vector<ModelLease> ModelRegistry::ready() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<ModelLease> out;
    for (const Entry& e : entries_) {
        if (e.current) out.push_back(e.current);
    }
    return out;
}

std::vector<ModelStatus> ModelRegistry::list() const {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<ModelStatus> out;
    auto status_of = [](const ModelLease& m, ModelState state, uint64_t gen) {
        ModelStatus s;
        s.id = m->info().id;
        s.path = m->info().path;
        s.draft_model = m->info().draft_model;
        s.state = state;
        s.generation = gen;
        s.weight_bytes = m->info().weight_bytes;
        s.kv_bytes = m->info().kv_bytes;
        const ServedModel::Load l = m->load();
        s.kv_blocks_used = l.kv_blocks_used;
        s.kv_blocks_total = l.kv_blocks_total;
        s.n_running = l.n_running;
        s.n_waiting = l.n_waiting;
        return s;
    };
    for (const Entry& e : entries_) {
        if (e.current) out.push_back(status_of(e.current, ModelState::kReady, e.generation));
        if (e.loading) {
            ModelStatus s;
            s.id = e.alias;
            s.path = e.loading_path;
            s.state = ModelState::kLoading;
            s.generation = e.generation + 1;
            out.push_back(s);
        }
    }
    for (const Draining& d : draining_) {
        if (d.generation > 0) out.push_back(status_of(d.model, ModelState::kDraining, d.generation));
    }
    return out;
}

bool ModelRegistry::any_ready() const {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Entry& e : entries_) {
        if (e.current) return true;
    }
    return false;
}

bool ModelRegistry::any_loading() const {
    std::lock_guard<std::mutex> lk(mu_);
    for (const Entry& e : entries_) {
        if (e.loading) return true;
    }
    return false;
}

void ModelRegistry::reap_loop() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        // A drained generation is one that only the registry still holds: no request can reach
        // it again (it left entries_), so when its count is 1 nobody else will take it.
        std::vector<ModelLease> done;
        for (auto it = draining_.begin(); it != draining_.end();) {
            if (it->model.use_count() == 1) {
                done.push_back(std::move(it->model));
                it = draining_.erase(it);
            } else {
                ++it;
            }
        }
        if (!done.empty()) {
            lk.unlock();
            for (ModelLease& m : done) {
                FERROX_LOG_INFO("model %s drained: engine shut down", m->info().id.c_str());
                m->shutdown();
                m.reset();
            }
            // Give the freed heap back to the system now, so a swap leaves memory where one
            // model puts it (glibc keeps freed chunks otherwise).
            malloc_trim(0);
            lk.lock();
            continue;
        }
        if (stopping_) {
            // Leases of requests still winding down after their engines stopped; give them
            // a moment, then let go (the engines are already shut down).
            if (draining_.empty() || std::chrono::steady_clock::now() > stop_deadline_) return;
        }
        cv_.wait_for(lk, std::chrono::milliseconds(50));
    }
}

void ModelRegistry::shutdown() {
    std::vector<std::thread> loaders;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stopping_ && !reaper_.joinable()) return;
        stopping_ = true;
        stop_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        loaders.swap(loaders_);
    }
    for (auto& t : loaders) t.join();
    std::vector<ModelLease> all;
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (Entry& e : entries_) {
            if (e.current) all.push_back(e.current);
        }
        for (Draining& d : draining_) all.push_back(d.model);
    }
    for (auto& m : all) m->shutdown();  // cancels: every request gets its last event
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (Entry& e : entries_) {
            if (e.current) draining_.push_back({std::move(e.current), e.generation});
        }
        entries_.clear();
    }
    all.clear();
    cv_.notify_all();
    if (reaper_.joinable()) reaper_.join();
}

}  // namespace ferrox

#include "engine/engine.h"

namespace ferrox {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
        case FinishReason::kStop: return "stop";
        case FinishReason::kLength: return "length";
        case FinishReason::kCancelled: return "cancelled";
        case FinishReason::kError: return "error";
    }
    return "error";
}

Expected<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<LoadedModel> model, const EngineOptions& opts,
                                                 std::shared_ptr<LoadedModel> draft) {
    FERROX_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::create(std::move(model), opts, std::move(draft)));
    std::unique_ptr<Engine> e(new Engine(std::move(core)));
    e->thread_ = std::thread([p = e.get()] { p->run(); });
    return e;
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

Expected<std::shared_ptr<RequestHandle>> Engine::submit(std::vector<int32_t> prompt, GenerationParams params,
                                                        EventSink sink) {
    FERROX_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> s,
                            core_->make_sequence(std::move(prompt), std::move(params), std::move(sink)));
    auto handle = s->handle;
    EngineMetrics& m = core_->metrics();
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) return Status(StatusCode::kCancelled, "the server is shutting down");
        FERROX_RETURN_IF_ERROR(core_->check_queue());  // counts incoming_ and the core's queue
        incoming_.push_back(std::move(s));
        m.n_waiting.fetch_add(1);
    }
    cv_.notify_one();
    return handle;
}

void Engine::run() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            // The core belongs to this thread; asking it here is safe.
            cv_.wait(lk, [&] { return stop_ || !incoming_.empty() || core_->has_work(); });
            if (stop_) break;
            while (!incoming_.empty()) {
                core_->enqueue(std::move(incoming_.front()));
                incoming_.pop_front();
            }
        }
        core_->step();
    }
    // Shutdown: every request still known gets its kDone.
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& s : incoming_) core_->enqueue(std::move(s));
    incoming_.clear();
    core_->cancel_all();
}

}  // namespace ferrox

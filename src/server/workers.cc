#include "server/workers.h"

#include <exception>

#include "core/log.h"

namespace ferrox {

Workers::Workers(int n_threads) {
    for (int i = 0; i < std::max(1, n_threads); ++i) threads_.emplace_back([this] { loop(); });
}

Workers::~Workers() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void Workers::post(std::function<void()> task) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
}

void Workers::loop() {
    for (;;) {
        std::function<void()> task;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
            if (tasks_.empty()) return;  // stop_ and drained
            task = std::move(tasks_.front());
            tasks_.pop_front();
        }
        try {
            task();
        } catch (const std::exception& e) {
            // A task's own responder answers 500 when it is dropped unanswered.
            FERROX_LOG_ERROR("server task failed: %s", e.what());
        }
    }
}

}  // namespace ferrox

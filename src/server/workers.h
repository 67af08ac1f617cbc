#pragma once
// The server's CPU threads: request parsing, chat templates, tokenization, and turning engine
// events into protocol events all run here, never on an I/O thread (a multi-megabyte prompt
// must not stall other clients' sockets) and never on the engine thread (its callback only
// queues).
//
// Threading: post() from any thread; tasks run in FIFO order on n threads (so two tasks may
// run at once: callers that need order serialize themselves, as Generation's mailbox does).

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ferrox {

class Workers {
  public:
    explicit Workers(int n_threads);
    ~Workers();  // runs what is queued, then joins
    Workers(const Workers&) = delete;
    Workers& operator=(const Workers&) = delete;

    void post(std::function<void()> task);

  private:
    void loop();
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> tasks_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace ferrox

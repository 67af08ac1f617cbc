#pragma once
// llama-server's slots, as GET /slots reports them: each model's -np parallel sequences, which
// are busy, with the request's sampling settings and its progress. ferrox's engine has no fixed
// slots (a running sequence holds KV blocks, not a slot), so the board keeps the view itself:
// every generating request passes through run_generation, which wraps its sink with track();
// a choice takes the lowest free slot of its model when submitted (or waits, as a deferred task
// does in llama-server, until one frees) and gives it back when it ends or its client goes.
// A free slot keeps what its last request showed, as llama-server's task_prev does. A request's
// id_slot puts its first choice on that slot (modulo -np, as llama-server wraps it); while the
// slot is busy it waits for that slot, as llama-server defers the task.
//
// Threading: any thread; one mutex (taken per generated token of a tracked request).

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "server/generation.h"

namespace ferrox {

class SlotBoard {
  public:
    struct Slot {
        bool busy = false;
        bool used = false;      // has ever served a request (it shows that request's state)
        uint64_t id_task = 0;
        int n_prompt = 0;
        int n_decoded = 0;
        int max_tokens = -1;    // -1: until the end
        bool has_new_line = false;
        bool stream = false;
        int n_probs = 0;
        SamplingParams sampling;
        std::vector<std::string> stop;
        bool ignore_eos = false;
        std::chrono::steady_clock::time_point t_enter, t_first;  // t_first: of the first token
        // With keep_tokens(): the prompt, then every generated token (llama-server's
        // slot->prompt.tokens, what POST /slots/{id}?action=save writes).
        std::vector<int32_t> tokens;
    };

    // Wraps `sink` so that the job's choices occupy slots of its model (job.model) until they
    // end; the returned sink forwards every call.
    std::unique_ptr<GenerationSink> track(const GenerationJob& job, std::unique_ptr<GenerationSink> sink);

    // The slots of `model` (n_parallel of them), for GET /slots.
    std::vector<Slot> snapshot(const std::string& model, int n_parallel);

    // --slot-save-path: slots keep their tokens (set once, before serving).
    void keep_tokens(bool on) { keep_tokens_ = on; }
    bool keeps_tokens() const { return keep_tokens_; }

    // POST /slots/{id}?action=...: kInvalidArgument for an id outside [0, n_parallel),
    // kFailedPrecondition while the slot runs a request. save: the tokens whose KV the slot
    // holds (its prompt and generated tokens but the last, which was sampled, never computed);
    // restore: the slot shows `tokens` as if a request had left them; erase: the slot forgets
    // its tokens, returning how many it had.
    Expected<std::vector<int32_t>> slot_tokens(const std::string& model, int n_parallel, int id);
    Status restore(const std::string& model, int n_parallel, int id, std::vector<int32_t> tokens);
    Expected<size_t> erase(const std::string& model, int n_parallel, int id);

    // Wall time of the tracked requests, summed over models, as llama-server's /metrics counts
    // it: prompt time from submit to the first token (queueing included: ferrox has no
    // separate admission moment to start from), generation time from there to the end.
    struct Timing {
        double prompt_s = 0, predicted_s = 0;
        uint64_t prompt_tokens = 0, predicted_tokens = 0;  // the tokens those times were spent on
        int n_tokens_max = 0;                              // longest prompt + generation seen
    };
    // The totals, and the window since the previous call (llama-server's gauges average over
    // the time between two scrapes); the window restarts.
    void timing(Timing* total, Timing* window);

  private:
    struct Waiting {
        uint64_t key;
        Slot slot;
        int want = -1;  // the slot it asked for (id_slot), or -1: the first that frees
    };
    struct Model {
        std::vector<Slot> slots;
        std::vector<uint64_t> owner;  // per slot: the key holding it (0: free)
        std::deque<Waiting> waiting;
    };
    friend class SlotTracker;
    // want: the slot asked for (llama.cpp's id_slot, already within [0, n_parallel)), or -1.
    uint64_t enter(const std::string& model, int n_parallel, const Slot& s, int want);
    void on_token(const std::string& model, uint64_t key, int32_t id);
    void on_text(const std::string& model, uint64_t key, bool new_line);
    void leave(const std::string& model, uint64_t key);
    void account(double prompt_s, double predicted_s, int n_prompt, int n_decoded);
    Slot* find(Model& m, uint64_t key);
    Expected<Slot*> idle_slot(const std::string& model, int n_parallel, int id);  // mu_ held

    std::mutex mu_;
    std::map<std::string, Model> models_;
    Timing total_, window_;
    uint64_t next_key_ = 1;
    bool keep_tokens_ = false;
};

// The slot file of POST /slots/{id}?action=save|restore (ferrox's format, not llama.cpp's KV
// state): magic "FXSLOT01", u32 n_vocab, u32 n_tokens, then n_tokens little-endian i32 ids.
// The KV is not in the file: a restore submits the tokens as a prompt-only request, so the
// prefix cache takes them back from wherever it still holds their blocks (the pool, the
// --cache-ram tier, --cache-dir) and computes the rest.
std::string slot_file_encode(int n_vocab, std::span<const int32_t> tokens);
// kInvalidArgument for a file that is not one (magic, size), another vocabulary's, or with
// ids outside it.
Expected<std::vector<int32_t>> slot_file_decode(std::string_view bytes, int n_vocab);

}  // namespace ferrox

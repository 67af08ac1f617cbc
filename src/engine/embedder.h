#pragma once
// An encoder-only checkpoint served for embeddings: the loaded encoder (model + tokenizer) and
// one thread that batches queued requests into encoder forwards. Inputs of many requests that
// arrive together share one forward (up to the model's max_batch_tokens); a large request may
// span several. The server reaches it only through ServedModel::embed().
//
// Threading: submit() and shutdown() from any thread; `done` runs on the embedder thread and
// must only queue (post to a worker).

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "loader/gguf.h"
#include "model/encoder.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

struct LoadedEncoder {
    std::string path;
    std::string name;  // the directory or file stem
    std::unique_ptr<GgufFile> gguf;  // when loaded from GGUF (owns the mapping the weights came from)
    std::unique_ptr<EncoderModel> model;
    std::unique_ptr<Tokenizer> tokenizer;
};

// Whether `path` is an encoder checkpoint: a directory with config.json, or a GGUF whose
// general.architecture is bert (the GGUF is opened to read it).
bool is_encoder_checkpoint(const std::string& path);

// A safetensors directory (config.json, tokenizer.json, weights, sentence-transformers
// modules) or a bert GGUF. Errors are one line naming the file.
Expected<std::unique_ptr<LoadedEncoder>> load_encoder(const std::string& path, const EncoderOptions& opts);

// (status, vectors): n_inputs x dim floats, pooled and normalized as the model says.
using EmbedDone = std::function<void(Status, std::vector<float>)>;

class Embedder {
  public:
    explicit Embedder(std::unique_ptr<LoadedEncoder> enc, size_t max_queue = 1024);
    ~Embedder();  // shutdown()

    const LoadedEncoder& encoder() const { return *enc_; }
    // Each input 1..hparams().max_tokens ids (the server checks; the encoder refuses others).
    // kResourceExhausted when max_queue requests wait, kUnavailable after shutdown.
    Status submit(std::vector<std::vector<int32_t>> inputs, EmbedDone done);
    // Fails what is queued (kUnavailable) and joins the thread. Idempotent.
    void shutdown();

    struct Stats {
        int64_t n_requests = 0, n_inputs = 0, n_tokens = 0, n_forwards = 0;
        int n_waiting = 0;
    };
    Stats stats() const;

  private:
    struct Job {
        std::vector<std::vector<int32_t>> inputs;
        EmbedDone done;
        std::vector<float> out;
        size_t n_next = 0;  // inputs handed to a forward so far
        size_t n_done = 0;
        Status status = Status::ok();
    };
    void loop();

    std::unique_ptr<LoadedEncoder> enc_;
    size_t max_queue_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stop_ = false;
    Stats stats_;
    std::thread thread_;
};

}  // namespace ferrox

#pragma once
// What the server holds of one model: its engine (scheduler thread, KV pool, prefix cache),
// its prompt builder and what clients may know of it (ModelInfo). A request takes a
// ModelLease, a shared pin of one ServedModel, once, and holds it until its last event, so a
// swap can never mix two checkpoints into one answer. Everything below (the loaded model,
// tokenizer, hyperparameters, KV details) stays behind this interface: the server includes
// this header, never engine.h or model headers.
//
// Threading: every method may be called from any thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/prompt.h"
#include "engine/request.h"

namespace ferrox {

class Engine;
class Embedder;
class Tokenizer;

// What a model serves: text generation (a decoder with its engine) or embeddings (an encoder
// with its embedder). Routes ask for one kind; the other is a 400 (ServerContext::acquire).
enum class ModelKind { kGenerate, kEmbed };
const char* model_kind_name(ModelKind k);  // "generate", "embed"

// (status, vectors): one vector of ModelInfo::n_embd floats per input, in order.
using EmbedCallback = std::function<void(Status, std::vector<float>)>;

struct ModelInfo {
    std::string id;          // what clients name it by (alias or file stem)
    std::string path;        // the checkpoint file
    std::string arch;        // general.architecture
    int64_t created = 0;     // Unix seconds when it was loaded
    int n_ctx = 0;           // the longest context (prompt + answer) one request can get
    int n_ctx_train = 0, n_vocab = 0, n_embd = 0, n_layer = 0;
    // The engine's settings, for /props and /metrics.
    std::string kv_type;
    int kv_block_size = 0, kv_blocks = 0, n_parallel = 0;
    int n_threads = 0;          // the forward pass's threads (0: a model without a pool of its own)
    int64_t kv_bytes = 0;
    bool prefix_cache = true;
    int64_t weight_bytes = 0;   // the checkpoint's size (its weights' memory, near enough)
    uint64_t generation = 0;    // which load of its alias this is (the registry counts)
    std::string chat_template;  // the source in use (the override, the model's, or ChatML)
    std::string tool_format;    // the tool-call family parsed from answers
    std::string draft_model;    // the draft model's file (speculative decoding), or empty
    ModelKind kind = ModelKind::kGenerate;
    // Embedding models: n_embd is the vector's size, n_ctx the longest input in tokens.
    std::string pooling;        // "mean", "cls", "last"
    bool normalize = false;     // vectors are L2-normalized
    bool matryoshka = false;    // vectors may be cut to fewer dimensions (and renormalized)
};

struct ServedModelOptions {
    std::string alias;                   // replaces the file stem as the id
    std::string chat_template_override;  // replaces the model's template when not empty
    PromptOptions prompt;
};

class ServedModel {
  public:
    static Expected<std::shared_ptr<ServedModel>> create(std::unique_ptr<Engine> engine,
                                                         const ServedModelOptions& options);
    // An embedding model (kind kEmbed): no engine, no prompt builder; submit() refuses.
    static Expected<std::shared_ptr<ServedModel>> create_embedding(std::unique_ptr<Embedder> embedder,
                                                                   const ServedModelOptions& options);
    ~ServedModel();

    const ModelInfo& info() const { return info_; }
    // The registry's, before the model is published to other threads.
    void set_weight_bytes(int64_t n) { info_.weight_bytes = n; }
    void set_generation(uint64_t g) { info_.generation = g; }
    ModelKind kind() const { return info_.kind; }
    // Generation models only (routes acquire them by kind).
    const PromptBuilder& prompt() const;

    // As Engine::submit: kInvalidArgument for a prompt that cannot fit, kResourceExhausted
    // when the queue is full. `sink` runs on the engine thread and must only queue.
    Expected<std::shared_ptr<RequestHandle>> submit(std::vector<int32_t> prompt,
                                                    GenerationParams params, EventSink sink);

    // Embedding models only: every input 1..info().n_ctx token ids. `done` runs on the
    // embedder's thread and must only queue. kResourceExhausted when its queue is full.
    Status embed(std::vector<std::vector<int32_t>> inputs, EmbedCallback done);

    std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
    std::string detokenize(std::span<const int32_t> ids, bool special = true) const;
    // The bytes of one token (control tokens' text only when `special`).
    std::string token_piece(int32_t id, bool special = false) const;
    int n_vocab() const { return info_.n_vocab; }

    struct Load {
        int n_running = 0, n_waiting = 0, kv_blocks_used = 0, kv_blocks_total = 0;
    };
    Load load() const;
    std::string prometheus() const;  // the engine's /metrics text
    // Cancels every request (each gets its last event) and stops the engine thread.
    void shutdown();

  private:
    ServedModel() = default;
    const Tokenizer& tokenizer() const;
    std::unique_ptr<Engine> engine_;      // generation models
    std::unique_ptr<Embedder> embedder_;  // embedding models
    std::unique_ptr<PromptBuilder> prompt_;
    ModelInfo info_;
};

using ModelLease = std::shared_ptr<ServedModel>;

}  // namespace ferrox

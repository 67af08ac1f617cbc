#pragma once
// Everything one model load needs, from the command line (or an admin request on top of it).
// Apart from model_registry.h so that the server never includes the engine's own headers.

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/served_model.h"

namespace ferrox {

struct ModelSpec {
    std::string path;
    std::string alias;        // empty: the file stem
    ModelOptions model;       // threads, max_ctx, batch, mmap
    EngineOptions engine;     // slots, KV pool, prefix cache, queue
    ServedModelOptions served;
    // A draft model for speculative decoding (same vocabulary), loaded with `model`'s options;
    // empty: prompt lookup drafts.
    std::string draft_path;
    // Embedding models: "mean", "cls" or "last" replaces the checkpoint's pooling (llama-server's
    // --pooling); empty: the checkpoint's.
    std::string pooling;
    // Tests only: a stand-in the engine runs instead of the model, made from the loaded model
    // and `test_script` (the binary installs testing/scripted_model.h's for --test-script;
    // the engine links no test code).
    std::string test_script;
    std::function<Expected<std::unique_ptr<ForwardModel>>(const LoadedModel&, const std::string& script)> stand_in;
};

// Loads a checkpoint into a ServedModel (file, model, tokenizer, engine, prompt builder).
// Errors are the loader's one-line messages.
Expected<ModelLease> load_served_model(const ModelSpec& spec);

}  // namespace ferrox

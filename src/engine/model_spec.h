#pragma once
// Everything one model load needs, from the command line (or an admin request on top of it).
// Apart from model_registry.h so that the server never includes the engine's own headers.

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
    std::string test_script;  // tests only: replay scripted answers (scripted_model.h)
};

// Loads a checkpoint into a ServedModel (file, model, tokenizer, engine, prompt builder).
// Errors are the loader's one-line messages.
Expected<ModelLease> load_served_model(const ModelSpec& spec);

}  // namespace ferrox

#pragma once
// Everything one checkpoint brings, loaded once and shared (by shared_ptr) by every request
// that uses it: the mapped file, the model, its tokenizer and chat template. A request pins the
// LoadedModel it started with, so swapping models never mixes two checkpoints in one answer.

#include <memory>
#include <string>

#include "core/status.h"
#include "loader/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace ferrox {

struct LoadedModel {
    std::string path;
    std::string name;           // what /v1/models reports (alias or file stem)
    std::string chat_template;  // tokenizer.chat_template, or empty
    std::unique_ptr<GgufFile> gguf;
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    double load_ms = 0;
    // Tests of the scheduler put a fake here; the engine then runs it instead of `model`.
    std::unique_ptr<ForwardModel> stand_in;

    ForwardModel& forward_model() const { return stand_in ? *stand_in : *model; }
};

// Loads a GGUF checkpoint: the file, the model (ModelOptions) and the tokenizer. Errors are
// one line naming the file.
Expected<std::shared_ptr<LoadedModel>> load_model(const std::string& path, const ModelOptions& opts);

}  // namespace ferrox

#pragma once
// VocabSpec from a GGUF file's `tokenizer.ggml.*` metadata, with llama.cpp's defaults for
// what the file leaves out. Everything is validated (types, array lengths, id ranges);
// errors are one line, "<path>: <problem>".

#include "core/status.h"
#include "loader/gguf.h"
#include "tokenizer/vocab.h"

namespace ferrox {

Expected<VocabSpec> vocab_from_gguf(const GgufFile& f);

}  // namespace ferrox

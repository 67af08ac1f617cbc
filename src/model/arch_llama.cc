// llama (and every checkpoint converted as "llama": Llama 2/3, SmolLM, TinyLlama...):
// RMSNorm, RoPE on adjacent pairs (the GGUF converter permutes Q/K rows for it), GQA, SwiGLU.
// Llama 3's frequency scaling arrives as the optional rope_freqs tensor.
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchLlama = {"llama", RopeOrdering::kNormal, false, false};
}

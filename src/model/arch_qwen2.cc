// qwen2: the llama graph with biases on the Q, K and V projections and NeoX-ordered RoPE.
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchQwen2 = {"qwen2", RopeOrdering::kNeox, true, false};
}

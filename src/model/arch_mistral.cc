// mistral: the llama graph (older Mistral GGUFs are written as "llama"; some converters say
// "mistral"). Sliding-window attention is not applied, as llama.cpp does not for this arch.
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchMistral = {"mistral", RopeOrdering::kNormal, false, false};
}

// qwen3: no QKV bias; an RMSNorm over each head of Q and of K (attn_q_norm / attn_k_norm,
// head_dim wide) before NeoX-ordered RoPE; head_dim from attention.key_length (it need not
// equal n_embd / n_head).
#include "model/weights.h"

namespace ferrox {
extern const ArchTraits kArchQwen3 = {"qwen3", RopeOrdering::kNeox, false, true};
}

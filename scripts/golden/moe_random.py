#!/usr/bin/env python3
"""Tiny random-weight mixture-of-experts GGUFs, one per architecture ferrox routes, and
llama.cpp's answers on them.

Each model (general.architecture as llama.cpp names it; tokenizer "none", token ids only;
2 layers, 64 wide, 4 query heads of 16 sharing 2 KV heads (olmoe: 4, as llama.cpp's olmoe
wants), vocabulary 256), from numpy's
default_rng(seed) so the file is the same on every run:

  qwen3moe       16 experts, 4 used, expert width 32, per-head QK norm, weights renormalized
  qwen2moe       8 experts, 2 used, QKV bias, a 48-wide shared expert with its sigmoid gate
  olmoe          8 experts, 2 used, QK norm over whole Q and K rows, weights not renormalized
  llama (Mixtral) 8 experts, 2 used, weights renormalized
  qwen3moe-q8_0  the qwen3moe shape with Q8_0 experts and attention (gguf-py's quantizer,
                 byte-identical to ggml's reference), so the packed expert products run
  llama-q4_0     the Mixtral shape with Q4_0 experts and attention

Weights are F32 elsewhere (F16 would round the activations to F16 and turn summation-order
differences into ~1e-2 in the logits). The router's weights are large (std 1 on normed inputs)
so that the chosen experts are not near-ties.

Then runs llama.cpp (llama-cpp-python, built by pip the ordinary way; flash attention off, F16
KV cache, 2 threads) on PROMPT and writes tests/model/golden/moe_llamacpp.json:
{models: {name: {arch, model_sha256, logits (last prompt position), greedy (16 tokens),
margins (top-1 minus top-2 before each greedy token)}}, prompt}.

The models are not committed: the test suite writes them again (a ctest fixture runs
`--models-only DIR`, numpy and gguf only) and refuses a file whose sha256 differs from the one
llama.cpp answered for.

Usage: python3 scripts/golden/moe_random.py                    # models + llama.cpp golden
       python3 scripts/golden/moe_random.py --models-only DIR  # the models alone, checked
"""
import hashlib
import json
import os
import sys
import tempfile

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/model/golden")
N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM = 256, 64, 2, 4, 2, 16
PROMPT = [2, 17, 42, 99, 5, 250, 3, 77, 128, 64, 200, 31, 9, 180, 45, 66, 7, 140, 222, 13, 88, 101, 60, 1]
N_GREEDY = 16

# name: (arch, seed, n_expert, n_expert_used, n_ff_exp, n_ff_shexp, quant of the matrices)
MODELS = {
    "qwen3moe": ("qwen3moe", 11, 16, 4, 32, 0, None),
    "qwen2moe": ("qwen2moe", 12, 8, 2, 32, 48, None),
    "olmoe": ("olmoe", 13, 8, 2, 32, 0, None),
    "mixtral": ("llama", 14, 8, 2, 32, 0, None),
    "qwen3moe-q8_0": ("qwen3moe", 11, 16, 4, 32, 0, Q.Q8_0),
    "mixtral-q4_0": ("llama", 14, 8, 2, 32, 0, Q.Q4_0),
    "gpt-oss": ("gpt-oss", 15, 8, 2, 32, 0, None),
    "gpt-oss-mxfp4": ("gpt-oss", 15, 8, 2, 32, 0, Q.MXFP4),
}
# The 256-element block types as qwen3moe experts, 256 wide (the blocks' width), made of random
# blocks: any bytes are a valid block of these formats once its scales are sane, so the file
# needs no quantizer (llama.cpp's needs an importance matrix for several of them) and the test
# suite writes the same bytes again from the seed.
BLOCK_TYPES = [Q.Q2_K, Q.Q3_K, Q.IQ4_XS, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S, Q.IQ1_S, Q.IQ1_M]
for i, t in enumerate(BLOCK_TYPES):
    MODELS["qwen3moe-" + t.name.lower()] = ("qwen3moe", 30 + i, 8, 2, 256, 0, ("blocks", t))


# The super-block scale d of each type's random blocks: [lo, hi] times this gives weights of a
# standard deviation about 0.06 (a 256-wide product's output near 1, as a trained model's),
# measured on random blocks; larger weights
# (IQ4_XS's at d 0.001-0.004 have sd 3.3) made ferrox's and llama.cpp's logits differ by up to
# 0.1 though each one's products match a float64 dot of the dequantized weights to 1e-6.
D_SCALE = {Q.Q2_K: 1.6, Q.Q3_K: 0.64, Q.IQ4_XS: 0.018, Q.IQ2_XXS: 0.4, Q.IQ2_XS: 0.38, Q.IQ2_S: 0.42,
           Q.IQ3_XXS: 0.154, Q.IQ3_S: 0.154, Q.IQ1_S: 3.6, Q.IQ1_M: 3.2}


def random_blocks(rng, qtype, n_blocks):
    """n_blocks random blocks of qtype with scales that give weights of a trained model's size."""
    _, block_bytes = gguf.constants.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    k = D_SCALE.get(qtype, 1.0)

    def f16(lo, hi, n):
        return (rng.uniform(lo, hi, n) * k).astype(np.float16).view(np.uint8).reshape(n, 2)

    if qtype == Q.Q2_K:  # d, dmin last; 4-bit scales and mins
        b[:, 80:82], b[:, 82:84] = f16(0.001, 0.004, n_blocks), f16(0.001, 0.004, n_blocks)
    elif qtype == Q.Q3_K:  # d last
        b[:, 108:110] = f16(-0.004, 0.004, n_blocks)
    elif qtype == Q.IQ1_M:  # d: the top nibbles of the 4 scale words (bytes 48..55)
        d = f16(0.001, 0.004, n_blocks).view(np.uint16).reshape(n_blocks)
        for k in range(4):
            b[:, 49 + 2 * k] = (b[:, 49 + 2 * k] & 0x0F) | (((d >> (4 * k)) & 15) << 4).astype(np.uint8)
    else:  # IQ4_XS and the grid types: d first
        b[:, 0:2] = f16(0.001, 0.004, n_blocks)
    return b


def write_model(path, name):
    arch, seed, n_expert, n_used, n_ff_exp, n_ff_shexp, quant = MODELS[name]
    rng = np.random.default_rng(seed)
    n_head_kv = N_HEAD if arch == "olmoe" else N_HEAD_KV  # llama.cpp's olmoe: k_norm is n_embd wide
    blocks = isinstance(quant, tuple)
    n_embd, head_dim = (256, 64) if blocks else (N_EMBD, HEAD_DIM)
    std = 0.5 if blocks else 1.0  # (the wider models' activations grow with their width)
    w = gguf.GGUFWriter(path, arch)
    w.add_name("ferrox-" + name + "-random")
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(n_ff_exp if arch in ("olmoe", "llama") else 4 * n_ff_exp)
    if arch == "gpt-oss":
        w.add_sliding_window(8)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(150000.0 if arch == "gpt-oss" else 10000.0)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(n_used)
    if arch in ("qwen3moe", "qwen2moe", "gpt-oss"):
        w.add_expert_feed_forward_length(n_ff_exp)
    if n_ff_shexp:
        w.add_expert_shared_feed_forward_length(n_ff_shexp)
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("none")

    def mat(shape, std):  # numpy shape (..., n_out, n_in): GGUF [n_in, n_out, ...]
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    def weight(tname, a):  # the matrices in the model's quant type (router and norms stay F32;
        # MXFP4, as gpt-oss ships it, and random blocks only for the experts)
        if blocks and "_exps" in tname:
            n_exp, n_out, n_in = a.shape
            _, block_bytes = gguf.constants.GGML_QUANT_SIZES[quant[1]]
            raw = random_blocks(rng, quant[1], n_exp * n_out * n_in // 256).reshape(n_exp, n_out, n_in // 256 * block_bytes)
            w.add_tensor(tname, raw, raw_dtype=quant[1])
        elif quant is None or blocks or a.ndim == 1 or "gate_inp" in tname or (quant == Q.MXFP4 and "_exps" not in tname):
            w.add_tensor(tname, a)
        else:
            w.add_tensor(tname, gguf.quants.quantize(a, quant), raw_dtype=quant)

    q_dim, kv_dim = N_HEAD * head_dim, n_head_kv * head_dim
    w.add_tensor("token_embd.weight", mat((N_VOCAB, n_embd), 1.0))
    w.add_tensor("output_norm.weight", norm(n_embd))
    weight("output.weight", mat((N_VOCAB, n_embd), 0.3 * std))
    for il in range(N_LAYER):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", norm(n_embd))
        weight(p + "attn_q.weight", mat((q_dim, n_embd), 0.3))
        weight(p + "attn_k.weight", mat((kv_dim, n_embd), 0.3))
        weight(p + "attn_v.weight", mat((kv_dim, n_embd), 0.5))
        weight(p + "attn_output.weight", mat((n_embd, q_dim), 0.3))
        if arch in ("qwen2moe", "gpt-oss"):
            w.add_tensor(p + "attn_q.bias", mat((q_dim,), 0.1))
            w.add_tensor(p + "attn_k.bias", mat((kv_dim,), 0.1))
            w.add_tensor(p + "attn_v.bias", mat((kv_dim,), 0.1))
        if arch == "qwen3moe":
            w.add_tensor(p + "attn_q_norm.weight", norm(head_dim))
            w.add_tensor(p + "attn_k_norm.weight", norm(head_dim))
        if arch == "olmoe":
            w.add_tensor(p + "attn_q_norm.weight", norm(q_dim))
            w.add_tensor(p + "attn_k_norm.weight", norm(kv_dim))
        if arch == "gpt-oss":
            w.add_tensor(p + "attn_output.bias", mat((n_embd,), 0.1))
            w.add_tensor(p + "attn_sinks.weight", mat((N_HEAD,), 2.0))
        w.add_tensor(p + ("post_attention_norm.weight" if arch == "gpt-oss" else "ffn_norm.weight"), norm(n_embd))
        w.add_tensor(p + "ffn_gate_inp.weight", mat((n_expert, n_embd), std))
        weight(p + "ffn_gate_exps.weight", mat((n_expert, n_ff_exp, n_embd), 0.3))
        weight(p + "ffn_up_exps.weight", mat((n_expert, n_ff_exp, n_embd), 0.3))
        weight(p + "ffn_down_exps.weight", mat((n_expert, n_embd, n_ff_exp), 0.3))
        if arch == "gpt-oss":  # biases large enough to move the routing and the clamp
            w.add_tensor(p + "ffn_gate_inp.bias", mat((n_expert,), 1.0))
            w.add_tensor(p + "ffn_gate_exps.bias", mat((n_expert, n_ff_exp), 1.0))
            w.add_tensor(p + "ffn_up_exps.bias", mat((n_expert, n_ff_exp), 1.0))
            w.add_tensor(p + "ffn_down_exps.bias", mat((n_expert, n_embd), 0.3))
        if n_ff_shexp:
            w.add_tensor(p + "ffn_gate_inp_shexp.weight", mat((n_embd,), 0.3))
            weight(p + "ffn_gate_shexp.weight", mat((n_ff_shexp, n_embd), 0.3))
            weight(p + "ffn_up_shexp.weight", mat((n_ff_shexp, n_embd), 0.3))
            weight(p + "ffn_down_shexp.weight", mat((n_embd, n_ff_shexp), 0.3))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(path):
    """llama.cpp's last prompt logits, greedy tokens and margins."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, n_threads=2, logits_all=True, verbose=False)
    llm.eval(PROMPT)
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    greedy, margins, cur = [], [], logits
    for _ in range(N_GREEDY):
        tok = int(np.argmax(cur))
        top2 = np.sort(cur)[-2:]
        greedy.append(tok)
        margins.append(round(float(top2[1] - top2[0]), 6))
        llm.eval([tok])
        cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    return logits, greedy, margins


def models_only(d):
    """Writes every model into d; fails unless each is the file the golden data was made on."""
    with open(os.path.join(OUT, "moe_llamacpp.json")) as f:
        want = json.load(f)["models"]
    os.makedirs(d, exist_ok=True)
    for name in MODELS:
        path = os.path.join(d, name + ".gguf")
        write_model(path, name)
        got = sha256(path)
        if got != want[name]["model_sha256"]:
            os.remove(path)
            sys.exit(f"moe_random.py: wrote {path} with sha256 {got}, but the golden data was made on "
                     f"{want[name]['model_sha256']} (another numpy or gguf version?); rerun the script")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--models-only":
        return models_only(sys.argv[2])
    import llama_cpp
    out = {"_generator": "scripts/golden/moe_random.py", "_llama_cpp_python": llama_cpp.__version__,
           "prompt": PROMPT, "models": {}}
    with tempfile.TemporaryDirectory() as d:
        for name in MODELS:
            path = os.path.join(d, name + ".gguf")
            write_model(path, name)
            logits, greedy, margins = run(path)
            out["models"][name] = {"arch": MODELS[name][0], "model_sha256": sha256(path),
                                   "logits": [float(x) for x in logits], "greedy": greedy, "margins": margins}
            print(name, "greedy", greedy, "min margin", min(margins), "max |logit|",
                  float(np.abs(logits).max()), file=sys.stderr)
    with open(os.path.join(OUT, "moe_llamacpp.json"), "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A Llama-shaped model with random weights, for speed benchmarks (random weights time the same
as trained ones: every weight is read once per decoded token whatever its value).

Writes <out>/<name>.F16.gguf with the `gguf` package (weights normal * --scale, norms 1, so
activations stay finite), then quantizes it with llama.cpp's own quantizer (through the
`llama_cpp` package: llama_model_quantize with its default parameters, so Q4_K_M gets
llama.cpp's usual K-quant mix) to <name>.Q4_0.gguf, <name>.Q8_0.gguf and <name>.Q4_K_M.gguf.

The tokenizer is the default model's (SmolLM2's byte-level BPE, models/SmolLM2-135M-Instruct.Q4_1.gguf)
cut to the model's vocabulary: the first --vocab tokens, the merges whose two parts and result
all remain, or padded with unused "<|pad_N|>" tokens when --vocab is larger. Both llama.cpp and
ferrox load and generate from the files (random text).

Default shape (about 1.1B parameters, TinyLlama's): 2048 hidden, 22 layers, 32 heads, 4 KV
heads, 5632 FFN, 32000 vocabulary, untied output. A few minutes in all (Q4_K_M is the slowest)
and 4 GB of disk.

With --experts N (and --experts-used, --expert-ffn, --head-dim) the model is a qwen3moe mixture
of experts instead: every layer's FFN is N experts of --expert-ffn (3-D ffn_*_exps tensors) and
an F32 router, the attention has per-head QK norms; e.g. Qwen3-30B-A3B's shapes with fewer layers:
  --experts 128 --experts-used 8 --expert-ffn 768 --hidden 2048 --heads 32 --kv-heads 4
  --head-dim 128 --layers 8
With --arch gpt-oss as well: gpt-oss's graph (biases, sinks, YaRN, sliding window), e.g.
gpt-oss-20b's shapes: --arch gpt-oss --experts 32 --experts-used 4 --expert-ffn 2880
  --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --types MXFP4_MOE

Usage: python3 scripts/make_random_model.py [-o models/random-1b] [--types F16,Q4_0,Q8_0,Q4_K_M]
       [--hidden 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000] [--seed 1]
       [--threads N] [--force] [-v] [--quantize-bin <llama.cpp build>/bin/llama-quantize]
"""
import argparse
import ctypes
import os
import subprocess
import sys
import time

import numpy as np

import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TOKENIZER = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
QUANT_TYPES = {"Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0", "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
               "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M", "Q3_K_M": "LLAMA_FTYPE_MOSTLY_Q3_K_M",
               "Q2_K": "LLAMA_FTYPE_MOSTLY_Q2_K", "IQ4_XS": "LLAMA_FTYPE_MOSTLY_IQ4_XS",
               "MXFP4_MOE": "LLAMA_FTYPE_MOSTLY_MXFP4_MOE"}
TOKEN_TYPE_UNUSED = 5  # llama.cpp's LLAMA_TOKEN_TYPE_UNUSED


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def tokenizer_from(path, n_vocab):
    """The tokenizer.* metadata of `path`, cut or padded to n_vocab tokens consistently."""
    r = gguf.GGUFReader(path)
    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        sys.exit(f"{path}: tokenizer.ggml.model is {model!r}; this script handles byte-level BPE (gpt2)")
    tokens = list(field(r, "tokenizer.ggml.tokens"))
    types = list(field(r, "tokenizer.ggml.token_type"))
    merges = list(field(r, "tokenizer.ggml.merges"))
    if n_vocab <= len(tokens):
        tokens, types = tokens[:n_vocab], types[:n_vocab]
        kept = set(tokens)
        # A merge is usable only when both parts and its result are tokens.
        merges = [m for m in merges
                  if (lambda a, b: a in kept and b in kept and a + b in kept)(*m.split(" ", 1))]
    else:
        extra = n_vocab - len(tokens)
        tokens += [f"<|pad_{i}|>" for i in range(extra)]
        types += [TOKEN_TYPE_UNUSED] * extra
    ids = {}
    for key in ("bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id"):
        v = field(r, "tokenizer.ggml." + key)
        if v is not None and v < n_vocab:
            ids[key] = int(v)
    return {
        "pre": field(r, "tokenizer.ggml.pre"),
        "tokens": tokens,
        "types": types,
        "merges": merges,
        "ids": ids,
        "add_bos": field(r, "tokenizer.ggml.add_bos_token"),
        "add_space_prefix": field(r, "tokenizer.ggml.add_space_prefix"),
        "chat_template": field(r, "tokenizer.chat_template"),
    }


def write_f16(path, a, tok):
    head_dim = a.head_dim or a.hidden // a.heads
    q_dim = a.heads * head_dim
    kv_dim = a.kv_heads * head_dim
    moe = a.experts > 0
    arch = a.arch if a.arch else "qwen3moe" if moe else "llama"
    oss = arch == "gpt-oss"
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"ferrox random {os.path.basename(a.out)}")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_context_length(a.ctx)
    w.add_embedding_length(a.hidden)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ffn)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head_dim)
    if moe:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_expert_count(a.experts)
        w.add_expert_used_count(a.experts_used)
        w.add_expert_feed_forward_length(a.expert_ffn)
    if oss:  # gpt-oss-20b's attention: 128-position window on even layers, YaRN 32x over 4096
        w.add_sliding_window(128)
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(32.0)
        w.add_rope_scaling_orig_ctx_len(4096)
    w.add_rope_freq_base(150000.0 if oss else 10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(a.vocab)
    w.add_tokenizer_model("gpt2")
    if tok["pre"]:
        w.add_tokenizer_pre(tok["pre"])
    w.add_token_list(tok["tokens"])
    w.add_token_types(tok["types"])
    w.add_token_merges(tok["merges"])
    setters = {"bos_token_id": w.add_bos_token_id, "eos_token_id": w.add_eos_token_id,
               "unknown_token_id": w.add_unk_token_id, "padding_token_id": w.add_pad_token_id}
    for key, v in tok["ids"].items():
        setters[key](v)
    if tok["add_bos"] is not None:
        w.add_add_bos_token(bool(tok["add_bos"]))
    if tok["add_space_prefix"] is not None:
        w.add_add_space_prefix(bool(tok["add_space_prefix"]))
    if tok["chat_template"]:
        w.add_chat_template(tok["chat_template"])

    # (name, numpy shape (n_out, n_in) = ggml ne reversed, dtype); written in this order.
    specs = [("token_embd.weight", (a.vocab, a.hidden), np.float16),
             ("output_norm.weight", (a.hidden,), np.float32),
             ("output.weight", (a.vocab, a.hidden), np.float16)]
    for il in range(a.layers):
        p = f"blk.{il}."
        specs += [(p + "attn_norm.weight", (a.hidden,), np.float32),
                  (p + "attn_q.weight", (q_dim, a.hidden), np.float16),
                  (p + "attn_k.weight", (kv_dim, a.hidden), np.float16),
                  (p + "attn_v.weight", (kv_dim, a.hidden), np.float16),
                  (p + "attn_output.weight", (a.hidden, q_dim), np.float16),
                  (p + ("post_attention_norm.weight" if oss else "ffn_norm.weight"), (a.hidden,), np.float32)]
        if oss:
            e, f = a.experts, a.expert_ffn
            specs += [(p + "attn_q.bias", (q_dim,), "bias"), (p + "attn_k.bias", (kv_dim,), "bias"),
                      (p + "attn_v.bias", (kv_dim,), "bias"), (p + "attn_output.bias", (a.hidden,), "bias"),
                      (p + "attn_sinks.weight", (a.heads,), "bias"),
                      (p + "ffn_gate_inp.weight", (e, a.hidden), "router"), (p + "ffn_gate_inp.bias", (e,), "bias"),
                      (p + "ffn_gate_exps.weight", (e, f, a.hidden), np.float16),
                      (p + "ffn_up_exps.weight", (e, f, a.hidden), np.float16),
                      (p + "ffn_down_exps.weight", (e, a.hidden, f), np.float16),
                      (p + "ffn_gate_exps.bias", (e, f), "bias"), (p + "ffn_up_exps.bias", (e, f), "bias"),
                      (p + "ffn_down_exps.bias", (e, a.hidden), "bias")]
        elif moe:
            e, f = a.experts, a.expert_ffn
            specs += [(p + "attn_q_norm.weight", (head_dim,), np.float32),
                      (p + "attn_k_norm.weight", (head_dim,), np.float32),
                      (p + "ffn_gate_inp.weight", (e, a.hidden), "router"),
                      (p + "ffn_gate_exps.weight", (e, f, a.hidden), np.float16),
                      (p + "ffn_up_exps.weight", (e, f, a.hidden), np.float16),
                      (p + "ffn_down_exps.weight", (e, a.hidden, f), np.float16)]
        else:
            specs += [(p + "ffn_gate.weight", (a.ffn, a.hidden), np.float16),
                      (p + "ffn_up.weight", (a.ffn, a.hidden), np.float16),
                      (p + "ffn_down.weight", (a.hidden, a.ffn), np.float16)]
    n_params = 0
    for name, shape, dt in specs:
        n = int(np.prod(shape))
        n_params += n
        dt = np.float32 if dt in ("router", "bias") else dt
        w.add_tensor_info(name, shape, np.dtype(dt), n * np.dtype(dt).itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(a.seed)
    for name, shape, dt in specs:
        if dt == "router":  # F32, as converters write it; weights large enough to route unevenly
            w.write_tensor_data(rng.standard_normal(shape, dtype=np.float32) * np.float32(0.05))
        elif dt == "bias":  # F32 biases and sinks, small
            w.write_tensor_data(rng.standard_normal(shape, dtype=np.float32) * np.float32(0.1))
        elif dt == np.float32:  # RMSNorm weights
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
        elif len(shape) == 3:  # experts, drawn one at a time (a layer's are GBs of floats)
            x16 = np.empty(shape, dtype=np.float16)
            for i in range(shape[0]):
                x = rng.standard_normal(shape[1:], dtype=np.float32)
                x *= a.scale
                x16[i] = x
            w.write_tensor_data(x16)
        else:
            x = rng.standard_normal(shape, dtype=np.float32)
            x *= a.scale
            w.write_tensor_data(x.astype(np.float16))
    w.close()
    return n_params


def quantize(src, dst, type_name, n_threads, verbose, quantize_bin=None):
    if quantize_bin:  # llama.cpp's own llama-quantize binary: the same quantizer, no Python binding
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.path.dirname(os.path.abspath(quantize_bin)) + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        argv = [quantize_bin, src, dst, type_name] + ([str(n_threads)] if n_threads > 0 else [])
        r = subprocess.run(argv, env=env, capture_output=not verbose, text=True)
        if r.returncode != 0:
            sys.exit(f"{quantize_bin} {src} -> {dst} ({type_name}) failed: {r.returncode}\n{r.stderr or ''}")
        return
    import llama_cpp
    if not verbose:  # llama.cpp logs every tensor it converts
        global _quiet_log
        _quiet_log = llama_cpp.llama_log_callback(lambda level, text, user_data: None)
        llama_cpp.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANT_TYPES[type_name])
    params.nthread = n_threads
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        sys.exit(f"llama_model_quantize {src} -> {dst} ({type_name}) failed: {rc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--out", default=os.path.join(ROOT, "models/random-1b"), help="output directory")
    ap.add_argument("--name", help="file name prefix (default: the directory's name)")
    ap.add_argument("--types", default="F16,Q4_0,Q8_0,Q4_K_M", help="comma list of F16, Q4_0, Q8_0, Q4_K_M")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=5632)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--head-dim", type=int, default=0, help="attention.key_length (0: hidden / heads)")
    ap.add_argument("--experts", type=int, default=0, help="a qwen3moe mixture of this many experts")
    ap.add_argument("--arch", choices=["gpt-oss"], help="gpt-oss instead of qwen3moe (with --experts)")
    ap.add_argument("--experts-used", type=int, default=8)
    ap.add_argument("--expert-ffn", type=int, default=768)
    ap.add_argument("--ctx", type=int, default=2048, help="llama.context_length")
    ap.add_argument("--scale", type=float, default=0.02, help="standard deviation of the weights")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tokenizer-from", default=DEFAULT_TOKENIZER, help="GGUF whose tokenizer is copied")
    ap.add_argument("--threads", type=int, default=0, help="quantizer threads (0: all cores)")
    ap.add_argument("--force", action="store_true", help="rewrite files that exist")
    ap.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's quantizer log")
    ap.add_argument("--quantize-bin", help="llama.cpp's llama-quantize to run instead of the llama_cpp "
                    "package (its libraries beside it)")
    a = ap.parse_args()
    kq = 32 if a.arch == "gpt-oss" else 256  # gpt-oss's 2880 is made for MXFP4's blocks of 32
    if (not a.head_dim and a.hidden % a.heads) or a.heads % a.kv_heads or a.hidden % kq or a.ffn % 256 \
            or a.expert_ffn % kq:
        sys.exit("need hidden % heads == 0, heads % kv_heads == 0, hidden and ffn multiples of 256 (K-quants)")
    types = [t.strip() for t in a.types.split(",") if t.strip()]
    for t in types:
        if t != "F16" and t not in QUANT_TYPES:
            sys.exit(f"unknown type {t!r}")
    os.makedirs(a.out, exist_ok=True)
    name = a.name or os.path.basename(os.path.normpath(a.out))
    f16 = os.path.join(a.out, f"{name}.F16.gguf")

    made_f16 = a.force or not os.path.exists(f16)
    if made_f16:
        t0 = time.time()
        tok = tokenizer_from(a.tokenizer_from, a.vocab)
        tmp = f16 + ".part"
        n_params = write_f16(tmp, a, tok)
        os.replace(tmp, f16)
        print(f"{f16}: {n_params / 1e9:.3f}B parameters, {os.path.getsize(f16) / 2**30:.2f} GiB, "
              f"{len(tok['tokens'])} tokens, {len(tok['merges'])} merges ({time.time() - t0:.0f} s)")
    else:
        print(f"{f16}: exists (--force rewrites it)")
    for t in types:
        if t == "F16":
            continue
        dst = os.path.join(a.out, f"{name}.{t}.gguf")
        if os.path.exists(dst) and not a.force:
            print(f"{dst}: exists")
            continue
        t0 = time.time()
        quantize(f16, dst + ".part", t, a.threads, a.verbose, a.quantize_bin)
        os.replace(dst + ".part", dst)
        print(f"{dst}: {os.path.getsize(dst) / 2**30:.2f} GiB ({time.time() - t0:.0f} s)")
    if "F16" not in types and made_f16:
        os.remove(f16)


if __name__ == "__main__":
    main()

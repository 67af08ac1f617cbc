#!/usr/bin/env python3
"""A tiny random-weight Gemma 2 GGUF and llama.cpp's answers on it (attention and final logit
soft-capping, sliding window).

Writes, with the `gguf` package, a GGUF file: general.architecture
gemma2, 2 layers (layer 0 local with a 6-position window, layer 1 global: llama.cpp's gemma2
pattern 2), 64 wide, 2 query heads of 32 sharing 1 KV head, FFN 128, vocabulary 256 (token ids
only, tokenizer "none"), F32 weights (F16 ones would round the activations to F16, whose
steps turn the last-bit differences of another summation order into ~1e-2 in the logits), all
from numpy's default_rng(SEED), so the file is the same on every run. Q and K are large
enough that the scaled Q·K scores reach ~26 against attn_logit_softcapping = 5 (the script asserts that the largest exceeds twice the cap),
and post-norm weights of ~8 make the blocks, not the token's own embedding, decide the logits,
whose raw values exceed final_logit_softcapping = 12.

Then runs llama.cpp on that file (llama-cpp-python, built by pip the ordinary way; flash attention off, F16 KV
cache, 2 threads) on PROMPT (22 tokens, longer than the window) and writes
tests/model/golden/gemma2_llamacpp.json: {prompt, logits (last prompt position), greedy (16
tokens), margins (top-1 minus top-2 before each greedy token), logits_uncapped, max_abs_score}.
logits_uncapped are llama.cpp's logits for the same weights with the attention cap set to 1e30
(no capping): the C++ test checks that ferrox is far from them, i.e. that the cap bites.
max_abs_score is the largest |Q·K| llama.cpp computed before capping (its cb_eval tensor kq).
model_sha256 is the file's sha256.

The model itself is not committed: the test suite writes it again (a ctest fixture runs
`--model-only PATH`, which needs only numpy and gguf) and refuses a file whose sha256 differs
from the one llama.cpp answered for.

Usage: python3 scripts/golden/gemma2_random.py                   # model + llama.cpp golden
       python3 scripts/golden/gemma2_random.py --model-only PATH  # the model alone, checked
"""
import hashlib
import ctypes
import json
import os
import sys
import tempfile

import gguf
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/model/golden")
SEED = 3
N_VOCAB, N_EMBD, N_LAYER, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF = 256, 64, 2, 2, 1, 32, 128
N_SWA = 6
ATTN_CAP, FINAL_CAP = 5.0, 12.0
PROMPT = [2, 17, 42, 99, 5, 250, 3, 77, 128, 64, 200, 31, 9, 180, 45, 66, 7, 140, 222, 13, 88, 101]
N_GREEDY = 16


def write_model(path, attn_cap):
    rng = np.random.default_rng(SEED)
    w = gguf.GGUFWriter(path, "gemma2")
    w.add_name("ferrox-gemma2-random")
    w.add_context_length(256)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_sliding_window(N_SWA)
    w.add_float32("gemma2.attn_logit_softcapping", attn_cap)
    w.add_float32("gemma2.final_logit_softcapping", FINAL_CAP)
    w.add_vocab_size(N_VOCAB)
    w.add_tokenizer_model("none")

    def mat(n_out, n_in, std):  # GGUF shape [n_in, n_out]: numpy (n_out, n_in)
        return (rng.standard_normal((n_out, n_in)) * std).astype(np.float32)

    def norm(n, mean=1.0):  # stored as llama.cpp's converter stores them: 1 + w
        return (mean + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w.add_tensor("token_embd.weight", mat(N_VOCAB, N_EMBD, 1.0))
    w.add_tensor("output_norm.weight", norm(N_EMBD))
    for il in range(N_LAYER):
        p = f"blk.{il}."
        w.add_tensor(p + "attn_norm.weight", norm(N_EMBD))
        w.add_tensor(p + "attn_q.weight", mat(N_HEAD * HEAD_DIM, N_EMBD, 0.35))
        w.add_tensor(p + "attn_k.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD, 0.35))
        w.add_tensor(p + "attn_v.weight", mat(N_HEAD_KV * HEAD_DIM, N_EMBD, 1.0))
        w.add_tensor(p + "attn_output.weight", mat(N_EMBD, N_HEAD * HEAD_DIM, 0.3))
        w.add_tensor(p + "post_attention_norm.weight", norm(N_EMBD, 8.0))
        w.add_tensor(p + "ffn_norm.weight", norm(N_EMBD))
        w.add_tensor(p + "ffn_gate.weight", mat(N_FF, N_EMBD, 0.2))
        w.add_tensor(p + "ffn_up.weight", mat(N_FF, N_EMBD, 0.2))
        w.add_tensor(p + "ffn_down.weight", mat(N_EMBD, N_FF, 0.1))
        w.add_tensor(p + "post_ffw_norm.weight", norm(N_EMBD, 8.0))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ggml_tensor's leading fields (ggml.h), enough to read a callback tensor's name, shape and data.
class GgmlTensor(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
                ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
                ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64)]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run(path, want_scores):
    """llama.cpp's last prompt logits, greedy tokens and margins; the max |kq| if asked."""
    import llama_cpp
    import llama_cpp.llama_cpp as L

    max_score = [0.0]

    def cb(t, ask, _):
        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        if not tt.name.decode().startswith("kq-"):
            return not ask
        if ask:
            return True
        ne0, ne1, ne2 = tt.ne[0], tt.ne[1], tt.ne[2]
        for i2 in range(ne2):
            for i1 in range(ne1):  # query i1 sees positions <= i1 (the prompt starts at 0)
                row = np.ctypeslib.as_array((ctypes.c_float * ne0).from_address(
                    tt.data + i1 * tt.nb[1] + i2 * tt.nb[2]))
                max_score[0] = max(max_score[0], float(np.abs(row[:i1 + 1]).max()))
        return True

    cb_c = L.ggml_backend_sched_eval_callback(cb)
    orig = L.llama_context_default_params

    def params():
        p = orig()
        if want_scores:
            p.cb_eval = cb_c
        return p

    L.llama_context_default_params = params
    try:
        llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, n_threads=2, logits_all=True,
                              verbose=False)
    finally:
        L.llama_context_default_params = orig
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
    return logits, greedy, margins, max_score[0]


def model_only(path):
    """Writes the model to PATH; fails unless it is the file the golden data was made on."""
    write_model(path, ATTN_CAP)
    with open(os.path.join(OUT, "gemma2_llamacpp.json")) as f:
        want = json.load(f)["model_sha256"]
    got = sha256(path)
    if got != want:
        os.remove(path)
        sys.exit(f"gemma2_random.py: wrote {path} with sha256 {got}, but the golden data was made "
                 f"on {want} (another numpy or gguf version?); rerun the script with llama-cpp-python")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--model-only":
        return model_only(sys.argv[2])
    import llama_cpp
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "gemma2_random.gguf")
        write_model(model, ATTN_CAP)
        model_sha = sha256(model)
        logits, greedy, margins, max_score = run(model, True)
        uncapped = os.path.join(d, "uncapped.gguf")
        write_model(uncapped, 1e30)
        logits_uncapped, _, _, _ = run(uncapped, False)
    assert max_score > 2 * ATTN_CAP, f"scores reach only {max_score}: the cap would not bite"
    assert float(np.abs(logits).max()) > 0.5 * FINAL_CAP
    out = {"_generator": "scripts/golden/gemma2_random.py", "_llama_cpp_python": llama_cpp.__version__,
           "attn_logit_softcapping": ATTN_CAP, "final_logit_softcapping": FINAL_CAP, "n_swa": N_SWA,
           "model_sha256": model_sha, "prompt": PROMPT, "max_abs_score": round(max_score, 4),
           "logits": [float(x) for x in logits], "greedy": greedy, "margins": margins,
           "logits_uncapped": [float(x) for x in logits_uncapped]}
    with open(os.path.join(OUT, "gemma2_llamacpp.json"), "w") as f:
        json.dump(out, f, indent=0)
    print("max |score|", max_score, "max |capped - uncapped logits|",
          float(np.abs(logits - logits_uncapped).max()), "greedy", greedy, "min margin", min(margins),
          file=sys.stderr)


if __name__ == "__main__":
    main()

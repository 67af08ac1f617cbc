#!/usr/bin/env python3
"""The default model re-quantized to Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4 by llama.cpp's own
quantizer, and llama.cpp's answers on each file.

For each type T, the file is models/SmolLM2-135M-Instruct.Q4_1.gguf (`make model`) with every
block weight matrix whose rows are a multiple of T's block size (256 for Q2_K, Q3_K, IQ4_XS: only
the 30 ffn_down, rows of 1536, as in a user's re-quantized file, since n_embd is 576; 32 for
IQ4_NL, MXFP4: all 210 attention and FFN matrices) dequantized to F32 (gguf-py's numpy
dequantizer) and quantized to T; everything else (the Q8_0 token embedding, which is also the
output matrix, the F32 norms, the metadata) copied unchanged, written by gguf-py's GGUFWriter.

Golden mode (no arguments; needs llama-cpp-python): quantizes with llama.cpp's
ggml_quantize_chunk(T, ..., imatrix NULL) through ctypes on llama-cpp-python's libggml-base,
records each file's sha256, runs llama.cpp on it (flash attention off, F16 KV cache, 2 threads)
for PROMPTS and writes tests/model/golden/quant_types_llamacpp.json: per type the sha256, the
number of tensors of the type, and per prompt N_GREEDY greedy tokens with their top-1 - top-2
margins, the TOP_K largest last-prompt-position logits with their ids and every SAMPLE_STRIDE-th
logit (the rest of the distribution), to keep the file small.

Fixture mode (`--models-only DIR --quantizer PATH`, needs only numpy and gguf): writes the same
files into DIR with ferrox's quantizer (PATH: the ferrox-quantize-ggml tool) and fails unless
every file's sha256 is llama.cpp's: ferrox's quantizer wrote llama.cpp's bytes for every tensor.
Without the base model it writes nothing and says so (the C++ test then skips).

Usage: python3 scripts/golden/quant_types_llamacpp.py
       python3 scripts/golden/quant_types_llamacpp.py --models-only DIR --quantizer PATH
"""
import ctypes
import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import gguf
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BASE = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
GOLDEN = os.path.join(ROOT, "tests/model/golden/quant_types_llamacpp.json")
# (name, ggml type id, block size)
TYPES = [("Q2_K", 10, 256), ("Q3_K", 11, 256), ("IQ4_NL", 20, 32), ("IQ4_XS", 23, 256), ("MXFP4", 39, 32)]
PROMPTS = [
    ("The capital of France is", False),
    ("Once upon a time, in a small village by the sea,", False),
    ("What is the capital of France?", True),
]
N_GREEDY = 24
TOP_K = 32
SAMPLE_STRIDE = 193


def chatml(text):
    return "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n"


def quantized(t, block):
    """Whether tensor t becomes the new type: a 2-D block weight whose rows fit the blocks."""
    return (len(t.shape) == 2 and t.name.startswith("blk.") and t.name.endswith(".weight")
            and int(t.shape[0]) % block == 0)


def write_model(reader, qtype, block, quantize, path):
    arch = reader.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    n = 0
    for t in reader.tensors:
        if quantized(t, block):
            f = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            f = np.ascontiguousarray(f.reshape(-1, int(t.shape[0])))
            q = quantize(qtype, f)
            w.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType(qtype))
            n += 1
        elif t.tensor_type == gguf.GGMLQuantizationType.F32:
            w.add_tensor(t.name, np.asarray(t.data))
        else:
            w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n


def row_bytes(qtype, n):
    block, size = gguf.constants.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(qtype)]
    return n // block * size


def ggml_quantizer():
    import llama_cpp
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(sorted(glob.glob(os.path.join(libdir, "libggml-base.so*")))[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]

    def quantize(qtype, f):
        rows, n = f.shape
        out = np.zeros((rows, row_bytes(qtype, n)), dtype=np.uint8)
        got = lib.ggml_quantize_chunk(qtype, f.ctypes.data, out.ctypes.data, 0, rows, n, None)
        assert got == out.size
        return out
    return quantize


def ferrox_quantizer(tool):
    def quantize(qtype, f):
        rows, n = f.shape
        p = subprocess.run([tool, str(qtype), str(n)], input=f.tobytes(), capture_output=True, check=True)
        out = np.frombuffer(p.stdout, dtype=np.uint8)
        assert out.size == rows * row_bytes(qtype, n), (out.size, rows, n)
        return out.reshape(rows, -1)
    return quantize


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def models_only(out_dir, tool):
    if not os.path.exists(BASE):
        print(f"quant_types_llamacpp.py: {BASE} is missing (`make model`): no models written")
        return
    with open(GOLDEN) as f:
        golden = json.load(f)
    if sha256(BASE) != golden["base_model_sha256"]:
        sys.exit(f"quant_types_llamacpp.py: {BASE} is not the file the golden data was made from "
                 f"(sha256 {golden['base_model_sha256']}): `make model` again")
    golden = golden["types"]
    os.makedirs(out_dir, exist_ok=True)
    reader = gguf.GGUFReader(BASE)
    bad = []
    for name, qtype, block in TYPES:
        path = os.path.join(out_dir, name + ".gguf")
        write_model(reader, qtype, block, ferrox_quantizer(tool), path)
        got, want = sha256(path), golden[name]["model_sha256"]
        if got != want:
            os.remove(path)
            bad.append(f"{name}: sha256 {got}, llama.cpp's file {want}")
        else:
            print(f"{name}: {path} is llama.cpp's file (sha256 {got[:16]}...)")
    if bad:
        sys.exit("quant_types_llamacpp.py: ferrox's quantizer did not write llama.cpp's bytes (or another "
                 "numpy/gguf wrote the file differently):\n  " + "\n  ".join(bad))


def run_llamacpp(path, prompts):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, n_threads=2, logits_all=True, verbose=False)
    runs = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        top = np.argsort(-logits, kind="stable")[:TOP_K]
        run = {"top_ids": [int(i) for i in top], "top_logits": [float(logits[i]) for i in top],
               "sample_logits": [float(x) for x in logits[::SAMPLE_STRIDE]],
               "logits_mean": float(logits.mean()), "logits_std": float(logits.std())}
        greedy, margins, cur = [], [], logits
        for _ in range(N_GREEDY):
            tok = int(np.argmax(cur))
            top2 = np.sort(cur)[-2:]
            greedy.append(tok)
            margins.append(round(float(top2[1] - top2[0]), 5))
            llm.eval([tok])
            cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        run["greedy"], run["margins"] = greedy, margins
        runs.append(run)
        print(path, repr(llm.detokenize(greedy).decode("utf-8", "replace"))[:80], "min margin", min(margins),
              file=sys.stderr)
    del llm
    return runs


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--models-only" and sys.argv[3] == "--quantizer":
        return models_only(sys.argv[2], sys.argv[4])
    if len(sys.argv) != 1:
        sys.exit(__doc__)
    import llama_cpp
    reader = gguf.GGUFReader(BASE)
    tok = llama_cpp.Llama(model_path=BASE, n_ctx=64, vocab_only=True, verbose=False)
    prompts = []
    for text, chat in PROMPTS:
        ids = tok.tokenize((chatml(text) if chat else text).encode("utf-8"), add_bos=False, special=True)
        prompts.append({"text": text, "chat": chat, "ids": ids})
    out = {"_generator": "scripts/golden/quant_types_llamacpp.py", "_llama_cpp_python": llama_cpp.__version__,
           "base_model_sha256": sha256(BASE), "top_k": TOP_K, "sample_stride": SAMPLE_STRIDE,
           "prompts": prompts, "types": {}}
    quantize = ggml_quantizer()
    with tempfile.TemporaryDirectory() as d:
        for name, qtype, block in TYPES:
            path = os.path.join(d, name + ".gguf")
            n = write_model(reader, qtype, block, quantize, path)
            out["types"][name] = {"ggml_type": qtype, "block": block, "n_tensors": n,
                                  "model_sha256": sha256(path),
                                  "runs": run_llamacpp(path, [p["ids"] for p in prompts])}
            os.remove(path)
    with open(GOLDEN, "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()

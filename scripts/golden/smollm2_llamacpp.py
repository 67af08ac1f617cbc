#!/usr/bin/env python3
"""Golden data for the default model: llama.cpp's prompt tokens, greedy continuations and
last-position logits on SmolLM2-135M-Instruct Q4_1 (models/, fetched by `make model`).

Generation ignores end-of-generation tokens (as llama-bench does) so every prompt yields
64 tokens. Writes tests/model/golden/smollm2_llamacpp.json ({prompts: [{text, chat, ids, greedy,
margins, logits_file?}]}) and, for the first four prompts, the full last-position logits as
little-endian float32 in tests/model/golden/smollm2_logits_<i>.f32.

The reference is llama-cpp-python (PyPI, built by pip the ordinary way), flash attention off
(its default), F16 KV cache, 2 threads.
Usage: python3 scripts/golden/smollm2_llamacpp.py
"""
import json
import os
import sys

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
OUT = os.path.join(ROOT, "tests/model/golden")
N_GEN = 64

PROMPTS = [
    ("The capital of France is", False),
    ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False),
    ("Once upon a time, in a small village by the sea,", False),
    ("1, 2, 3, 5, 8, 13,", False),
    ("What is the capital of France?", True),
    ("Write a haiku about the ocean.", True),
    ("Explain in two sentences why the sky is blue.", True),
    ("Translate to French: I would like a cup of coffee, please.", True),
    ("List three prime numbers greater than 100.", True),
]


def chatml(text):
    # The single-user-turn wrapping that `ferrox run --chat` applies for ChatML models.
    return "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n"


def main():
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=512, n_batch=512, n_threads=2,
                          logits_all=True, verbose=False)
    out = {"_generator": "scripts/golden/smollm2_llamacpp.py",
           "_llama_cpp_python": llama_cpp.__version__, "prompts": []}
    for i, (text, chat) in enumerate(PROMPTS):
        full = chatml(text) if chat else text
        ids = llm.tokenize(full.encode("utf-8"), add_bos=False, special=True)
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        entry = {"text": text, "chat": chat, "ids": ids}
        if i < 4:
            name = f"smollm2_logits_{i}.f32"
            logits.astype("<f4").tofile(os.path.join(OUT, name))
            entry["logits_file"] = name
        greedy, margins = [], []
        cur = logits
        for _ in range(N_GEN):
            tok = int(np.argmax(cur))
            top2 = np.sort(cur)[-2:]
            greedy.append(tok)
            margins.append(round(float(top2[1] - top2[0]), 5))
            llm.eval([tok])
            cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        entry["greedy"] = greedy
        entry["margins"] = margins
        out["prompts"].append(entry)
        print(i, repr(llm.detokenize(greedy).decode("utf-8", "replace"))[:100], file=sys.stderr)
    with open(os.path.join(OUT, "smollm2_llamacpp.json"), "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()

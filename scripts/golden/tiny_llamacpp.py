#!/usr/bin/env python3
"""Golden data for the tiny random-weight models: llama.cpp's logits and greedy tokens.

Builds every variant with build/bin/ferrox-make-tiny (the same bytes the C++ tests build in
memory), runs each through llama.cpp (the llama-cpp-python package, built by pip the ordinary
way) and writes tests/model/golden/tiny_llamacpp.json:
  {variant: {"prompt": [ids], "logits": [n_vocab floats of the last prompt position],
             "greedy": [16 greedily generated ids],
             "margins": [llama.cpp's top-1 minus top-2 logit before each greedy token]}}

Usage: python3 scripts/golden/tiny_llamacpp.py   (after `make build`)
"""
import json
import os
import subprocess
import sys
import tempfile

import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROMPT = [1, 17, 42, 99, 5, 250, 3, 77, 128, 64, 200, 31]
N_GREEDY = 16


def main():
    out = {"_generator": "scripts/golden/tiny_llamacpp.py",
           "_llama_cpp_python": llama_cpp.__version__}
    with tempfile.TemporaryDirectory() as d:
        paths = subprocess.check_output([os.path.join(ROOT, "build/bin/ferrox-make-tiny"), d],
                                        text=True).split()
        for path in paths:
            name = os.path.basename(path)[:-5]
            llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, n_threads=2,
                                  logits_all=True, verbose=False)
            llm.eval(PROMPT)
            logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            greedy, margins = [], []
            cur = logits
            for _ in range(N_GREEDY):
                tok = int(np.argmax(cur))
                top2 = np.sort(cur)[-2:]
                greedy.append(tok)
                margins.append(round(float(top2[1] - top2[0]), 6))
                llm.eval([tok])
                cur = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            out[name] = {"prompt": PROMPT, "logits": [round(float(x), 6) for x in logits],
                         "greedy": greedy, "margins": margins}
            print(name, "argmax", int(np.argmax(logits)), "greedy", greedy[:6], file=sys.stderr)
            del llm
    dst = os.path.join(ROOT, "tests/model/golden/tiny_llamacpp.json")
    with open(dst, "w") as f:
        json.dump(out, f, indent=0)
    print("wrote", dst, file=sys.stderr)


if __name__ == "__main__":
    main()

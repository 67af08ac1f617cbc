#!/usr/bin/env python3
"""Golden token ids of tests/tokenizer/corpus.txt from llama.cpp (llama-cpp-python).

Loads the default model's vocabulary (models/SmolLM2-135M-Instruct.Q4_1.gguf, placed by
`make model`) with llama_cpp.Llama(vocab_only=True) and writes
tests/tokenizer/golden/llamacpp_smollm2.txt: a '#' header line, then one line of ids per
corpus line (split on '\\n' only), from tokenize(line.encode(), add_bos=False,
special=False). ferrox: encode(line, add_special=false, parse_special=false).

Usage: python3 scripts/golden/tokenizer_llamacpp.py [model.gguf]
"""
import os
import sys

import llama_cpp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with open(os.path.join(ROOT, "tests/tokenizer/corpus.txt"), encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "corpus must end with a newline"
    lines = lines[:-1]
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    path = os.path.join(ROOT, "tests/tokenizer/golden/llamacpp_smollm2.txt")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(f"# llama-cpp-python {llama_cpp.__version__}, {os.path.basename(model)}, "
                f"tokenize(line, add_bos=False, special=False); "
                f"by scripts/golden/tokenizer_llamacpp.py\n")
        for line in lines:
            ids = llm.tokenize(line.encode("utf-8"), add_bos=False, special=False)
            f.write(" ".join(str(i) for i in ids) + "\n")
    print(f"wrote {path} ({len(lines)} lines)")


if __name__ == "__main__":
    main()

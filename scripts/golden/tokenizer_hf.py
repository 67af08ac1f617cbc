#!/usr/bin/env python3
"""Golden token ids of tests/tokenizer/corpus.txt from the HF `tokenizers` package.

For each tokenizer in ../shared/testdata/hf_tokenizers/{llama2,llama3,qwen3}/tokenizer.json,
writes tests/tokenizer/golden/hf_<name>.txt: a header line starting with '#', then one line
of space-separated ids per corpus line (corpus lines are split on '\\n' only, so U+2028,
U+0085 etc. stay inside their line). Encoding: Tokenizer.encode(line,
add_special_tokens=False), which still turns special tokens written in the text into their
ids (ferrox: encode(line, add_special=false, parse_special=true)).

Usage: python3 scripts/golden/tokenizer_hf.py [testdata_dir]
"""
import os
import sys

import tokenizers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAMES = ["llama2", "llama3", "qwen3"]


def main():
    testdata = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "..", "shared", "testdata")
    with open(os.path.join(ROOT, "tests/tokenizer/corpus.txt"), encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "", "corpus must end with a newline"
    lines = lines[:-1]
    out_dir = os.path.join(ROOT, "tests/tokenizer/golden")
    os.makedirs(out_dir, exist_ok=True)
    for name in NAMES:
        tok = tokenizers.Tokenizer.from_file(
            os.path.join(testdata, "hf_tokenizers", name, "tokenizer.json"))
        path = os.path.join(out_dir, f"hf_{name}.txt")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(f"# tokenizers {tokenizers.__version__}, hf_tokenizers/{name}/tokenizer.json, "
                    f"encode(line, add_special_tokens=False); by scripts/golden/tokenizer_hf.py\n")
            for line in lines:
                ids = tok.encode(line, add_special_tokens=False).ids
                f.write(" ".join(str(i) for i in ids) + "\n")
        print(f"wrote {path} ({len(lines)} lines)")


if __name__ == "__main__":
    main()

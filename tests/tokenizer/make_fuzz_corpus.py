#!/usr/bin/env python3
"""Writes tests/tokenizer/fuzz_corpus/, the seeds of tokenizer_fuzz.cc, and
tests/tokenizer/hf_pipeline_corpus/, the text seeds of hf_pipeline_fuzz.cc (run from anywhere).

A seed is one byte that picks the tokenizer and the flags (see tokenizer_fuzz.cc: low 3 bits
the family, bit 3 add_special, bit 4 parse_special), then the text. The texts are real ones:
slices of tests/tokenizer/corpus.txt (prose in many scripts, code, numbers, emoji, odd
whitespace) and the chat markup each family's templates emit. Files named crash-* or
regress-* are inputs the fuzzer found; this script leaves them alone.

hf_pipeline_fuzz.cc's text seeds: byte 0 = the component's index in
golden/hf_components/MANIFEST (bit 6 add_special, bit 7 parse_special), then the inputs its
golden file was made with. Its document seeds are the component files themselves (pass that
directory to the fuzzer as a second corpus).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fuzz_corpus")
FAMILIES = ["qwen3", "llama3", "llama2", "gpt-2", "llama-spm", "bert-bge", "phi-3"]
ADD_SPECIAL, PARSE_SPECIAL = 8, 16

MARKUP = {
    "qwen3": "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWeather in Paris?"
             "<|im_end|>\n<|im_start|>assistant\n<think>\nThe user wants the weather.\n</think>\n\n"
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
             "</tool_call><|im_end|>\n<|endoftext|>",
    "llama3": "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge "
              "Date: December 2023<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi!"
              "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>"
              "{\"name\": \"f\", \"parameters\": {}}<|eom_id|><|end_of_text|>",
    "llama2": "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHello there [/INST] Hi! </s>"
              "<s>[INST] And now? [/INST]<unk>",
    "gpt-2": "<|endoftext|>Hello world<|endoftext|> some text after",
    "llama-spm": "<s> [INST] Hello [/INST] Hi</s><unk> <0x0A>",
    "bert-bge": "[CLS] query: what is a panda? [SEP] passage: The giant panda is a bear. [SEP]"
                "[MASK] [PAD] [UNK]",
    "phi-3": "<|system|>\nYou are helpful.<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi!"
             "<|end|><|endoftext|>",
}


def corpus_lines():
    with open(os.path.join(HERE, "corpus.txt"), encoding="utf-8", newline="") as f:
        return f.read().split("\n")[:-1]


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if not name.startswith(("crash-", "regress-")):
            os.remove(os.path.join(OUT, name))
    lines = corpus_lines()
    n_slice = (len(lines) + len(FAMILIES) - 1) // len(FAMILIES)
    seeds = {}
    for i, fam in enumerate(FAMILIES):
        part = lines[i * n_slice:(i + 1) * n_slice]
        # Short slices keep the fuzzer fast (libFuzzer sizes inputs from the largest seed).
        for k in range(0, len(part), 10):
            text = "\n".join(part[k:k + 10])
            flags = (ADD_SPECIAL if k % 20 else 0) | (PARSE_SPECIAL if k % 30 == 0 else 0)
            seeds[f"{fam}-corpus{k // 10:02d}"] = bytes([i | flags]) + text.encode("utf-8")
        seeds[f"{fam}-markup-special"] = bytes([i | PARSE_SPECIAL | ADD_SPECIAL]) + MARKUP[fam].encode()
        seeds[f"{fam}-markup-plain"] = bytes([i]) + MARKUP[fam].encode()
        # Bytes that are not UTF-8: a cut character, a lone continuation byte, an overlong NUL.
        seeds[f"{fam}-invalid-utf8"] = bytes([i]) + "naï".encode()[:-1] + b" \x80 \xc0\x80 \xff\xfe"
    for name, data in sorted(seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(seeds)} seeds to {OUT}")
    write_pipeline_seeds()


def write_pipeline_seeds():
    out = os.path.join(HERE, "hf_pipeline_corpus")
    comp = os.path.join(HERE, "golden", "hf_components")
    os.makedirs(out, exist_ok=True)
    for name in os.listdir(out):
        if not name.startswith(("crash-", "regress-")):
            os.remove(os.path.join(out, name))
    with open(os.path.join(comp, "MANIFEST"), encoding="utf-8") as f:
        names = [l.strip() for l in f if l.strip() and not l.startswith("#")]
    assert len(names) <= 63
    n = 0
    for i, name in enumerate(names):
        with open(os.path.join(comp, name + ".expected.json"), encoding="utf-8") as f:
            inputs = json.load(f)["inputs"]
        for k in range(0, len(inputs), 15):
            flags = (64 if k % 30 == 0 else 0) | (128 if k % 45 == 0 else 0)
            with open(os.path.join(out, f"{name}-{k // 15:02d}"), "wb") as f:
                f.write(bytes([i | flags]) + "\n".join(inputs[k:k + 15]).encode("utf-8"))
            n += 1
        with open(os.path.join(out, f"{name}-invalid-utf8"), "wb") as f:
            f.write(bytes([i | 192]) + "naï".encode()[:-1] + b" \x80 \xc0\x80 \xff\xfe")
        n += 1
    print(f"wrote {n} seeds to {out}")


if __name__ == "__main__":
    main()

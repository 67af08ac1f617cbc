#!/usr/bin/env python3
"""Golden data for Gemma 3 270M (base model, Q4_K_M GGUF; models/, fetched by `make model-gemma3`):
llama.cpp's prompt tokens, greedy continuations and last-position logits.

Prompts: raw text (BOS added, as the vocab asks), and single-turn chats rendered with Gemma 3's
chat template (CHAT_TEMPLATE below; this base GGUF carries none, so the template is stored in
the golden file for the C++ test to render with ferrox's Jinja engine). The template writes
<bos> itself, so those are tokenized without adding another (ferrox's BOS rule). One raw
prompt is longer than the sliding window (gemma3.attention.sliding_window = 512), so the
local layers' window cuts into the prefill and into every decode step.

Generation ignores end-of-generation tokens (as llama-bench does) so every prompt yields 64
tokens. Writes tests/model/golden/gemma3_llamacpp.json ({template, n_swa, prompts: [{text,
chat, system?, rendered, ids, greedy, margins, logits_file?}]}) and, for three prompts, the
full last-position logits (262,144 little-endian float32) in tests/model/golden/gemma3_logits_<i>.f32.

The reference is llama-cpp-python (PyPI, built by pip the ordinary way), flash attention off
(its default), F16 KV cache, 2 threads, n_batch 512 (so the long prompt is two batches).
The committed data came from an AVX2 build (AMD Zen 3); llama.cpp built for AVX2 only
(GGML_NATIVE=OFF, GGML_AVX2=ON, GGML_AVX512=OFF, LLAMA_CPP_LIB_PATH pointing at it) gives the
same bits on an AVX-512 machine, and ferrox's ModelOptions::ggml_order reproduces them (an
AVX-512 build of llama.cpp runs AVX-512 variants of its repacked and tiled kernels, not checked
here).
Usage: python3 scripts/golden/gemma3_llamacpp.py
"""
import json
import os
import sys

import jinja2
import jinja2.sandbox
import llama_cpp
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models/gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(ROOT, "tests/model/golden")
N_GEN = 64
N_CTX = 1024

# Gemma 3's chat template (google/gemma-3-*-it tokenizer_config.json), text parts only.
CHAT_TEMPLATE = (
    "{{ bos_token }}\n"
    "{%- if messages[0]['role'] == 'system' -%}\n"
    "    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n"
    "    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n"
    "    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n"
    "{%- else -%}\n"
    "    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n"
    "{%- endif -%}\n"
    "{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n"
    "    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n"
    "        {%- set role = \"model\" -%}\n"
    "    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n"
    "    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n"
    "        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n"
    "        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n"
    "                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n"
    "                {{ item['text'] | trim }}\n"
    "            {%- endif -%}\n"
    "        {%- endfor -%}\n"
    "    {%- else -%}\n"
    "        {{ raise_exception(\"Invalid content type\") }}\n"
    "    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n"
)


def long_prompt():
    # ~700 tokens of varied, deterministic prose: longer than the 512-position window.
    colors = ["red", "blue", "green", "yellow", "purple", "orange", "silver", "golden"]
    animals = ["fox", "heron", "badger", "otter", "falcon", "hare", "lynx", "crane", "beaver"]
    places = ["river", "forest", "hill", "meadow", "harbour", "valley", "marsh"]
    parts = ["A traveller kept a notebook of the animals she met on a long journey north."]
    for i in range(40):
        parts.append(f"On day {i + 1} she saw a {colors[i % 8]} {animals[i % 9]} near the "
                     f"{places[i % 7]}, and it was {3 + (i * 7) % 11} steps away.")
    parts.append("At the end of the journey she counted the animals and wrote that the first one she had seen was a")
    return " ".join(parts)


# (text, chat, system)
PROMPTS = [
    ("The capital of France is", False, None),
    ("def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", False, None),
    ("Once upon a time, in a small village by the sea,", False, None),
    ("1, 2, 3, 5, 8, 13,", False, None),
    (long_prompt(), False, None),
    ("What is the capital of France?", True, None),
    ("Write a haiku about the ocean.", True, None),
    ("Explain in two sentences why the sky is blue.", True, None),
    ("Translate to French: I would like a cup of coffee, please.", True, None),
    ("List three prime numbers greater than 100.", True, "You are a helpful assistant. Answer briefly."),
]
LOGITS_FOR = {0: 0, 4: 1, 5: 2}  # prompt index -> logits file number


def render(text, system):
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    return env.from_string(CHAT_TEMPLATE).render(messages=messages, add_generation_prompt=True,
                                                 bos_token="<bos>", eos_token="<eos>")


def main():
    llm = llama_cpp.Llama(model_path=MODEL, n_ctx=N_CTX, n_batch=512, n_threads=2,
                          logits_all=True, verbose=False)
    n_swa = int(llm.metadata.get("gemma3.attention.sliding_window", 0))
    out = {"_generator": "scripts/golden/gemma3_llamacpp.py",
           "_llama_cpp_python": llama_cpp.__version__, "template": CHAT_TEMPLATE, "n_swa": n_swa,
           "prompts": []}
    for i, (text, chat, system) in enumerate(PROMPTS):
        full = render(text, system) if chat else text
        # BOS rule: add one unless the rendered text already starts with it.
        ids = llm.tokenize(full.encode("utf-8"), add_bos=not full.startswith("<bos>"), special=True)
        assert len(ids) + N_GEN <= N_CTX
        llm.reset()
        llm.eval(ids)
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        entry = {"text": text, "chat": chat}
        if system:
            entry["system"] = system
        entry["rendered"] = full
        entry["ids"] = ids
        if i in LOGITS_FOR:
            name = f"gemma3_logits_{LOGITS_FOR[i]}.f32"
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
        print(i, len(ids), repr(llm.detokenize(greedy).decode("utf-8", "replace"))[:100], file=sys.stderr)
    assert any(len(p["ids"]) > n_swa for p in out["prompts"]), "no prompt exercises the sliding window"
    with open(os.path.join(OUT, "gemma3_llamacpp.json"), "w") as f:
        json.dump(out, f, indent=0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Constrained decoding speed (issue 16): decode tokens/s with a JSON-schema constraint against
the same request unconstrained, at 1 and 16 concurrent streams on ferrox, and the same ratio
for llama.cpp's grammar sampling (llama-cpp-python, in-process, one stream) on the same model,
schema and prompt, in the same run. Plus the compile time of a 50-property nested schema
(build/bin/ferrox-grammar-bench).

Both sides run every request to max_tokens: the schema asks for an array of 40 strings (longer
than max_tokens), the free request ignores end of generation. Tokens/s counts the tokens after
the first (the decode phase); with N streams it is the aggregate over the window from the first
stream's first token to the last stream's end.

Usage:
  python3 bench/bench_structured.py [--ferrox build/bin/ferrox] [-m MODEL] [-t 2] [--tokens 128]
                                    [--rounds 3] [--no-llamacpp] [--json-out F]
"""
import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = {"type": "object",
          "properties": {"items": {"type": "array", "items": {"type": "string", "maxLength": 30},
                                   "minItems": 40, "maxItems": 40}},
          "required": ["items"], "additionalProperties": False}
QUESTION = "List forty animals, as JSON."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def one_stream(client, base, constrained, seed, n_tokens):
    body = {"model": "", "messages": [{"role": "user", "content": QUESTION}], "temperature": 1, "seed": seed,
            "max_tokens": n_tokens, "stream": True, "stream_options": {"include_usage": True}}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA, "strict": True}}
    else:
        body["ignore_eos"] = True
    first = None
    n = 0
    async with client.stream("POST", base + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200, await r.aread()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            c = json.loads(line[6:])
            if c.get("usage"):
                n = c["usage"]["completion_tokens"]
            if c.get("choices") and c["choices"][0]["delta"].get("content") and first is None:
                first = time.monotonic()
    return first, time.monotonic(), n


async def ferrox_rate(base, constrained, n_streams, n_tokens, seed0):
    async with httpx.AsyncClient(timeout=600) as client:
        res = await asyncio.gather(*[one_stream(client, base, constrained, seed0 + i, n_tokens)
                                     for i in range(n_streams)])
    t0 = min(r[0] for r in res)
    t1 = max(r[1] for r in res)
    toks = sum(r[2] - 1 for r in res)
    assert all(r[2] == n_tokens for r in res), [r[2] for r in res]
    return toks / (t1 - t0)


def bench_ferrox(args):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([args.ferrox, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                             "-t", str(args.threads), "-np", "16", "-c", "8192"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        out = {}
        # The first constrained request compiles the schema and computes its masks (cold).
        out["cold_1"] = asyncio.run(ferrox_rate(base, True, 1, args.tokens, 1000))
        for n in (1, 16):
            free, cons = [], []
            for k in range(args.rounds):  # interleaved, so drift hits both alike
                free.append(asyncio.run(ferrox_rate(base, False, n, args.tokens, 10 * k)))
                cons.append(asyncio.run(ferrox_rate(base, True, n, args.tokens, 10 * k)))
            out[f"free_{n}"] = max(free)
            out[f"constrained_{n}"] = max(cons)
        return out
    finally:
        proc.terminate()
        proc.wait()


def bench_llamacpp(args):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=args.model, n_threads=args.threads, n_ctx=2048, verbose=False)
    prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    eog = set()
    for t in ("<|im_end|>", "<|endoftext|>"):
        eog.update(llm.tokenize(t.encode(), add_bos=False, special=True))
    grammar = llama_cpp.LlamaGrammar.from_json_schema(json.dumps(SCHEMA), verbose=False)

    def rate(constrained, seed):
        kw = {"grammar": grammar} if constrained else {"logit_bias": {t: -1e9 for t in eog}}
        first = None
        n = 0
        for chunk in llm.create_completion(prompt, max_tokens=args.tokens, temperature=1, seed=seed, stream=True,
                                           **kw):
            n += 1
            if first is None:
                first = time.monotonic()
        t1 = time.monotonic()
        return (n - 1) / (t1 - first), n

    rate(True, 0)  # warm
    free, cons = [], []
    for k in range(args.rounds):
        free.append(rate(False, k)[0])
        cons.append(rate(True, k)[0])
    return {"free_1": max(free), "constrained_1": max(cons)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-llamacpp", action="store_true")
    ap.add_argument("--json-out")
    args = ap.parse_args()

    res = {"ferrox": bench_ferrox(args)}
    if not args.no_llamacpp:
        res["llamacpp"] = bench_llamacpp(args)
    gb = os.path.join(os.path.dirname(args.ferrox), "ferrox-grammar-bench")
    if os.path.exists(gb):
        res["grammar_bench"] = subprocess.run([gb, "-m", args.model], capture_output=True, text=True).stdout

    f = res["ferrox"]
    print(f"| engine | streams | free tok/s | constrained tok/s | constrained / free |")
    print(f"|---|---:|---:|---:|---:|")
    for n in (1, 16):
        print(f"| ferrox | {n} | {f[f'free_{n}']:.1f} | {f[f'constrained_{n}']:.1f} | "
              f"{f[f'constrained_{n}'] / f[f'free_{n}']:.3f} |")
    if "llamacpp" in res:
        l = res["llamacpp"]
        print(f"| llama.cpp | 1 | {l['free_1']:.1f} | {l['constrained_1']:.1f} | "
              f"{l['constrained_1'] / l['free_1']:.3f} |")
        print(f"\nferrox / llama.cpp, constrained, 1 stream: {f['constrained_1'] / l['constrained_1']:.2f}x")
    print(f"ferrox first constrained request (cold masks): {f['cold_1']:.1f} tok/s")
    if "grammar_bench" in res:
        print("\n" + res["grammar_bench"])
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())

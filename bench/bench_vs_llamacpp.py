#!/usr/bin/env python3
"""Side-by-side prompt and generation speed: ferrox vs llama.cpp on the same GGUF, same run.

ferrox: `build/bin/ferrox run` (its stderr timing lines). llama.cpp: the llama-cpp-python
package (pip-built, the reference engine), wall time around its eval calls. The two
alternate, R repetitions each; both decode greedily past end-of-generation for exactly N tokens.

Usage: python3 bench/bench_vs_llamacpp.py [-m MODEL] [-t THREADS] [-n N] [-r R] [--prompt-tokens P]
Prints a markdown table (t/s mean +- sd and the ratio ferrox / llama.cpp).
"""
import argparse
import os
import platform
import re
import statistics

import numpy as np
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FERROX = os.path.join(ROOT, "build/bin/ferrox")
TEXT = ("The history of the printing press begins in the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from "
        "those used for wine. Within decades, presses spread across Europe, books became "
        "cheaper, literacy rose, and ideas travelled faster than ever before. ")


def ferrox_run(model, prompt, n, threads):
    out = subprocess.run([FERROX, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                          "-t", str(threads), "--ignore-eos"], capture_output=True, text=True,
                         check=True)
    pp = re.search(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", out.stderr)
    tg = re.search(r"eval time =\s*([\d.]+) ms /\s*(\d+) runs", out.stderr)
    return (int(pp.group(2)) * 1000 / float(pp.group(1)), int(tg.group(2)) * 1000 / float(tg.group(1)))


def llamacpp_run(llm, prompt_ids, n):
    # Wall time around llama.cpp's eval calls; the argmax in numpy between decode steps costs
    # ~0.05 ms, under 1% of a step (llama.cpp's own perf counters read zero through this
    # binding).
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt_ids)
    t1 = time.perf_counter()
    for _ in range(n - 1):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        llm.eval([tok])
    t2 = time.perf_counter()
    return (len(prompt_ids) / (t1 - t0), (n - 1) / (t2 - t1))


def fmt(xs):
    return f"{statistics.mean(xs):.1f} ± {statistics.pstdev(xs):.1f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    a = ap.parse_args()

    import llama_cpp
    llm = llama_cpp.Llama(model_path=a.m, n_ctx=1024, n_batch=512, n_threads=a.t,
                          n_threads_batch=a.t, logits_all=False, verbose=False)
    ids = llm.tokenize(TEXT.encode() * 8, add_bos=False)[: a.prompt_tokens]
    prompt = llm.detokenize(ids).decode()
    ids = llm.tokenize(prompt.encode(), add_bos=False)
    res = {"ferrox": ([], []), "llama.cpp": ([], [])}
    for _ in range(a.r):
        pp, tg = ferrox_run(a.m, prompt, a.n, a.t)
        res["ferrox"][0].append(pp)
        res["ferrox"][1].append(tg)
        pp, tg = llamacpp_run(llm, ids, a.n)
        res["llama.cpp"][0].append(pp)
        res["llama.cpp"][1].append(tg)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    print(f"model {os.path.basename(a.m)}, {a.t} threads, prompt {len(ids)} tokens, {a.n} generated, "
          f"{a.r} reps alternating; CPU {cpu}; llama-cpp-python {llama_cpp.__version__}\n")
    print("| test | ferrox t/s | llama.cpp t/s | ferrox / llama.cpp |")
    print("|---|---|---|---|")
    for i, test in enumerate((f"pp{len(ids)}", f"tg{a.n}")):
        f, l = res["ferrox"][i], res["llama.cpp"][i]
        print(f"| {test} | {fmt(f)} | {fmt(l)} | {statistics.mean(f) / statistics.mean(l):.2f} |")


if __name__ == "__main__":
    main()

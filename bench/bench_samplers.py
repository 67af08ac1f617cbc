#!/usr/bin/env python3
"""Time per token of llama.cpp's full sampler set against greedy, 16 streams at once.

Starts `ferrox serve` on the default model and, per round, sends 16 concurrent /completion
requests of N tokens each (ignore_eos, distinct prompts) under each configuration, in an
order that rotates every round: greedy (temperature 0), the default sampled chain, the full
chain (penalties, DRY, top-n-sigma, top-k, typical-p, top-p, min-p, XTC, dynamic
temperature), the full chain without top-k (every candidate through every sampler), mirostat
v1 and v2. Reports the median over rounds of the wall time per generated token of one stream
(wall / N) and the aggregate tokens/s, with the ratio to greedy.

    python3 bench/bench_samplers.py [--ferrox build/bin/ferrox] [-r 5] [-n 128] [--clients 16]
"""
import argparse
import concurrent.futures as cf
import os
import socket
import statistics
import subprocess
import sys
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FULL = {"temperature": 0.8, "repeat_penalty": 1.1, "frequency_penalty": 0.1, "presence_penalty": 0.1,
        "dry_multiplier": 0.8, "dry_base": 1.75, "dry_allowed_length": 2, "dry_penalty_last_n": -1,
        "top_n_sigma": 2.0, "top_k": 40, "typical_p": 0.95, "top_p": 0.95, "min_p": 0.05,
        "xtc_probability": 0.5, "xtc_threshold": 0.1, "dynatemp_range": 0.3, "dynatemp_exponent": 1.0}
CONFIGS = {
    "greedy": {"temperature": 0},
    "default sampled (top-k 40, top-p 0.95, min-p 0.05, temp 0.8)": {"temperature": 0.8},
    "full chain": FULL,
    "full chain, top-k off": dict(FULL, top_k=0),
    "mirostat v1": {"temperature": 0.8, "mirostat": 1, "mirostat_tau": 5.0, "mirostat_eta": 0.1},
    "mirostat v2": {"temperature": 0.8, "mirostat": 2, "mirostat_tau": 5.0, "mirostat_eta": 0.1},
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_round(base, fields, n, clients):
    def req(i):
        body = {"prompt": f"Story {i}: once upon a time, in a land far away,", "n_predict": n,
                "ignore_eos": True, "seed": 1000 + i, "cache_prompt": False, **fields}
        r = httpx.post(base + "/completion", json=body, timeout=600)
        r.raise_for_status()
        return r.json()["tokens_predicted"]

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        toks = list(ex.map(req, range(clients)))
    wall = time.perf_counter() - t0
    assert all(t == n for t in toks), toks
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=None)
    a = ap.parse_args()
    port = free_port()
    cmd = [a.ferrox, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port), "-np", str(a.clients),
           "-c", str(a.clients * (a.n + 64))]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        names = list(CONFIGS)
        for name in names:  # warm-up (DRY's breakers are processed at the first DRY request)
            one_round(base, CONFIGS[name], 8, a.clients)
        walls = {name: [] for name in names}
        for r in range(a.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                walls[name].append(one_round(base, CONFIGS[name], a.n, a.clients))
        g = statistics.median(walls["greedy"])
        print(f"{a.clients} streams x {a.n} tokens, medians of {a.rounds} rounds, {os.cpu_count()} cores")
        print("| sampling | ms / token / stream | tok/s (all streams) | / greedy |")
        print("|---|---|---|---|")
        for name in names:
            w = statistics.median(walls[name])
            print(f"| {name} | {1000 * w / a.n:.2f} | {a.clients * a.n / w:.0f} | {w / g:.3f} |")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())

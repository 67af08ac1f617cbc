#!/usr/bin/env python3
"""The prompt cache as a coding agent uses it (issue 45), against `ferrox serve`.

restart: a 2,000-token prompt's time to first token cold, warm (the pool has it) and after a
         restart with --cache-dir (read back from disk), and whether the greedy answers agree.
replay:  a Claude Code-shaped session over /v1/messages: a long system prompt and tool list,
         then turns that each add a tool call and a tool result of a few hundred tokens, with a
         cache_control breakpoint on the last message and a session header, as Claude Code
         sends them. Per turn: the prompt, its new tokens, the tokens computed again
         (prompt - cache read) and their ratio to the new ones; the target is <= 1.2x.

    python3 bench/bench_agent_cache.py restart
    python3 bench/bench_agent_cache.py replay --turns 100                                # default model, to ~8k
    python3 bench/bench_agent_cache.py replay --turns 100 -m models/gemma-3-270m-q4_k_m.gguf -c 32768  # to ~30k

Prints a Markdown table and a JSON summary line.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, model, *extra):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
                                      *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("ferrox serve exited")
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("ferrox serve did not become ready")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def stream_completion(base, prompt, n=16):
    """(ttft seconds, text, usage) of a streamed /v1/completions request."""
    t0 = time.perf_counter()
    ttft, text, usage = None, "", None
    with httpx.stream("POST", base + "/v1/completions", timeout=600,
                      json={"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}}) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            j = json.loads(line[6:])
            if j.get("choices") and j["choices"][0].get("text"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                text += j["choices"][0]["text"]
            if j.get("usage"):
                usage = j["usage"]
    return ttft, text, usage


def restart(args):
    words = " ".join(f"Step {i}: open src/module_{i}.cc, read its tests, and note what they check." for i in range(80))
    cache = tempfile.mkdtemp(prefix="ferrox_bench_kv_")
    rows = []
    try:
        for r in range(args.repetitions):
            shutil.rmtree(cache, ignore_errors=True)
            prompt = f"Run {r}. " + words
            s = Server(args.ferrox, args.model, "--cache-dir", cache, "-t", str(args.threads))
            try:
                cold = stream_completion(s.base, prompt)
                warm = stream_completion(s.base, prompt)
            finally:
                s.stop()
            s = Server(args.ferrox, args.model, "--cache-dir", cache, "-t", str(args.threads))
            try:
                disk = stream_completion(s.base, prompt)
            finally:
                s.stop()
            rows.append((cold, warm, disk))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    print("| run | prompt tokens | cold TTFT ms | warm TTFT ms (cached) | after restart TTFT ms (cached) | same text |")
    print("|---|---|---|---|---|---|")
    for i, (c, w, d) in enumerate(rows):
        n = c[2]["prompt_tokens"]
        cached = lambda x: x[2]["prompt_tokens_details"]["cached_tokens"]
        print(f"| {i} | {n} | {c[0] * 1e3:.0f} | {w[0] * 1e3:.0f} ({cached(w)}) | {d[0] * 1e3:.0f} ({cached(d)}) | "
              f"{c[1] == w[1] == d[1]} |")
    med = lambda k: statistics.median(r[k][0] for r in rows)
    print(json.dumps({"bench": "restart", "prompt_tokens": rows[0][0][2]["prompt_tokens"],
                      "cold_ttft_ms": med(0) * 1e3, "warm_ttft_ms": med(1) * 1e3, "restart_ttft_ms": med(2) * 1e3,
                      "restart_over_cold": med(2) / med(0),
                      "restart_cached_share": min(r[2][2]["prompt_tokens_details"]["cached_tokens"] / r[2][2]["prompt_tokens"]
                                                  for r in rows),
                      "same_text": all(r[0][1] == r[1][1] == r[2][1] for r in rows)}))


SYSTEM = ("You are an interactive CLI tool that helps users with software engineering tasks. "
          "Use the instructions below and the tools available to you to assist the user. ") + " ".join(
    f"Rule {i}: when you change a file, read it first, keep the style of the code around it, run the tests "
    f"that cover it, and report what you changed in one short paragraph." for i in range(40))
TOOLS = [{"name": name, "description": f"{desc} " * 4,
          "input_schema": {"type": "object", "properties": {p: {"type": "string", "description": f"The {p}."}
                                                            for p in params}, "required": params[:1]}}
         for name, desc, params in [("Read", "Reads a file from the local filesystem.", ["file_path", "offset", "limit"]),
                                    ("Edit", "Performs exact string replacements in files.", ["file_path", "old", "new"]),
                                    ("Bash", "Executes a bash command in a persistent shell.", ["command", "timeout"]),
                                    ("Grep", "Searches file contents with a regular expression.", ["pattern", "path"]),
                                    ("Glob", "Finds files by name pattern.", ["pattern", "path"])]]


def tool_result(k, lines):
    return "\n".join(f"{k * 100 + i:5d}  int helper_{k}_{i}(int x) {{ return x * {i} + {k}; }}  // step {k}"
                     for i in range(lines))


def replay(args):
    s = Server(args.ferrox, args.model, "-c", str(args.ctx), "-np", "1", "-t", str(args.threads))
    headers = {"x-api-key": "x", "anthropic-version": "2023-06-01", "x-claude-code-session-id": "bench-session"}
    messages = [{"role": "user", "content": "Find and fix the failing test in this repository."}]
    rows = []
    prev_prompt = 0
    try:
        for turn in range(args.turns):
            for m in messages:  # one breakpoint, on the last message, as Claude Code sends
                if isinstance(m["content"], list):
                    for b in m["content"]:
                        b.pop("cache_control", None)
            last = messages[-1]
            if isinstance(last["content"], str):
                last["content"] = [{"type": "text", "text": last["content"]}]
            last["content"][-1]["cache_control"] = {"type": "ephemeral"}
            body = {"model": "m", "max_tokens": args.gen, "temperature": 0, "system": SYSTEM, "tools": TOOLS,
                    "messages": messages}
            t0 = time.perf_counter()
            r = httpx.post(s.base + "/v1/messages", headers=headers, json=body, timeout=600)
            dt = time.perf_counter() - t0
            if r.status_code != 200:
                print(f"turn {turn}: HTTP {r.status_code} {r.text[:300]}", file=sys.stderr)
                break
            j = r.json()
            u = j["usage"]
            prompt = u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"]
            new = prompt - prev_prompt if turn else prompt
            computed = prompt - u["cache_read_input_tokens"]
            rows.append({"turn": turn, "prompt": prompt, "new": new, "computed": computed,
                         "ratio": computed / max(1, new), "seconds": dt})
            prev_prompt = prompt
            # The answer goes back as the assistant turn (its text as the model wrote it), then a
            # tool call of the agent's and its result.
            text = "".join(b.get("text", "") for b in j["content"] if b["type"] == "text")
            call_id = f"toolu_{turn:04d}"
            messages.append({"role": "assistant", "content": ([{"type": "text", "text": text}] if text else []) + [
                {"type": "tool_use", "id": call_id, "name": "Read",
                 "input": {"file_path": f"src/module_{turn}.cc"}}]})
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call_id, "content": tool_result(turn, args.lines)}]})
            if prompt + 2 * (args.lines * 30 + args.gen + 50) > args.ctx:
                break
        metrics = httpx.get(s.base + "/metrics").text
    finally:
        s.stop()
    print("| turn | prompt | new tokens | computed | computed / new | s |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        if row["turn"] % 10 == 0 or row["ratio"] > 1.2 or row is rows[-1]:
            print(f"| {row['turn']} | {row['prompt']} | {row['new']} | {row['computed']} | {row['ratio']:.2f} | "
                  f"{row['seconds']:.2f} |")
    misses = [line for line in metrics.splitlines()
              if line.startswith("ferrox_prompt_cache_misses_total{") and not line.endswith(" 0")]
    later = rows[1:]
    print(json.dumps({"bench": "replay", "turns": len(rows), "final_prompt": rows[-1]["prompt"],
                      "max_ratio": max(r["ratio"] for r in later), "median_ratio": statistics.median(r["ratio"] for r in later),
                      "turns_over_1.2": sum(r["ratio"] > 1.2 for r in later),
                      "total_seconds": sum(r["seconds"] for r in rows), "misses": misses}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["restart", "replay"])
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("-c", "--ctx", type=int, default=8192)
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--lines", type=int, default=8, help="lines of each tool result (~30 tokens each)")
    ap.add_argument("--gen", type=int, default=24, help="max_tokens of each turn")
    args = ap.parse_args()
    restart(args) if args.mode == "restart" else replay(args)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Speculative decoding (prompt lookup) on and off, in one server, on the same prompts.

One `ferrox serve` (default model, 1 slot), measured request by request, alternating
"speculative": false and the server's default (speculation on) so a change in the machine's
load hits both. Every request is greedy and streamed through POST /v1/completions with the
model's chat markup; the figure is the decode rate, (tokens - 1) / (time from the first to the
last token), so prompt time (cached after the first request of each prompt) does not count.
The two outputs of a prompt must be the same text (speculation never changes the output), and
the script fails otherwise. Acceptance comes from /metrics (draft tokens verified, accepted).

Tasks: input-grounded (copy code with one change, quote and summarize a document, rewrite a
list in a repeated structure) and open-ended (a story, an explanation), where prompt lookup
has little to draft from and the server must keep its cost down.

Usage:
  python3 bench/bench_spec.py [--ferrox build/bin/ferrox] [-m MODEL] [-t 2] [-r 3] [-n 256]
                              [--ferrox-extra ARGS] [--json-out FILE]
Prints markdown; paste it into bench/RESULTS.md with the command line.
"""
import argparse
import json
import os
import re
import shlex
import statistics
import sys

import httpx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serving import DEFAULT_MODEL, ROOT, ServerProc, log, stream_completion  # noqa: E402


# The inputs are fixed here (not read from the repository, whose files change) so that figures
# from different sessions compare.
CODE = """#include <algorithm>
#include <cstdint>
#include <vector>

// A fixed-capacity ring buffer of samples with a running mean.
class RingBuffer {
public:
    explicit RingBuffer(size_t capacity) : data_(capacity, 0.0), sum_(0.0) {}

    void push(double x) {
        if (size_ == data_.size()) {
            sum_ -= data_[head_];
        } else {
            ++size_;
        }
        data_[head_] = x;
        sum_ += x;
        head_ = (head_ + 1) % data_.size();
    }

    double mean() const { return size_ == 0 ? 0.0 : sum_ / static_cast<double>(size_); }

    double max() const {
        double best = data_[0];
        for (size_t i = 1; i < size_; ++i) best = std::max(best, data_[i]);
        return best;
    }

    size_t size() const { return size_; }
    bool full() const { return size_ == data_.size(); }

private:
    std::vector<double> data_;
    double sum_;
    size_t head_ = 0;
    size_t size_ = 0;
};
"""

DOC = """The lighthouse on Carrow Point was built in 1871 from granite quarried on the island itself. \
Its lamp burned whale oil for the first twenty years, then kerosene, and since 1952 it has been lit by \
electricity from a cable laid across the sound.

The last keeper, Margaret Hale, left in 1987 when the light was automated. She kept a logbook every night \
for thirty-one years, recording the weather, the ships that passed and the birds that struck the glass \
during the autumn migration.

Today the tower is owned by a local trust. Visitors can climb its 112 steps between May and September, \
and the keeper's cottage has been turned into a small museum that displays her logbooks, the original \
brass lens and photographs of the storms of 1953."""


def tasks():
    code, doc = CODE, DOC
    items = ["apple 3 red", "banana 12 yellow", "cherry 40 dark red", "grape 25 green", "lemon 7 yellow",
             "lime 9 green", "mango 4 orange", "pear 6 green", "plum 11 purple", "kiwi 8 brown",
             "peach 5 orange", "melon 2 green"]
    return [
        ("code: copy with one change", "grounded",
         "Here is a C++ file:\n```cpp\n" + code + "```\nRewrite the file exactly as it is, but rename the "
         "method `push` to `add`. Output only the code."),
        ("document: quote and summarize", "grounded",
         "Repeat the following text exactly, then summarize it in three sentences.\n\n" + doc),
        ("list: repeated structure", "grounded",
         "Here is a list of fruits with a count and a color:\n" + "\n".join(items) +
         "\nWrite each line as a JSON object with the keys name, count and color, one per line."),
        ("story", "open", "Write a short story about a dragon who learns to bake bread."),
        ("explanation", "open", "Explain how a refrigerator keeps food cold, for a ten-year-old."),
    ]


def chat(text):
    return "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n"


def spec_metrics(base):
    text = httpx.get(base + "/metrics", timeout=30).text
    out = {"drafted": 0.0, "accepted": 0.0}
    for line in text.splitlines():
        m = re.match(r"ferrox_spec_(draft|accepted)_tokens_total(\{[^}]*\})? ([0-9.e+]+)", line)
        if m:
            out["drafted" if m.group(1) == "draft" else "accepted"] += float(m.group(3))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("-n", "--n-gen", type=int, default=256)
    ap.add_argument("--ferrox-extra", default="")
    ap.add_argument("--json-out")
    args = ap.parse_args()

    srv = ServerProc("ferrox", lambda port: [args.ferrox, "serve", "-m", args.model, "--port", str(port),
                                             "-t", str(args.threads), "-np", "1"] + shlex.split(args.ferrox_extra))
    model = os.path.basename(args.model)[:-5] if args.model.endswith(".gguf") else os.path.basename(args.model)
    model = httpx.get(srv.base + "/v1/models").json()["data"][0]["id"]
    results = []
    try:
        for name, kind, prompt in tasks():
            body = dict(model=model, prompt=chat(prompt), temperature=0, max_tokens=args.n_gen)
            stream_completion(srv.base, dict(body, max_tokens=1, speculative=False))  # caches the prompt
            rates = {"off": [], "on": []}
            texts = {}
            drafted = accepted = 0.0
            for rep in range(args.repetitions):
                for mode in ("off", "on") if rep % 2 == 0 else ("on", "off"):
                    m0 = spec_metrics(srv.base)
                    extra = {"speculative": False} if mode == "off" else {}
                    ttft, total, n, _, text = stream_completion(srv.base, dict(body, **extra))
                    m1 = spec_metrics(srv.base)
                    if mode == "on":
                        drafted += m1["drafted"] - m0["drafted"]
                        accepted += m1["accepted"] - m0["accepted"]
                    elif m1["drafted"] != m0["drafted"]:
                        raise SystemExit(f"{name}: a request with speculative: false drafted tokens")
                    if n > 1 and total > ttft:
                        rates[mode].append((n - 1) / (total - ttft))
                    texts.setdefault(mode, text)
                    if text != texts[mode] or (mode in texts and texts.get("off", text) != texts.get("on", text)):
                        raise SystemExit(f"{name}: the output changed with speculation:\n{texts}\n---\n{text}")
                    log(f"{name} [{mode}] {n} tokens, {rates[mode][-1] if rates[mode] else 0:.1f} t/s")
            results.append(dict(task=name, kind=kind, tokens=n, off=rates["off"], on=rates["on"],
                                drafted=drafted, accepted=accepted))
    finally:
        srv.stop()

    def fmt(xs):
        if not xs:
            return "-"
        sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
        return f"{statistics.mean(xs):.1f} ± {sd:.1f}"

    print(f"model {os.path.basename(args.model)}, {args.threads} threads, 1 slot, greedy, "
          f"max_tokens {args.n_gen}, {args.repetitions} repetitions each")
    print()
    print("| task | kind | tokens | t/s without | t/s with | with / without | drafted | accepted | acceptance |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        ratio = statistics.mean(r["on"]) / statistics.mean(r["off"]) if r["on"] and r["off"] else float("nan")
        acc = r["accepted"] / r["drafted"] if r["drafted"] else float("nan")
        print(f"| {r['task']} | {r['kind']} | {r['tokens']} | {fmt(r['off'])} | {fmt(r['on'])} | {ratio:.2f} | "
              f"{r['drafted']:.0f} | {r['accepted']:.0f} | {acc:.2f} |")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

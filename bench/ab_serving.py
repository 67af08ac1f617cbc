#!/usr/bin/env python3
"""A/B of ferrox servers: two (or more) binaries or configurations up at once, loaded in turn.

This host's speed drifts by 10-30 % within minutes, so two configurations measured one after
the other differ by the drift. Here every server runs at the same time (an idle server costs
nothing) and each round loads them in turn, alternating which goes first; the figures are
medians over the rounds. Load: bench_serving.py's throughput test (C streams of N tokens read
by one thread), plus the engine's per-step overhead from /metrics over each run.

A server is a binary, optionally followed by serve arguments after a colon:

  python3 bench/ab_serving.py build/bin/ferrox /tmp/ferrox-before -r 10 --clients 1,16
  python3 bench/ab_serving.py build/bin/ferrox "build/bin/ferrox:--spec-ngram 0" -r 10
"""
import argparse
import os
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving as bs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("servers", nargs="+", help="BINARY or 'BINARY:SERVE ARGS'")
    ap.add_argument("-m", "--model", default=bs.DEFAULT_MODEL)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-np", "--parallel", type=int, default=16)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("-r", "--rounds", type=int, default=8)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--clients", default="1,16")
    args = ap.parse_args()
    clients = [int(c) for c in args.clients.split(",") if c]
    model_name = os.path.splitext(os.path.basename(args.model))[0]

    servers = []
    try:
        for i, spec in enumerate(args.servers):
            binary, _, extra = spec.partition(":")
            servers.append(bs.ServerProc(f"ab{i}", lambda port, b=binary, e=extra: [
                b, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port), "-np",
                str(args.parallel), "-c", str(args.ctx), "-t", str(args.threads), *shlex.split(e)]))
        for s in servers:  # warm-up
            bs.throughput(s, min(4, max(clients)), 4, model_name, {})
        label = {s.name: spec for s, spec in zip(servers, args.servers)}
        tok = {s.name: {c: [] for c in clients} for s in servers}
        ovh = {s.name: {c: [] for c in clients} for s in servers}
        for r in range(args.rounds):
            for c in clients:
                for s in servers if r % 2 == 0 else servers[::-1]:
                    before = bs.engine_times(s.base)
                    res = bs.throughput(s, c, args.n_gen, model_name, {})
                    after = bs.engine_times(s.base)
                    tok[s.name][c].append(res["tok_s"])
                    if before and after and after[0] > before[0]:
                        ovh[s.name][c].append(100 * (1 - (after[1] - before[1]) / (after[0] - before[0])))
            bs.log(f"round {r + 1}/{args.rounds} done")
    finally:
        for s in servers:
            s.stop()

    print(f"`python3 bench/ab_serving.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}`")
    print()
    print("| server | streams | tok/s median | mean ± sd | max | per-step overhead median (%) |")
    print("|---|---:|---:|---:|---:|---:|")
    for c in clients:
        for s in servers:
            x, o = tok[s.name][c], ovh[s.name][c]
            sd = statistics.stdev(x) if len(x) > 1 else 0.0
            print(f"| `{label[s.name]}` | {c} | {statistics.median(x):.1f} | {statistics.mean(x):.1f} ± {sd:.1f} | "
                  f"{max(x):.1f} | {statistics.median(o) if o else float('nan'):.2f} |")
    if len(clients) > 1:
        lo, hi = min(clients), max(clients)
        for s in servers:
            print(f"\n`{label[s.name]}`: {hi} / {lo} streams (medians) = "
                  f"{statistics.median(tok[s.name][hi]) / statistics.median(tok[s.name][lo]):.2f}", end="")
        print()


if __name__ == "__main__":
    sys.exit(main())

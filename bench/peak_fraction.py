#!/usr/bin/env python3
"""The fraction of the machine's integer multiply-add peak that a batched decode step reaches.

1. Builds and runs bench/int_peak.cc at T threads: the u8 x i8 multiply-add throughput of
   vpmaddubsw + vpmaddwd (the instructions of a quantized block product on AVX2), GMAC/s, and
   of vpdpbusd on zmm where the CPU has AVX-512 VNNI (the fraction is then against it when the
   kernels are the AVX-512 ones).
2. Runs `ferrox bench -p 0 -n N -np S -t T` (S sequences decoded together, default 16).
3. Counts the multiply-adds of one token's matrix products from the GGUF (every 2-D weight a
   token multiplies: the layers' matrices and the output matrix; not the embedding lookup,
   not attention over the cache), and reports achieved GMAC/s = MACs per token x tokens/s,
   and its fraction of the peak. Attention, norms and the rest count as time, not as work, so
   the fraction is a lower bound of the matrix kernels' own.

Usage: python3 bench/peak_fraction.py [-m MODEL] [-t 2] [-np 16] [-n 64] [-r 3]
"""
import argparse
import json
import os
import subprocess
import sys

from gguf import GGUFReader

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def macs_per_token(path):
    r = GGUFReader(path)
    names = {t.name for t in r.tensors}
    total = 0
    for t in r.tensors:
        if len(t.shape) != 2:
            continue
        if t.name == "token_embd.weight" and "output.weight" in names:
            continue  # a lookup, not a product (unless it is also the tied output matrix)
        total += int(t.shape[0]) * int(t.shape[1])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-np", "--parallel", type=int, default=16)
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    args = ap.parse_args()
    exe = "/tmp/ferrox_int_peak"
    subprocess.run(["g++", "-O2", "-mavx2", "-mfma", "-pthread", os.path.join(ROOT, "bench/int_peak.cc"), "-o", exe],
                   check=True)
    peak = json.loads(subprocess.run([exe, str(args.threads)], check=True, capture_output=True, text=True).stdout)
    out = subprocess.run([args.ferrox, "bench", "-m", args.model, "-p", "0", "-n", str(args.n_gen), "-np",
                          f"1,{args.parallel}", "-t", str(args.threads), "-r", str(args.repetitions), "-o", "jsonl"],
                         check=True, capture_output=True, text=True).stdout
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    tps = {row["n_parallel"]: row["avg_ts"] for row in rows}
    macs = macs_per_token(args.model)
    print(f"model {os.path.basename(args.model)}: {macs / 1e6:.1f} M multiply-adds per token in matrix products; "
          f"{args.threads} threads; kernels {rows[0].get('kernels')}")
    print()
    print("| measure | value |")
    print("|---|---:|")
    print(f"| peak, vpmaddubsw + vpmaddwd (GMAC/s) | {peak['maddubs_madd_gmacs']:.1f} |")
    print(f"| peak, vpmaddubsw alone (GMAC/s) | {peak['maddubs_gmacs']:.1f} |")
    # The peak of the instructions the kernels run: vpdpbusd where they are the AVX-512 ones.
    vnni = "vnni512_gmacs" in peak and "avx512" in str(rows[0].get("kernels", ""))
    if "vnni512_gmacs" in peak:
        print(f"| peak, vpdpbusd zmm (GMAC/s) | {peak['vnni512_gmacs']:.1f} |")
        print(f"| peak, vpdpbusd zmm with Q4_1's float step per block (GMAC/s) | {peak['vnni512_q4_1_step_gmacs']:.1f} |")
    ref, ref_name = (peak["vnni512_gmacs"], "vpdpbusd") if vnni else (peak["maddubs_madd_gmacs"], "the pair's")
    for s in sorted(tps):
        ach = macs * tps[s] / 1e9
        print(f"| decode, {s} sequence{'s' if s > 1 else ''}: {tps[s]:.1f} t/s = GMAC/s | {ach:.1f} |")
        print(f"| decode, {s} sequence{'s' if s > 1 else ''}: fraction of {ref_name} peak | {ach / ref:.3f} |")
        if vnni:
            print(f"| decode, {s} sequence{'s' if s > 1 else ''}: fraction of the peak with Q4_1's step | "
                  f"{ach / peak['vnni512_q4_1_step_gmacs']:.3f} |")


if __name__ == "__main__":
    sys.exit(main())

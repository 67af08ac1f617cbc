#!/usr/bin/env python3
"""CPU speed, ferrox against llama.cpp on the same GGUF files, alternating in the same run.

For each model file: pp512 (one 512-token prompt from an empty cache) and tg128 (128
single-token decode steps from an empty cache), as llama-bench defines them, at each thread
count, R repetitions. Each repetition runs ferrox (`ferrox bench -r 1 -o jsonl`, a fresh process
that warms up first, as llama-bench does; weights copied into huge pages, its default, or with
--ferrox-mmap mapped, or both) and then llama.cpp (the `llama_cpp` package, wall time
around Llama.eval: one eval of the prompt for pp, N evals of one token for tg, with n_threads and
n_threads_batch set, n_batch = n_ubatch = 512), once with the file memory-mapped and once with
--no-mmap (llama.cpp's faster setting differs by machine). The ratio compares ferrox with the
faster of the two.

Also measured in the same run: memory read bandwidth (bench/stream.cc, compiled here with
-march=native; 1 GiB, best of 5) and from it the decode bound of each model (bandwidth / weight
bytes read per token: every tensor except the embedding table, of which one row, and of a mixture
of experts' expert tensors the share one token routes to); and, for one
model, load time and peak RSS of `ferrox run` against llama.cpp's (each a fresh process).

Usage:
  python3 bench/bench_cpu.py [MODEL.gguf ...] [--ferrox build/bin/ferrox] [-t 1,2] [-r 3]
                             [-p 512] [-n 128] [--llama-mmap both|mmap|no-mmap]
                             [--ferrox-mmap no-mmap|mmap|both] [--json-out F]
Without models: the default model and models/random-1b/*.gguf (scripts/make_random_model.py).
Prints markdown; paste it into bench/RESULTS.md with the command line.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = ["models/SmolLM2-135M-Instruct.Q4_1.gguf"] + [
    f"models/random-1b/random-1b.{t}.gguf" for t in ("Q4_0", "Q8_0", "Q4_K_M", "F16")]
RSS_MODEL = "models/random-1b/random-1b.Q4_0.gguf"
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
              17: "Q5_K_M", 18: "Q6_K", 25: "IQ4_NL", 30: "IQ4_XS", 32: "BF16", 38: "MXFP4_MOE"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def mean_sd(xs):
    if not xs:
        return float("nan"), float("nan")
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def fmt(xs):
    m, sd = mean_sd(xs)
    return f"{m:.2f} ± {sd:.2f}" if xs else "–"


# ---------------------------------------------------------------- machine and model facts

def cpu_facts():
    model, flags = platform.processor(), []
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    keep = [x for x in flags if x.startswith(("avx", "fma", "f16c", "bmi2", "amx"))]
    return model, os.cpu_count(), keep


def thp_setting():
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read().strip()
    except OSError:
        return "?"


def model_facts(path):
    """Type name, all tensor bytes, and the weight bytes one decode step reads (of a mixture of
    experts' *_exps tensors, the expert_used_count / expert_count share a token routes to)."""
    import gguf
    r = gguf.GGUFReader(path)
    ft = r.fields.get("general.file_type")
    ftype = FILE_TYPES.get(int(ft.contents()), "?") if ft is not None else "?"
    arch = r.fields["general.architecture"].contents()
    n_exp, n_used = (r.fields.get(f"{arch}.{k}") for k in ("expert_count", "expert_used_count"))
    exp_share = n_used.contents() / n_exp.contents() if n_exp is not None and n_used is not None else 1.0
    total, embd, experts = 0, None, 0
    names = set()
    for t in r.tensors:
        total += int(t.n_bytes)
        names.add(t.name)
        if t.name == "token_embd.weight":
            embd = t
        if "_exps." in t.name:
            experts += int(t.n_bytes)
    per_token = total - experts + int(experts * exp_share)
    if embd is not None and "output.weight" in names:
        # Untied: only one row of the embedding table is read per token.
        n_rows = int(embd.shape[1]) if len(embd.shape) > 1 else 1
        per_token -= int(embd.n_bytes) - int(embd.n_bytes) // max(1, n_rows)
    return {"type": ftype, "bytes": total, "bytes_per_token": per_token}


# ---------------------------------------------------------------- memory bandwidth

def build_stream(build_dir):
    src = os.path.join(ROOT, "bench/stream.cc")
    out = os.path.join(build_dir, "bench", "stream")
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.run(["g++", "-O3", "-march=native", "-pthread", src, "-o", out], check=True)
    return out


def stream_bandwidth(binary, threads, gib, hugepages):
    cmd = [binary, "--gib", str(gib), "--threads", ",".join(map(str, threads)), "--json"]
    if not hugepages:
        cmd.append("--no-hugepages")
    res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {r["threads"]: r["best_gbs"] for r in res["results"]}


# ---------------------------------------------------------------- the two engines

def ferrox_bench(ferrox, model, n_prompt, n_gen, threads, reps, mode):
    cmd = [ferrox, "bench", "-m", model, "-p", str(n_prompt), "-n", str(n_gen), "-t", str(threads),
           "-r", str(reps), "-o", "jsonl", "--" + mode]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return [json.loads(l) for l in out.stdout.splitlines() if l.strip()]


class LlamaCpp:
    """One llama.cpp context; pp and tg timed as llama-bench does (random tokens, BOS first)."""

    def __init__(self, model, threads, use_mmap, n_ctx, n_batch, flash_attn):
        import llama_cpp
        self.lib = llama_cpp
        t0 = time.perf_counter()
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                                   n_threads=threads, n_threads_batch=threads, use_mmap=use_mmap,
                                   flash_attn=flash_attn, logits_all=False, verbose=False)
        self.load_s = time.perf_counter() - t0
        self.n_vocab = self.llm.n_vocab()
        self.bos = self.llm.token_bos()
        self.rng = np.random.default_rng(1234)

    def _tokens(self, n):
        ids = [int(x) for x in self.rng.integers(0, self.n_vocab, size=n)]
        if n and 0 <= self.bos < self.n_vocab:
            ids[0] = self.bos
        return ids

    def _sync(self):
        ctx = getattr(self.llm, "_ctx", None)
        if ctx is not None and hasattr(self.lib, "llama_synchronize"):
            self.lib.llama_synchronize(ctx.ctx)

    def pp(self, n):
        ids = self._tokens(n)
        self.llm.reset()  # n_tokens = 0: eval() drops every cached position first
        t0 = time.perf_counter()
        self.llm.eval(ids)
        self._sync()
        return n / (time.perf_counter() - t0)

    def tg(self, n):
        ids = self._tokens(n)
        self.llm.reset()
        t0 = time.perf_counter()
        for tok in ids:
            self.llm.eval([tok])
        self._sync()
        return n / (time.perf_counter() - t0)

    def warm_up(self, n_prompt):
        if n_prompt:
            self.pp(n_prompt)
        self.tg(1)

    def close(self):
        self.llm.close()


# ---------------------------------------------------------------- load time and peak RSS

# Spawns argv[3:] with stdout/stderr to the files argv[1], argv[2]; prints its peak RSS (KiB),
# wall time and exit code. It runs in a fresh small interpreter because Linux starts a new
# process's peak RSS at the peak of the process it was forked from: a child of this script
# (which holds llama.cpp's models) would report at least this script's peak.
SPAWNER = r"""
import json, os, sys, time
O = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
t0 = time.perf_counter()
pid = os.posix_spawnp(sys.argv[3], sys.argv[3:], os.environ, file_actions=[
    (os.POSIX_SPAWN_OPEN, 1, sys.argv[1], O, 0o644), (os.POSIX_SPAWN_OPEN, 2, sys.argv[2], O, 0o644)])
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"maxrss_kib": ru.ru_maxrss, "wall_s": time.perf_counter() - t0,
                  "exit": os.waitstatus_to_exitcode(status)}))
"""


def child_rss(cmd):
    """Runs cmd; returns (stdout, stderr, its peak RSS in MiB, wall seconds)."""
    with tempfile.TemporaryDirectory() as d:
        out_path, err_path = os.path.join(d, "out"), os.path.join(d, "err")
        res = json.loads(subprocess.run([sys.executable, "-S", "-c", SPAWNER, out_path, err_path] + cmd,
                                        capture_output=True, text=True, check=True).stdout)
        with open(out_path, errors="replace") as f:
            o = f.read()
        with open(err_path, errors="replace") as f:
            e = f.read()
    if res["exit"]:
        raise RuntimeError(f"{' '.join(cmd)}: exit {res['exit']}: {e.strip()[-500:]}")
    return o, e, res["maxrss_kib"] / 1024, res["wall_s"]


LLAMA_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import llama_cpp
t1 = time.perf_counter()
model, mmap, threads, n_ctx = sys.argv[1], sys.argv[2] == "mmap", int(sys.argv[3]), int(sys.argv[4])
if model == "-":
    print(json.dumps({"import_s": t1 - t0}))
    sys.exit(0)
llm = llama_cpp.Llama(model_path=model, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                      use_mmap=mmap, verbose=False)
t2 = time.perf_counter()
out = llm.create_completion("hello", max_tokens=8, temperature=0)
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "text": out["choices"][0]["text"]}))
"""


def load_and_rss(ferrox, model, threads, n_ctx, ferrox_modes, modes):
    rows = []
    for mode in ferrox_modes:
        out, err, rss, wall = child_rss([ferrox, "run", "-m", model, "-p", "hello", "-n", "8", "--temp", "0",
                                         "-t", str(threads), "-c", str(n_ctx), "--" + mode])
        load_ms = next((float(l.split("=")[1].split()[0]) for l in err.splitlines() if "load time" in l),
                       float("nan"))
        rows.append((f"ferrox run ({mode})", load_ms / 1000, rss, wall))
    _, _, base_rss, _ = child_rss([sys.executable, "-c", LLAMA_CHILD, "-", "mmap", "1", "0"])
    for mode in modes:
        out, err, rss, wall = child_rss([sys.executable, "-c", LLAMA_CHILD, model, mode, str(threads), str(n_ctx)])
        rows.append((f"llama.cpp ({mode})", json.loads(out)["load_s"], rss, wall))
    return rows, base_rss


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="GGUF files (default: the default model and models/random-1b/*)")
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-t", "--threads", default="1,2")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-p", "--n-prompt", type=int, default=512, help="0: no pp test")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="0: no tg test")
    ap.add_argument("--llama-mmap", choices=["both", "mmap", "no-mmap"], default="both")
    ap.add_argument("--ferrox-mmap", choices=["both", "mmap", "no-mmap"], default="no-mmap",
                    help="ferrox maps the file or copies the weights into huge pages (its default)")
    ap.add_argument("--llama-flash-attn", action="store_true", help="llama.cpp flash attention (default off)")
    ap.add_argument("--stream-gib", type=float, default=1.0, help="STREAM buffer (GiB); 0: skip")
    ap.add_argument("--rss-model", default=os.path.join(ROOT, RSS_MODEL), help="'' skips load time / RSS")
    ap.add_argument("--json-out", help="write every sample here as JSON")
    a = ap.parse_args()

    threads = [int(x) for x in a.threads.split(",")]
    models = a.models or [os.path.join(ROOT, m) for m in DEFAULT_MODELS if os.path.exists(os.path.join(ROOT, m))]
    if not models:
        sys.exit("no models: give GGUF files, or run scripts/make_random_model.py and make model")
    if not os.access(a.ferrox, os.X_OK):
        sys.exit(f"{a.ferrox}: not built (cmake --preset release && cmake --build --preset release)")
    modes = ["mmap", "no-mmap"] if a.llama_mmap == "both" else [a.llama_mmap]
    fmodes = ["mmap", "no-mmap"] if a.ferrox_mmap == "both" else [a.ferrox_mmap]
    import llama_cpp

    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = os.getloadavg()
    cpu, n_cpu, flags = cpu_facts()
    build_dir = os.path.dirname(os.path.dirname(os.path.abspath(a.ferrox)))

    bw, bw_4k = {}, {}
    if a.stream_gib > 0:
        log("measuring memory bandwidth ...")
        stream = build_stream(build_dir)
        bw = stream_bandwidth(stream, threads, a.stream_gib, hugepages=True)
        bw_4k = stream_bandwidth(stream, threads, a.stream_gib, hugepages=False)

    tests = ([("pp", a.n_prompt)] if a.n_prompt else []) + ([("tg", a.n_gen)] if a.n_gen else [])
    n_ctx = max(a.n_prompt, a.n_gen, 256)
    results = []  # one dict per (model, test, threads)
    ferrox_info = {}
    facts_of = {}
    for model in models if tests else []:
        facts = facts_of[model] = model_facts(model)
        stem = os.path.basename(model)[:-5] if model.endswith(".gguf") else os.path.basename(model)
        for t in threads:
            llamas = {}
            for mode in modes:
                log(f"{stem}: llama.cpp {mode}, {t} threads: loading and warming up ...")
                llamas[mode] = LlamaCpp(model, t, mode == "mmap", n_ctx, 512, a.llama_flash_attn)
                llamas[mode].warm_up(a.n_prompt)
            for kind, n in tests:
                row = {"model": stem, "path": model, "type": facts["type"], "test": f"{kind}{n}", "threads": t,
                       **{f"ferrox {m}": [] for m in fmodes}, **{f"llama.cpp {m}": [] for m in modes}}
                for rep in range(a.reps):
                    log(f"{stem}: {kind}{n}, {t} threads, repetition {rep + 1}/{a.reps}")
                    for fm in fmodes:
                        lines = ferrox_bench(a.ferrox, model, n if kind == "pp" else 0, n if kind == "tg" else 0,
                                             t, 1, fm)
                        ferrox_info = {k: lines[0].get(k) for k in ("build_commit", "kernels", "cpu_info")}
                        row[f"ferrox {fm}"].append(lines[0]["avg_ts"])
                    for mode in modes:
                        llm = llamas[mode]
                        row[f"llama.cpp {mode}"].append(llm.pp(n) if kind == "pp" else llm.tg(n))
                results.append(row)
            for llm in llamas.values():
                llm.close()
            del llamas

    rss_rows, base_rss = [], 0.0
    if a.rss_model and os.path.exists(a.rss_model):
        log("load time and peak RSS ...")
        rss_rows, base_rss = load_and_rss(a.ferrox, a.rss_model, max(threads), 2048, fmodes, modes)
    load_end = os.getloadavg()

    # ---- report
    print(f"## {started}: `{' '.join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])}`\n")
    print(f"Machine: {cpu}, {n_cpu} CPUs, flags {' '.join(flags)}; transparent huge pages: {thp_setting()}; "
          f"{platform.system()} {platform.release()}; load average {load_start[0]:.2f} at start, "
          f"{load_end[0]:.2f} at end.")
    print(f"ferrox {ferrox_info.get('build_commit', '?')} (kernels {ferrox_info.get('kernels', '?')}); "
          f"llama-cpp-python {llama_cpp.__version__} ({llama_cpp.llama_print_system_info().decode().strip()}), "
          f"flash attention {'on' if a.llama_flash_attn else 'off'}.")
    print(f"{a.reps} repetitions, ferrox and llama.cpp alternating; t/s as mean ± sd over repetitions; "
          f"ferrox {' and '.join(fmodes)}; the ratio and the % of bound take the faster setting of each.\n")

    if bw:
        print("| threads | read bandwidth, huge pages (GB/s) | read bandwidth, 4 KiB pages (GB/s) |")
        print("|---:|---:|---:|")
        for t in threads:
            print(f"| {t} | {bw.get(t, float('nan')):.2f} | {bw_4k.get(t, float('nan')):.2f} |")
        print()

    head = "| model | type | test | threads |"
    sep = "|---|---|---|---:|"
    for m in fmodes:
        head += f" ferrox {m} t/s |" if len(fmodes) > 1 else " ferrox t/s |"
        sep += "---:|"
    for m in modes:
        head += f" llama.cpp {m} t/s |"
        sep += "---:|"
    head += " ferrox / llama.cpp |"
    sep += "---:|"
    if bw:
        head += " bound t/s | ferrox % of bound | llama.cpp % of bound |"
        sep += "---:|---:|---:|"
    print(head)
    print(sep)
    for r in results:
        f_mean = max(mean_sd(r[f"ferrox {m}"])[0] for m in fmodes)
        l_best = max(mean_sd(r[f"llama.cpp {m}"])[0] for m in modes)
        line = f"| {r['model']} | {r['type']} | {r['test']} | {r['threads']} |"
        for m in fmodes:
            line += f" {fmt(r[f'ferrox {m}'])} |"
        for m in modes:
            line += f" {fmt(r[f'llama.cpp {m}'])} |"
        line += f" {f_mean / l_best:.2f} |"
        if bw:
            if r["test"].startswith("tg") and r["threads"] in bw:
                bound = bw[r["threads"]] * 1e9 / facts_of[r["path"]]["bytes_per_token"]
                r["bound_ts"] = bound
                line += f" {bound:.1f} | {100 * f_mean / bound:.0f} % | {100 * l_best / bound:.0f} % |"
            else:
                line += " – | – | – |"
        print(line)
    print()
    if bw:
        print("Bound: read bandwidth with huge pages at that thread count / weight bytes read per token "
              "(" + ", ".join(f"{os.path.basename(p)} {f['bytes_per_token'] / 2**20:.1f} MiB"
                              for p, f in facts_of.items()) + "); the KV cache read (under 1 % here) is left out.")
        print()
    if rss_rows:
        print(f"Load time and peak RSS, `{os.path.basename(a.rss_model)}`, {max(threads)} threads, context 2048, "
              f"8 tokens generated, page cache warm (each a fresh process; llama.cpp's include the Python "
              f"interpreter and the llama_cpp import, {base_rss:.0f} MiB alone). Load time is what each "
              f"reports (ferrox: `load time`, llama.cpp: the Llama constructor); weights that are mapped "
              f"rather than read are paged in on first use, after it, so compare the wall times too:\n")
        print("| engine | load time (s) | peak RSS (MiB) | process wall time (s) |")
        print("|---|---:|---:|---:|")
        for name, load_s, rss, wall in rss_rows:
            print(f"| {name} | {load_s:.2f} | {rss:.0f} | {wall:.2f} |")
        print()

    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"started": started, "cpu": cpu, "flags": flags, "bandwidth_gbs": bw,
                       "bandwidth_4k_gbs": bw_4k, "ferrox": ferrox_info, "llama_cpp": llama_cpp.__version__,
                       "results": results, "load_rss": rss_rows, "python_baseline_rss_mib": base_rss,
                       "load_average": [load_start, load_end]}, f, indent=1)


if __name__ == "__main__":
    main()

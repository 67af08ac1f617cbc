#!/usr/bin/env python3
"""Embedding speed, ferrox's /v1/embeddings against llama.cpp's embedding on the GGUF conversion
of the same model, side by side in one run (issue 15, part 7).

ferrox: `ferrox serve -m MODEL_DIR -t T` (the sentence-transformers safetensors directory) on a
free loopback port, driven over HTTP by one keep-alive httpx client, one POST /v1/embeddings per
batch with encoding_format base64 (what the openai SDK sends; the vectors are decoded here, as
the SDK does). llama.cpp: the `llama_cpp` package in this process on the GGUF conversion
(scripts/golden/minilm_to_gguf.py, F16 and F32 by default, written to a temporary directory),
`Llama(embedding=True, n_threads=T, n_threads_batch=T, n_ctx = n_batch = n_ubatch = B,
pooling_type=MEAN)`, one `llm.embed(texts)` per batch (it tokenizes, packs inputs into
n_batch-token decodes and reads the pooled vectors back). ferrox's figure includes HTTP, JSON
and base64; llama.cpp's includes only the Python wrapper.

Workloads: batches of 1, 16 and 128 short sentences (~10-16 tokens each), and a batch of 8
long inputs of exactly L tokens ([CLS] and [SEP] included) where L = min(512, the longest
input ferrox accepts: all-MiniLM-L6-v2's sentence-transformers max_seq_length is 256, its
config.json's position table has 512). Both engines get the same texts; the script checks that
both count the same tokens. A llama.cpp-only line embeds as many texts of 512 tokens (its first
configuration, median of 3): ferrox answers a 400 at that length unless truncate_prompt_tokens
cuts the input to 256.

Each workload is warmed up once per engine, then measured R times, engines alternating within
each repetition (ferrox, then each llama.cpp configuration) so a change in the machine's load
hits all of them; one repetition sends the same batch again until --min-time seconds have
passed. The figure is the median of the R embeddings/s (a second table gives the best). The
ratio compares ferrox with the fastest llama.cpp configuration of that row.

Before timing, the vectors are compared: cosine between ferrox's and each llama.cpp
configuration's embedding of a few short and long inputs (must be > 0.999).

--ferrox-gguf f16 makes ferrox serve the F16 GGUF conversion, the very file llama.cpp's F16
configuration loads (ferrox keeps F16/BF16 matrices in their precision).

Usage:
  python3 bench/bench_embeddings.py [--ferrox build/bin/ferrox] [-m models/all-MiniLM-L6-v2] [--ferrox-gguf f16]
                                    [-t 2] [-r 5] [--min-time 1] [--batches 1,16,128]
                                    [--long-batch 8] [--long-tokens 512] [--llama f16:512,f32:512]
                                    [--gguf-dir DIR] [--ferrox-extra ARGS] [--json-out FILE]
--llama takes TYPE:B pairs (B = llama.cpp's n_ctx = n_batch = n_ubatch; an encoder's whole
batch must fit one ubatch). Prints markdown; paste it into bench/RESULTS.md with the command.
"""
import argparse
import base64
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")

SUBJECTS = ["The old lighthouse keeper", "A small brown dog", "My neighbour's daughter", "The city council",
            "An orchestra from Vienna", "The new coffee machine", "A tired astronaut", "Our chess club",
            "The river near the mill", "A violin maker", "The morning train", "Three curious cats"]
VERBS = ["quietly repaired", "painted", "argued about", "forgot", "carefully measured", "photographed",
         "sold", "dreamed of", "wrote a song about", "visited", "lost", "discovered"]
OBJECTS = ["the broken clock in the hall.", "a map of the stars.", "the last bus home.", "an abandoned station.",
           "the garden behind the school.", "a basket of ripe apples.", "the smallest dragon in town.",
           "a postcard from the island.", "the copper kettle.", "the history of bread.", "a kite on the beach.",
           "the market at dawn."]
WORDS = ("apple river stone cloud silver garden window letter candle forest engine harbor mirror "
         "lantern meadow thunder pocket ribbon tunnel wagon anchor basket copper desert feather "
         "hammer island jacket ladder marble needle pepper rocket shadow timber valley yellow "
         "winter summer music paper market bridge castle dragon ocean mountain village").split()


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cos(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


# ---------------------------------------------------------------- inputs

def short_sentences(n, seed):
    rng = random.Random(seed)
    return [f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}" for _ in range(n)]


def long_texts(n, n_tokens, count_tokens, seed):
    """n texts of exactly n_tokens tokens (with [CLS] and [SEP]) under count_tokens."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [f"Document {rng.randrange(10**6)}:"]
        while count_tokens(" ".join(words)) < n_tokens:
            words.append(rng.choice(WORDS))
        while count_tokens(" ".join(words)) > n_tokens:
            words.pop()
        while count_tokens(" ".join(words)) < n_tokens:  # a one-token word fills the last place
            words.append("a")
        t = " ".join(words)
        if count_tokens(t) != n_tokens:
            raise RuntimeError(f"could not build a {n_tokens}-token text")
        out.append(t)
    return out


# ---------------------------------------------------------------- ferrox

class Ferrox:
    def __init__(self, binary, model, threads, extra=()):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.argv = [binary, "serve", "-m", model, "-t", str(threads), "--host", "127.0.0.1",
                     "--port", str(self.port), *extra]
        self.log = tempfile.NamedTemporaryFile(prefix="bench_embeddings_ferrox_", suffix=".log", delete=False)
        log(f"[ferrox] {' '.join(self.argv)}  (log: {self.log.name})")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.base, timeout=600)  # keep-alive
        deadline = time.time() + 120
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ferrox exited with {self.proc.returncode}; see {self.log.name}")
            try:
                r = self.client.get("/v1/models", timeout=2)
                if r.status_code == 200 and any(m.get("meta", {}).get("kind") == "embed" for m in r.json()["data"]):
                    self.meta = next(m for m in r.json()["data"] if m["meta"]["kind"] == "embed")
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"ferrox did not become ready; see {self.log.name}")
            time.sleep(0.2)
        self.name = self.meta["id"]

    def embed(self, texts, **extra):
        """Returns (vectors as an (n, dim) float32 array, usage.prompt_tokens)."""
        r = self.client.post("/v1/embeddings", json={"model": self.name, "input": texts,
                                                     "encoding_format": "base64", **extra})
        if r.status_code != 200:
            raise RuntimeError(f"ferrox: HTTP {r.status_code}: {r.text[:300]}")
        out = r.json()
        vecs = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in out["data"]])
        return vecs, out["usage"]["prompt_tokens"]

    def post_raw(self, body):
        return self.client.post("/v1/embeddings", json=body)

    def stop(self):
        self.client.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# ---------------------------------------------------------------- llama.cpp

class LlamaCpp:
    def __init__(self, label, path, threads, n_batch):
        import llama_cpp
        self.label = label
        self.lib = llama_cpp
        self.llm = llama_cpp.Llama(model_path=path, embedding=True, n_threads=threads, n_threads_batch=threads,
                                   n_ctx=n_batch, n_batch=n_batch, n_ubatch=n_batch,
                                   pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN, verbose=False)
        assert self.llm.pooling_type() == llama_cpp.LLAMA_POOLING_TYPE_MEAN
        self.n_batch = n_batch

    def count(self, text):
        return len(self.llm.tokenize(text.encode("utf-8")))

    def embed(self, texts):
        vecs, n = self.llm.embed(texts, normalize=False, truncate=False, return_count=True)
        return np.asarray(vecs, dtype=np.float32), n

    def close(self):
        self.llm.close()


# ---------------------------------------------------------------- the run

def convert(model_dir, outtype, out_dir):
    out = os.path.join(out_dir, f"{os.path.basename(os.path.normpath(model_dir))}-{outtype}.gguf")
    if not os.path.exists(out):
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "golden", "minilm_to_gguf.py"), model_dir, out,
                        "--outtype", outtype], check=True, capture_output=True)
    return out


def cpu_model():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed(fn, n, min_s=0.0):
    """Embeddings/s of fn (n inputs a call), calling it again until min_s seconds have passed."""
    calls = 0
    t0 = time.perf_counter()
    while True:
        fn()
        calls += 1
        dt = time.perf_counter() - t0
        if dt >= min_s:
            return n * calls / dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build", "bin", "ferrox"))
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL, help="sentence-transformers directory")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=1.0,
                    help="seconds one repetition lasts at least (the batch is sent again until then)")
    ap.add_argument("--batches", default="1,16,128", help="short-sentence batch sizes")
    ap.add_argument("--long-batch", type=int, default=8, help="inputs per batch of long texts (0: none)")
    ap.add_argument("--long-tokens", type=int, default=512, help="wanted; capped at what ferrox accepts")
    ap.add_argument("--llama", default="f16:512,f32:512", help="llama.cpp configurations TYPE:B, comma-separated")
    ap.add_argument("--gguf-dir", default=None, help="where the GGUF conversions go (default: a temporary dir)")
    ap.add_argument("--ferrox-extra", default="", help="more ferrox serve flags")
    ap.add_argument("--ferrox-gguf", default=None, choices=["f16", "f32"],
                    help="ferrox serves the GGUF conversion of this type (the file llama.cpp loads) "
                         "instead of the safetensors directory")
    ap.add_argument("--json-out", default=None)
    a = ap.parse_args()

    import llama_cpp
    facts = {"cpu": cpu_model(), "cores": os.cpu_count(), "load_start": loadavg(),
             "llama_cpp_python": llama_cpp.__version__}
    log(f"machine: {facts['cpu']}, {facts['cores']} CPUs, load average {facts['load_start']}")

    gguf_dir = a.gguf_dir or tempfile.mkdtemp(prefix="bench_embeddings_")
    configs = []
    for spec in a.llama.split(","):
        typ, nb = spec.split(":")
        configs.append((typ, int(nb), convert(a.model, typ, gguf_dir)))

    ferrox_model = convert(a.model, a.ferrox_gguf, gguf_dir) if a.ferrox_gguf else a.model
    facts["ferrox_model"] = ferrox_model
    fx = Ferrox(a.ferrox, ferrox_model, a.threads, a.ferrox_extra.split())
    llamas = []
    try:
        for typ, nb, path in configs:
            llamas.append(LlamaCpp(f"llama.cpp {typ.upper()} n_batch {nb}", path, a.threads, nb))
            log(f"[{llamas[-1].label}] {path}")
        tok = llamas[0]
        n_max = int(fx.meta["meta"]["n_ctx"])
        n_long = min(a.long_tokens, n_max)
        log(f"ferrox accepts inputs up to {n_max} tokens (n_ctx_train {fx.meta['meta'].get('n_ctx_train')}); "
            f"long inputs: {n_long} tokens")

        # Workloads: (name, texts).
        work = [(f"{b} short", short_sentences(b, seed=b)) for b in map(int, a.batches.split(","))]
        long_512 = None
        if a.long_batch:
            work.append((f"{a.long_batch} × {n_long} tokens", long_texts(a.long_batch, n_long, tok.count, seed=7)))
            if a.long_tokens > n_long and min(c[1] for c in configs) >= a.long_tokens:
                long_512 = long_texts(a.long_batch, a.long_tokens, tok.count, seed=7)

        # The same tokens on both sides, and nearly the same vectors.
        fidelity = {}
        check = short_sentences(4, seed=99) + ["Hello, world!", "naïve café – ünïcödé, 東京, emoji 🙂"]
        if a.long_batch:
            check += work[-1][1][:2]
        fv, fn_ = fx.embed(check)
        for L in llamas:
            lv, ln_ = L.embed(check)
            if fn_ != ln_:
                log(f"warning: {L.label} counts {ln_} tokens on the check inputs, ferrox {fn_}")
            c = [cos(x, y) for x, y in zip(fv, lv)]
            fidelity[L.label] = {"min_cos": min(c), "cos": c, "tokens": [fn_, ln_]}
            log(f"cosine ferrox vs {L.label}: min {min(c):.6f} over {len(c)} inputs ({fn_} / {ln_} tokens)")
            if min(c) <= 0.999:
                raise SystemExit(f"ferrox and {L.label} disagree (cosine {min(c):.6f}): not comparing")
        for name, texts in work:
            _, nf = fx.embed(texts)
            _, nl = tok.embed(texts)
            if nf != nl:
                raise SystemExit(f"{name}: ferrox counts {nf} tokens, llama.cpp {nl}")

        # Warm up, then R alternating repetitions.
        results = []
        for name, texts in work:
            fx.embed(texts)
            for L in llamas:
                L.embed(texts)
            n_tok = fx.embed(texts)[1]
            runs = {"ferrox": []} | {L.label: [] for L in llamas}
            for _ in range(a.reps):
                runs["ferrox"].append(timed(lambda: fx.embed(texts), len(texts), a.min_time))
                for L in llamas:
                    runs[L.label].append(timed(lambda: L.embed(texts), len(texts), a.min_time))
            med = {k: statistics.median(v) for k, v in runs.items()}
            top = {k: max(v) for k, v in runs.items()}
            best = max((L.label for L in llamas), key=lambda k: med[k])
            row = {"workload": name, "n_inputs": len(texts), "tokens": n_tok, "median": med, "runs": runs,
                   "best_llama": best, "ratio": med["ferrox"] / med[best], "max": top,
                   "ratio_max": top["ferrox"] / max(top[L.label] for L in llamas), "load": loadavg()}
            results.append(row)
            log(f"{name}: " + ", ".join(f"{k} {v:.1f}/s" for k, v in med.items()) +
                f"; ferrox / best llama.cpp {row['ratio']:.2f}  (load {row['load']})")

        extra = {}
        if long_512 is not None:
            r = fx.post_raw({"model": fx.name, "input": long_512[0]})
            extra["ferrox_512_status"] = r.status_code
            extra["ferrox_512_message"] = r.json().get("error", {}).get("message")
            L = llamas[0]  # one configuration, at most 3 repetitions: this row is for information
            L.embed(long_512)
            xs = [timed(lambda: L.embed(long_512), len(long_512)) for _ in range(min(3, a.reps))]
            extra[L.label] = statistics.median(xs)
            log(f"{a.long_tokens}-token inputs: ferrox HTTP {extra['ferrox_512_status']}; {L.label} {extra[L.label]:.2f}/s")
    finally:
        for L in llamas:
            L.close()
        rc = fx.stop()
    facts["load_end"] = loadavg()
    log(f"ferrox exited with {rc}; load average at the end {facts['load_end']}")

    # Markdown.
    labels = [L.label for L in llamas]
    print(f"Machine: `lscpu` model name \"{facts['cpu']}\" ({facts['cores']} CPUs), load average "
          f"{facts['load_start']} at the start, {facts['load_end']} at the end. ferrox serves "
          f"`{os.path.relpath(facts['ferrox_model'], ROOT) if not a.ferrox_gguf else a.ferrox_gguf.upper() + ' GGUF'}`. llama-cpp-python "
          f"{facts['llama_cpp_python']}. {a.threads} threads each; median of {a.reps} repetitions after a "
          f"warm-up, each repetition at least {a.min_time:g} s (the batch sent again until then).\n")
    print("| workload | tokens | ferrox emb/s | " + " | ".join(f"{l} emb/s" for l in labels) +
          " | ferrox / best llama.cpp |")
    print("|---|---:|---:|" + "---:|" * len(labels) + "---:|")
    for r in results:
        print(f"| {r['workload']} | {r['tokens']} | {r['median']['ferrox']:.1f} | " +
              " | ".join(f"{r['median'][l]:.1f}" for l in labels) + f" | {r['ratio']:.2f} |")
    print("\nBest of the repetitions (the least disturbed by the machine's other load):\n")
    print("| workload | ferrox emb/s | " + " | ".join(f"{l} emb/s" for l in labels) + " | ferrox / best llama.cpp |")
    print("|---|---:|" + "---:|" * len(labels) + "---:|")
    for r in results:
        print(f"| {r['workload']} | {r['max']['ferrox']:.1f} | " +
              " | ".join(f"{r['max'][l]:.1f}" for l in labels) + f" | {r['ratio_max']:.2f} |")
    print()
    for l, f in fidelity.items():
        print(f"- cosine ferrox vs {l}: min {f['min_cos']:.6f} over {len(f['cos'])} inputs")
    if extra:
        print(f"- {a.long_tokens}-token inputs: ferrox answers {extra['ferrox_512_status']} "
              f"({extra['ferrox_512_message']}); " +
              f"{labels[0]} {extra[labels[0]]:.2f} emb/s ({a.long_batch} inputs per call, "
              f"median of {min(3, a.reps)})")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"facts": facts, "args": vars(a), "results": results, "fidelity": fidelity,
                       "extra": extra}, f, indent=1)


if __name__ == "__main__":
    main()

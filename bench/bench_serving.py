#!/usr/bin/env python3
"""Serving speed, ferrox's server against llama.cpp's llama-server, side by side in one run.

Both servers run at the same time on loopback (an idle server costs nothing), with the same
model, threads and slot count, and are measured alternately (ferrox, then llama.cpp) so that
a change in the machine's load hits both. Both get the same prompts through the
OpenAI-compatible POST /v1/completions, streamed (SSE), greedy.

1. Aggregate generation speed: C concurrent streaming clients (C = 1, 4, 16 by default), each
   with its own short prompt and max_tokens N with ignore_eos (every client makes exactly N
   tokens); the figure is all the clients' generated tokens over the wall time from the first
   request sent to the last stream's end. The C streams are read by one thread on raw sockets
   (stream_many), so the client takes as little of the machine's CPU from the server as it can.
2. Time to first token (until the first streamed chunk with text) of a ~2,000-token prompt
   A, cold (a prefix no server has seen: each repetition starts its prompts with a new nonce),
   then warm: a prompt B that shares all but its last ~50 tokens with A, sent after A ends
   (llama.cpp with cache_prompt: true; ferrox's prefix cache is on by default).

Servers:
  ferrox serve -m MODEL -np 16 -c CTX -t T       (CTX: one KV pool shared by all slots)
  llama-server -m MODEL -np 16 -c 16*CTX -t T -tb T
                                                 (its per-slot context is -c / -np: CTX each)

Usage:
  python3 bench/bench_serving.py [--ferrox build/bin/ferrox] [--llama-server PATH]
                                 [-m MODEL] [-t 2] [-r 3] [-n 128] [--clients 1,4,16]
                                 [--ttft-prompt 2000] [--ttft-suffix 50] [--ctx 4096]
                                 [--llama-extra '-kvu'] [--ferrox-extra ARGS] [--json-out FILE]
Without --llama-server (or when the path does not exist) the llama.cpp column is skipped.
Prints markdown; paste it into bench/RESULTS.md with the command line.
"""
import argparse
import json
import os
import platform
import random
import selectors
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")

TOPICS = ["the ocean", "a small village", "mountains in winter", "a robot learning to paint",
          "the history of bread", "a lighthouse keeper", "coffee", "the moon landing",
          "a cat and a dog", "rainy afternoons", "an old library", "the first computer",
          "a desert journey", "bees", "a violin maker", "trains at night", "a chess match",
          "the last bus home", "a garden in spring", "an island", "a clockmaker", "snow",
          "a market at dawn", "the river", "a tired astronaut", "a map of the stars",
          "the smallest dragon", "an orchestra", "a postcard", "the city at night",
          "an abandoned station", "a kite"]

WORDS = ("apple river stone cloud silver garden window letter candle forest engine harbor "
         "mirror lantern meadow thunder pocket ribbon saddle tunnel velvet wagon anchor basket "
         "copper desert feather glacier hammer island jacket kettle ladder marble needle orchard "
         "pepper quartz rocket shadow timber umbrella valley walnut yellow zephyr").split()


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProc:
    """A server process on a free loopback port, its output in a log file."""

    def __init__(self, name, argv_fn, ready_timeout=300):
        self.name = name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.argv = argv_fn(self.port)
        self.log = tempfile.NamedTemporaryFile(prefix=f"bench_serving_{name}_", suffix=".log", delete=False)
        log(f"[{name}] {' '.join(self.argv)}  (log: {self.log.name})")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.proc.returncode}; see {self.log.name}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not become ready; see {self.log.name}")
            time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def tokenize(base, text):
    r = httpx.post(base + "/tokenize", json={"content": text}, timeout=60)
    r.raise_for_status()
    return r.json()["tokens"]


def engine_times(base):
    """ferrox's engine step counters from /metrics: (step seconds, forward seconds), or None."""
    try:
        r = httpx.get(base + "/metrics", timeout=30)
        r.raise_for_status()
    except httpx.HTTPError:
        return None
    vals = {}
    for line in r.text.splitlines():
        if line.startswith("ferrox_engine_") and " " in line:
            name, v = line.rsplit(" ", 1)
            name = name.split("{", 1)[0]  # per-model labels: summed over the models
            vals[name] = vals.get(name, 0.0) + float(v)
    if "ferrox_engine_step_seconds_total" not in vals:
        return None
    return vals["ferrox_engine_step_seconds_total"], vals["ferrox_engine_forward_seconds_total"]


def stream_completion(base, body, timeout=900, client=None):
    """POSTs a streamed /v1/completions; returns (ttft_s, total_s, n_tokens, cached, text).
    With a client (an httpx.Client), on its kept-alive connection; else on a new one.
    n_tokens comes from the final usage when the server sends one, else from the chunks with
    text; cached from usage.prompt_tokens_details.cached_tokens or llama.cpp's timings.cache_n."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    ttft = None
    n_chunks = 0
    usage = None
    timings = None
    text = []
    with (client or httpx).stream("POST", base + "/v1/completions", json=body, timeout=timeout) as r:
        if r.status_code != 200:
            r.read()
            raise RuntimeError(f"{base}: HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue  # blank lines, ": keep-alive" comments
            data = line[5:].strip()
            if data == "[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            if ev.get("timings"):
                timings = ev["timings"]
            for ch in ev.get("choices") or []:
                piece = ch.get("text") or ""
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    n_chunks += 1
                    text.append(piece)
    total = time.perf_counter() - t0
    n = usage.get("completion_tokens", n_chunks) if usage else n_chunks
    cached = None
    if usage and isinstance(usage.get("prompt_tokens_details"), dict):
        cached = usage["prompt_tokens_details"].get("cached_tokens")
    if cached is None and timings and "cache_n" in timings:
        cached = timings["cache_n"]
    return ttft, total, n, cached, "".join(text)


def base_body(model_name, extra):
    return dict(model=model_name, temperature=0, **extra)


class _SseStream:
    """One streamed POST on a raw socket, parsed as it arrives: the status line and headers, the
    chunked (or close-delimited / Content-Length) body, and its SSE `data:` events, counted as
    stream_completion counts them."""

    def __init__(self, host, port, path, body):
        payload = json.dumps(dict(body, stream=True, stream_options={"include_usage": True})).encode()
        self.request = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
                        ).encode() + payload
        self.sock = socket.create_connection((host, port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.raw = b""          # bytes not yet framed (headers, chunk sizes)
        self.body = b""         # de-chunked bytes not yet split into lines
        self.headers_done = False
        self.chunked = False
        self.left = None        # bytes left in the current chunk / the Content-Length body
        self.status = None
        self.done = False
        self.t0 = self.ttft = self.total = None
        self.n_chunks = 0
        self.usage = self.timings = None
        self.text = []

    def start(self, t0):
        self.t0 = t0
        self.sock.sendall(self.request)
        self.sock.setblocking(False)

    def feed(self, data, now):
        """Consumes received bytes (b"" at EOF); returns True when the stream is complete."""
        if not data:
            self._lines(final=True, now=now)
            self.done = True
            return True
        self.raw += data
        if not self.headers_done:
            end = self.raw.find(b"\r\n\r\n")
            if end < 0:
                return False
            head, self.raw = self.raw[:end].decode("latin-1"), self.raw[end + 4:]
            lines = head.split("\r\n")
            self.status = int(lines[0].split()[1])
            hdr = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            self.chunked = "chunked" in hdr.get("transfer-encoding", "").lower()
            if not self.chunked and "content-length" in hdr:
                self.left = int(hdr["content-length"])
            self.headers_done = True
        if self.chunked:
            while True:
                if self.left is None or self.left == 0:
                    if self.left == 0:  # the CRLF after a chunk's data
                        if len(self.raw) < 2:
                            break
                        self.raw = self.raw[2:]
                        self.left = None
                    nl = self.raw.find(b"\r\n")
                    if nl < 0:
                        break
                    size = int(self.raw[:nl].split(b";")[0], 16)
                    self.raw = self.raw[nl + 2:]
                    if size == 0:
                        self.done = True
                        break
                    self.left = size
                take = self.raw[:self.left]
                self.body += take
                self.raw = self.raw[len(take):]
                self.left -= len(take)
                if self.left > 0:
                    break
        else:
            take = self.raw if self.left is None else self.raw[:self.left]
            self.body += take
            self.raw = self.raw[len(take):]
            if self.left is not None:
                self.left -= len(take)
                self.done = self.left == 0
        self._lines(final=self.done, now=now)
        return self.done

    def _lines(self, final, now):
        *lines, self.body = self.body.split(b"\n")
        if final and self.body:
            lines.append(self.body)
            self.body = b""
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                break
            ev = json.loads(data)
            if self.status != 200:
                continue
            if ev.get("usage"):
                self.usage = ev["usage"]
            if ev.get("timings"):
                self.timings = ev["timings"]
            for ch in ev.get("choices") or []:
                if ch.get("text"):
                    if self.ttft is None:
                        self.ttft = now - self.t0
                    self.n_chunks += 1
                    self.text.append(ch["text"])
        if self.done and self.total is None:
            self.total = now - self.t0

    def result(self):
        if self.status != 200:
            raise RuntimeError(f"HTTP {self.status}: {self.body[:300]!r}")
        n = self.usage.get("completion_tokens", self.n_chunks) if self.usage else self.n_chunks
        return self.ttft, self.total, n, None, "".join(self.text)


def stream_many(base, bodies, timeout=900):
    """The streamed POST /v1/completions of every body at once, from this one thread: each on
    its own connection, made before the clock starts; then one selector loop reads them all.
    Returns (wall seconds from the first request sent to the last stream's end, [the
    stream_completion tuple of each]). One thread and no HTTP library: 16 httpx streams in 16
    Python threads took enough of this 2-core machine's CPU (their wake-ups, the GIL passed
    between them) to slow the server they measured, a fast one most (see RESULTS.md)."""
    host, port = base.split("//", 1)[1].rsplit(":", 1)
    streams = [_SseStream(host, int(port), "/v1/completions", b) for b in bodies]
    sel = selectors.DefaultSelector()
    t0 = time.perf_counter()
    for st in streams:
        st.start(t0)
        sel.register(st.sock, selectors.EVENT_READ, st)
    open_n = len(streams)
    deadline = t0 + timeout
    while open_n:
        events = sel.select(timeout=max(0.0, deadline - time.perf_counter()))
        if not events:
            raise RuntimeError(f"{base}: streams did not finish in {timeout} s")
        for key, _ in events:
            st = key.data
            try:
                data = st.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            if st.feed(data, time.perf_counter()):
                sel.unregister(st.sock)
                st.sock.close()
                open_n -= 1
    wall = time.perf_counter() - t0
    sel.close()
    return wall, [st.result() for st in streams]


def throughput(server, n_clients, n_gen, model_name, extra):
    """Aggregate generated tokens/s of n_clients concurrent streams."""
    bodies = []
    for i in range(n_clients):
        body = base_body(model_name, extra)
        body.update(prompt=f"Write a long story about {TOPICS[i % len(TOPICS)]}.\n", max_tokens=n_gen,
                    ignore_eos=True)
        bodies.append(body)
    cpu0 = time.process_time()
    wall, results = stream_many(server.base, bodies)
    client_cpu = time.process_time() - cpu0
    n_tokens = sum(r[2] for r in results)
    if n_tokens != n_clients * n_gen:
        log(f"  [{server.name}] warning: {n_tokens} tokens generated, expected {n_clients * n_gen}")
    return dict(tok_s=n_tokens / wall, wall_s=wall, tokens=n_tokens, client_cpu_s=client_cpu,
                mean_ttft_s=statistics.mean(r[0] for r in results if r[0] is not None))


# ------------------------------------------------------------------ the long prompts
def sentence(rng, i):
    return f" Entry {i}: the {rng.choice(WORDS)} by the {rng.choice(WORDS)} is {rng.choice(WORDS)}, " \
           f"not {rng.choice(WORDS)}."


def build_ttft_prompts(tok_base, n_prompt, n_suffix, nonce):
    """Prompt A (~n_prompt tokens) and B: the same prefix P (~n_prompt - n_suffix tokens, led by
    the nonce) and each its own ~n_suffix-token tail. Returns (A, B, tokens of A, of B, of P)."""
    rng = random.Random(nonce)
    head = f"Document {nonce}. The following entries are a record of objects and their qualities."
    # Each sentence is ~17 tokens; grow P to n_prompt - n_suffix tokens.
    sents = []
    prefix = head
    n_p = len(tokenize(tok_base, prefix))
    while n_p < n_prompt - n_suffix:
        batch = [sentence(rng, len(sents) + k) for k in range(max(1, (n_prompt - n_suffix - n_p) // 17))]
        sents += batch
        prefix = head + "".join(sents)
        n_p = len(tokenize(tok_base, prefix))
    while n_p > n_prompt - n_suffix and len(sents) > 1:
        sents.pop()
        prefix = head + "".join(sents)
        n_p = len(tokenize(tok_base, prefix))

    def tail(tag):
        out = ""
        k = 0
        while len(tokenize(tok_base, prefix + out)) - n_p < n_suffix:
            out += f" Addendum {tag}{k}: the {rng.choice(WORDS)} near the {rng.choice(WORDS)}."
            k += 1
        return out + "\nSummary:"

    a = prefix + tail("A")
    b = prefix + tail("B")
    return a, b, len(tokenize(tok_base, a)), len(tokenize(tok_base, b)), n_p


def ttft_pair(server, a, b, model_name, extra, warm_extra):
    """TTFT of A (cold), then of B (warm, after A). Each makes 4 tokens."""
    body = base_body(model_name, extra)
    body.update(max_tokens=4, ignore_eos=True)
    cold = stream_completion(server.base, dict(body, prompt=a))
    warm = stream_completion(server.base, dict(body, prompt=b, **warm_extra))
    return dict(cold_s=cold[0], warm_s=warm[0], cold_cached=cold[3], warm_cached=warm[3])


# ------------------------------------------------------------------ report
def mean(xs):
    return statistics.mean(xs) if xs else float("nan")


def fmt(xs, scale=1.0, digits=1):
    if not xs:
        return "–"
    m = statistics.mean(xs) * scale
    if len(xs) == 1:
        return f"{m:.{digits}f}"
    return f"{m:.{digits}f} ± {statistics.stdev(xs) * scale:.{digits}f}"


def ratio(a, b):
    if not a or not b:
        return "–"
    return f"{mean(a) / mean(b):.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("--llama-server", default="", help="llama.cpp's llama-server binary (absent: skipped)")
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-np", "--parallel", type=int, default=16, help="slots of both servers")
    ap.add_argument("--ctx", type=int, default=4096,
                    help="context of one request: ferrox -c CTX (its shared pool), llama-server -c NP*CTX")
    ap.add_argument("-r", "--reps", type=int, default=3)
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="tokens per client in the throughput runs")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--ttft-prompt", type=int, default=2000, help="tokens of the TTFT prompt (0: no TTFT test)")
    ap.add_argument("--ttft-suffix", type=int, default=50, help="tokens of the warm prompt that differ")
    ap.add_argument("--llama-extra", default="", help="more llama-server arguments, e.g. '-kvu' (one shared KV pool)")
    ap.add_argument("--ferrox-extra", default="", help="more ferrox serve arguments, e.g. '--kv-type q8_0'")
    ap.add_argument("--json-out", help="write every sample here as JSON")
    args = ap.parse_args()

    clients = [int(c) for c in args.clients.split(",") if c]
    if max(clients) > args.parallel:
        log(f"warning: {max(clients)} clients for {args.parallel} slots: some will queue")
    if args.ttft_prompt and args.ttft_prompt + 8 > args.ctx:
        sys.exit(f"--ctx {args.ctx} is too small for a {args.ttft_prompt}-token prompt")
    if max(clients) * (args.n_gen + 32) > args.ctx:
        log(f"warning: ferrox's pool (-c {args.ctx}) cannot hold {max(clients)} streams of "
            f"{args.n_gen} tokens at once: expect preemptions")
    model_name = os.path.splitext(os.path.basename(args.model))[0]
    t = str(args.threads)

    servers = []
    try:
        servers.append(ServerProc("ferrox", lambda port: [
            args.ferrox, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
            "-np", str(args.parallel), "-c", str(args.ctx), "-t", t, *shlex.split(args.ferrox_extra)]))
        llama = args.llama_server
        if llama and os.path.exists(llama):
            servers.append(ServerProc("llama.cpp", lambda port: [
                llama, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                "-np", str(args.parallel), "-c", str(args.parallel * args.ctx), "-t", t, "-tb", t,
                "--no-webui", *shlex.split(args.llama_extra)]))
        elif llama:
            log(f"llama-server not found at {llama}: llama.cpp column skipped")
        names = [s.name for s in servers]
        # llama.cpp: cache_prompt is its default, but say so; ferrox accepts the field too.
        extra = {s.name: ({"cache_prompt": True} if s.name == "llama.cpp" else {}) for s in servers}

        # Warm-up: first requests fault pages in and size buffers.
        for s in servers:
            stream_completion(s.base, dict(base_body(model_name, extra[s.name]), prompt="Hello", max_tokens=8))
            throughput(s, min(4, max(clients)), 4, model_name, extra[s.name])

        samples = {n: {"tok_s": {c: [] for c in clients}, "ttft_cold": [], "ttft_warm": [],
                       "warm_cached": [], "cold_cached": []} for n in names}
        ttft_info = None
        for rep in range(args.reps):
            for c in clients:
                for s in servers:
                    t_before = engine_times(s.base) if s.name == "ferrox" else None
                    r = throughput(s, c, args.n_gen, model_name, extra[s.name])
                    samples[s.name]["tok_s"][c].append(r["tok_s"])
                    t_after = engine_times(s.base) if t_before else None
                    if t_after and t_after[0] > t_before[0]:
                        step, fwd = t_after[0] - t_before[0], t_after[1] - t_before[1]
                        samples[s.name].setdefault("overhead", {}).setdefault(c, []).append(1 - fwd / step)
                    log(f"rep {rep + 1}/{args.reps} {s.name:9s} {c:2d} clients: {r['tok_s']:7.1f} tok/s "
                        f"({r['tokens']} tokens in {r['wall_s']:.2f} s, mean TTFT {r['mean_ttft_s'] * 1e3:.0f} ms, "
                        f"client CPU {r['client_cpu_s']:.2f} s)")
            if args.ttft_prompt:
                nonce = f"{rep}-{random.randrange(1 << 30):08x}"
                a, b, n_a, n_b, n_p = build_ttft_prompts(servers[0].base, args.ttft_prompt, args.ttft_suffix, nonce)
                ttft_info = (n_a, n_b, n_p)
                for s in servers:
                    r = ttft_pair(s, a, b, model_name, extra[s.name], {"cache_prompt": True} if s.name == "llama.cpp" else {})
                    d = samples[s.name]
                    d["ttft_cold"].append(r["cold_s"])
                    d["ttft_warm"].append(r["warm_s"])
                    d["cold_cached"].append(r["cold_cached"])
                    d["warm_cached"].append(r["warm_cached"])
                    log(f"rep {rep + 1}/{args.reps} {s.name:9s} TTFT cold {r['cold_s'] * 1e3:.0f} ms "
                        f"(cached {r['cold_cached']}), warm {r['warm_s'] * 1e3:.0f} ms (cached {r['warm_cached']}); "
                        f"prompt A {n_a} tokens, B {n_b}, shared {n_p}")
    finally:
        for s in servers:
            s.stop()

    # ------------------------------------------------------------ markdown
    has_llama = "llama.cpp" in samples
    out = []
    out.append("`python3 bench/bench_serving.py " + " ".join(sys.argv[1:]) + "`")
    out.append("")
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    out.append(f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, load average at the end {load:.2f}. "
               f"Model {model_name}; {args.threads} threads; -np {args.parallel}; ferrox -c {args.ctx}, "
               f"llama-server -c {args.parallel * args.ctx}; {args.reps} repetition(s), mean ± sd."
               + (f" ferrox extra: `{args.ferrox_extra}`." if args.ferrox_extra else "")
               + (f" llama-server extra: `{args.llama_extra}`." if args.llama_extra else ""))
    out.append("")
    hdr = "| test | ferrox |" + (" llama.cpp | ferrox / llama.cpp |" if has_llama else "")
    out.append(hdr)
    out.append("|---|---|" + ("---|---|" if has_llama else ""))

    def row(label, key_fn, scale=1.0, digits=1, note=""):
        f = key_fn(samples["ferrox"])
        line = f"| {label} | {fmt(f, scale, digits)} |"
        if has_llama:
            l = key_fn(samples["llama.cpp"])
            line += f" {fmt(l, scale, digits)} | {ratio(f, l)}{note} |"
        out.append(line)

    for c in clients:
        row(f"aggregate generation, {c} stream{'s' if c > 1 else ''} × {args.n_gen} tokens (tok/s)",
            lambda d, c=c: d["tok_s"][c])
    if len(clients) > 1:
        lo, hi = min(clients), max(clients)

        def speedup(d):
            return [h / l for h, l in zip(d["tok_s"][hi], d["tok_s"][lo])]
        row(f"{hi} streams / {lo} stream (issue: ≥ 4 for ferrox)", speedup, digits=2)
    overhead = samples.get("ferrox", {}).get("overhead", {})
    for c in clients:
        if c in overhead:
            out.append(f"| ferrox engine per-step overhead, {c} stream{'s' if c > 1 else ''} (1 - forward / step, "
                       f"%; issue: < 5) | {fmt(overhead[c], 100.0, 1)} |" + (" | |" if has_llama else ""))
    if args.ttft_prompt and ttft_info:
        n_a, n_b, n_p = ttft_info
        row(f"TTFT cold, {n_a}-token prompt (ms)", lambda d: d["ttft_cold"], 1e3, 0, " (lower is better)")
        row(f"TTFT warm, {n_b}-token prompt sharing {n_p} (ms)", lambda d: d["ttft_warm"], 1e3, 0, " (lower is better)")

        def wc(d):
            return [w / c for w, c in zip(d["ttft_warm"], d["ttft_cold"])]
        row("warm / cold (issue: < 0.2 for ferrox)", wc, digits=3)
        cached = " | ".join(f"{s}: cold {samples[s]['cold_cached'][-1]}, warm {samples[s]['warm_cached'][-1]}"
                            for s in samples)
        out.append("")
        out.append(f"Cached prompt tokens reported in the last repetition ({cached}).")
    print("\n".join(out))

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"args": vars(args), "samples": samples, "ttft_tokens": ttft_info}, f, indent=1)


if __name__ == "__main__":
    main()

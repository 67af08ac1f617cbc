#!/usr/bin/env python3
"""Latency of GET /metrics while the server generates: what a router's scraper sees.

Routers and the Inference Extension's endpoint picker scrape each replica's /metrics about 20
times a second (every 50 ms); the scrape must stay cheap while the replica serves (issue 47:
p99 under 5 ms with 16 streams). This starts `ferrox serve` with --metrics-compat vllm,llamacpp
(every family on), keeps C streaming chat clients busy (closed loop: each starts a new request
when its stream ends), and scrapes /metrics at R per second over one keep-alive connection for
D seconds, timing each scrape from the request sent to the whole body read. An idle phase
first gives the floor.

Usage:
  python3 bench/bench_metrics_latency.py [--ferrox build/bin/ferrox] [-m MODEL] [-t THREADS]
                                         [--clients 16] [--rate 20] [--seconds 20] [-n 256]
Prints a markdown table (idle and loaded: scrapes; p50, p99, max in ms as the client saw them;
p50 and p99 of the server's own time from the access log, routed to answered; the chunks/s the
streams made meanwhile) to paste into bench/RESULTS.md with the command line.
"""
import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit("ferrox serve exited: " + proc.stdout.read())
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("ferrox serve did not become ready")


class Streams:
    """C closed-loop streaming clients; counts the SSE chunks they receive."""

    def __init__(self, port, n_clients, max_tokens):
        self.port, self.max_tokens = port, max_tokens
        self.stop = threading.Event()
        self.n_chunks = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(n_clients)]
        for t in self.threads:
            t.start()

    def run(self, i):
        k = 0
        while not self.stop.is_set():
            body = json.dumps({"messages": [{"role": "user", "content": f"Client {i}, story {k}: tell a long tale."}],
                               "max_tokens": self.max_tokens, "ignore_eos": True, "stream": True})
            k += 1
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
                r = c.getresponse()
                for line in r:
                    if line.startswith(b"data: {"):
                        with self.lock:
                            self.n_chunks += 1
                    if self.stop.is_set():
                        break
                c.close()
            except OSError:
                time.sleep(0.1)

    def running(self, port):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/get_load")
        return json.loads(c.getresponse().read())["load"]


def scrape(port, rate, seconds):
    """Latencies in ms of GET /metrics at `rate` per second for `seconds`."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out, size = [], 0
    period = 1.0 / rate
    t_next = time.perf_counter()
    end = t_next + seconds
    while t_next < end:
        now = time.perf_counter()
        if now < t_next:
            time.sleep(t_next - now)
        t0 = time.perf_counter()
        c.request("GET", "/metrics")
        r = c.getresponse()
        body = r.read()
        out.append((time.perf_counter() - t0) * 1e3)
        assert r.status == 200 and b"vllm:kv_cache_usage_perc" in body, r.status
        size = len(body)
        t_next += period
    return out, size


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-t", "--threads", type=int, default=0, help="ferrox -t (0: its default)")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--rate", type=float, default=20)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("-n", "--max-tokens", type=int, default=256)
    a = ap.parse_args()

    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="metrics_latency_", suffix=".jsonl", delete=False).name
    cmd = [a.ferrox, "serve", "-m", a.model, "--port", str(port), "-np", str(a.clients), "-c", "8192",
           "--metrics-compat", "vllm,llamacpp", "--access-log", log]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_ready(port, proc)
        idle, size = scrape(port, a.rate, min(5.0, a.seconds))
        streams = Streams(port, a.clients, a.max_tokens)
        deadline = time.time() + 30
        while streams.running(port) < a.clients and time.time() < deadline:
            time.sleep(0.05)
        n0, t0 = streams.n_chunks, time.time()
        loaded, size_loaded = scrape(port, a.rate, a.seconds)
        tok_s = (streams.n_chunks - n0) / (time.time() - t0)
        streams.stop.set()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    # The server's own time per scrape (the access log's total_ms: routed to answered), in order.
    server_ms = [json.loads(l)["total_ms"] for l in open(log) if '"route":"/metrics"' in l]
    os.unlink(log)
    server_idle, server_loaded = server_ms[:len(idle)], server_ms[len(idle):len(idle) + len(loaded)]
    print(f"`{' '.join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in cmd)}`, "
          f"{a.clients} streaming clients, /metrics at {a.rate:g}/s for {a.seconds:g} s\n")
    print("| phase | scrapes | body bytes | client p50 ms | client p99 ms | client max ms | server p50 ms "
          "| server p99 ms | stream chunks/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, xs, srv, sz, tps in (("idle", idle, server_idle, size, 0.0),
                                   (f"{a.clients} streams", loaded, server_loaded, size_loaded, tok_s)):
        print(f"| {name} | {len(xs)} | {sz} | {statistics.median(xs):.2f} | {pct(xs, 99):.2f} | {max(xs):.2f} "
              f"| {statistics.median(srv):.2f} | {pct(srv, 99):.2f} | {tps:.0f} |")


if __name__ == "__main__":
    main()

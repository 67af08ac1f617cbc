#!/usr/bin/env python3
"""Soak test of `ferrox serve`: many concurrent streaming clients for minutes, watching for
errors, leaks (RSS, KV blocks) and requests that never end.

Starts `ferrox serve -m MODEL -np SLOTS` on a free loopback port, then runs CLIENTS concurrent
streaming clients (asyncio + httpx, one connection each, kept alive) spread over the generating
routes (/v1/chat/completions, /v1/messages, /v1/responses with store false, /completion), each
request with a random max_tokens in [8, 64] and, in --cancel-frac of them, a disconnect in the
middle of the stream (the connection is closed after a random number of events).

Every --interval seconds it samples the server's RSS (/proc/PID/status), /metrics
(ferrox_requests_running, ferrox_requests_waiting, ferrox_kv_blocks_used, summed over the
`model` label), requests done and errors. An error is anything but an intended cancel: a non-200
status, a malformed SSE line or event, an error event, a stream that ends without its terminal
event (or has events after it), a transport error or a timeout.

At the end it stops sending, waits for the clients to finish, then for running, waiting and
kv_blocks_used to return to 0, stops the server (SIGTERM, exit code 0 expected) and prints a
markdown table over time, time to first token (request sent -> first text event, so it includes
the wait for a slot) and inter-token latency (between consecutive text events of one stream),
p50/p99, plus the access log's status counts.

Usage:
  python3 bench/soak.py [--minutes 10] [--clients 256] [--client-addrs 4] [-np 16] [-t 2] [--seed 1]
                        [--ferrox build/bin/ferrox] [-m MODEL] [--extra 'ARGS'] [--json-out F]
Exit status 1 when there were errors or the server did not return to idle.
"""
import argparse
import asyncio
import json
import os
import platform
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
ROUTES = ["/v1/chat/completions", "/v1/messages", "/v1/responses", "/completion"]
TOPICS = ["the ocean", "a small village", "mountains in winter", "a robot learning to paint",
          "the history of bread", "a lighthouse keeper", "coffee", "the moon landing", "bees",
          "a cat and a dog", "rainy afternoons", "an old library", "the first computer", "snow",
          "a desert journey", "a violin maker", "trains at night", "a chess match", "an island"]
SYSTEM = "You are a helpful assistant. Answer briefly and clearly."


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def metric_sum(text, name):
    total, seen = 0.0, False
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name and "le=" not in (m.group(2) or ""):
            if 'model="' not in (m.group(2) or ""):
                raise ValueError(f"{name} without a model label: {line}")
            total += float(m.group(3))
            seen = True
    if not seen:
        raise KeyError(name)
    return total


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def make_request(rng, route):
    topic = rng.choice(TOPICS)
    n = rng.randint(8, 64)
    ask = f"Write a few sentences about {topic}. ({rng.randint(0, 999)})"
    temp = rng.choice([0, 0.7, 1.0])
    if route == "/v1/chat/completions":
        msgs = ([{"role": "system", "content": SYSTEM}] if rng.random() < 0.5 else []) + [{"role": "user", "content": ask}]
        return {"messages": msgs, "max_tokens": n, "temperature": temp, "stream": True,
                "stream_options": {"include_usage": True}}
    if route == "/v1/messages":
        body = {"messages": [{"role": "user", "content": ask}], "max_tokens": n, "temperature": temp, "stream": True}
        if rng.random() < 0.5:
            body["system"] = SYSTEM
        return body
    if route == "/v1/responses":
        return {"input": ask, "max_output_tokens": n, "temperature": temp, "stream": True, "store": False}
    return {"prompt": f"A short story about {topic}:", "n_predict": n, "temperature": temp, "stream": True}


class StreamError(Exception):
    pass


class Checker:
    """Reads one route's SSE events; knows its text events, error events and terminal event."""

    def __init__(self, route):
        self.route = route
        self.ended = False
        self.last_seq = -1

    def on_event(self, name, data):
        """Returns True for an event that carries generated text. Raises StreamError."""
        r = self.route
        if self.ended and not (r == "/v1/chat/completions" and data == "[DONE]"):
            raise StreamError(f"event after the terminal event: {name} {data[:80]}")
        if r == "/v1/chat/completions":
            if data == "[DONE]":
                if self.ended:
                    raise StreamError("two [DONE]")
                self.ended = True
                return False
            ev = self._json(data)
            if "error" in ev:
                raise StreamError(f"error event: {data[:200]}")
            if ev.get("object") != "chat.completion.chunk":
                raise StreamError(f"not a chunk: {data[:120]}")
            return any((c.get("delta") or {}).get("content") for c in ev.get("choices", []))
        if r == "/v1/messages":
            ev = self._json(data)
            if name != ev.get("type"):
                raise StreamError(f"event name {name!r} != type {ev.get('type')!r}")
            if name == "error":
                raise StreamError(f"error event: {data[:200]}")
            if name == "message_stop":
                self.ended = True
            return name == "content_block_delta" and ev["delta"].get("type") == "text_delta" and bool(ev["delta"].get("text"))
        if r == "/v1/responses":
            ev = self._json(data)
            if name != ev.get("type"):
                raise StreamError(f"event name {name!r} != type {ev.get('type')!r}")
            seq = ev.get("sequence_number")
            if not isinstance(seq, int) or seq <= self.last_seq:
                raise StreamError(f"sequence_number {seq} after {self.last_seq}")
            self.last_seq = seq
            if name in ("response.failed", "error"):
                raise StreamError(f"error event: {data[:200]}")
            if name in ("response.completed", "response.incomplete"):
                self.ended = True
            return name == "response.output_text.delta" and bool(ev.get("delta"))
        ev = self._json(data)  # /completion
        if "error" in ev:
            raise StreamError(f"error event: {data[:200]}")
        if "content" not in ev or "stop" not in ev:
            raise StreamError(f"not a /completion chunk: {data[:120]}")
        if ev["stop"]:
            self.ended = True
        return bool(ev["content"])

    @staticmethod
    def _json(data):
        try:
            return json.loads(data)
        except ValueError:
            raise StreamError(f"malformed JSON: {data[:120]!r}") from None


class Stats:
    def __init__(self):
        self.done = 0          # completed normally
        self.cancelled = 0     # intended disconnects
        self.errors = 0
        self.error_log = []
        self.ttft = []         # seconds
        self.itl = []          # seconds
        self.per_route = {r: 0 for r in ROUTES}
        self.tokens = 0        # text events
        self.kinds = {}        # error message with digits masked -> count

    def error(self, msg):
        self.errors += 1
        kind = re.sub(r"\d+", "N", msg)[:90]
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if len(self.error_log) < 50:
            self.error_log.append(f"{time.strftime('%H:%M:%S')} {msg}")


async def one_request(client, base, rng, stats):
    route = rng.choice(ROUTES)
    body = make_request(rng, route)
    cancel_after = rng.randint(1, 12) if rng.random() < stats.cancel_frac else None
    chk = Checker(route)
    t0 = time.perf_counter()
    t_last = None
    n_events = 0
    try:
        async with client.stream("POST", base + route, json=body) as r:
            if r.status_code != 200:
                text = (await r.aread())[:200]
                stats.error(f"{route}: HTTP {r.status_code} {text!r}")
                if r.headers.get("retry-after"):  # 429 / 503: back off as a real client would
                    await asyncio.sleep(float(r.headers["retry-after"]))
                return
            if not r.headers.get("content-type", "").startswith("text/event-stream"):
                stats.error(f"{route}: content-type {r.headers.get('content-type')}")
                return
            name, data = None, None
            async for line in r.aiter_lines():
                if line == "":
                    if data is None:
                        if name is not None:
                            raise StreamError(f"event {name!r} without data")
                        continue
                    now = time.perf_counter()
                    if chk.on_event(name, data):
                        stats.tokens += 1
                        if t_last is None:
                            stats.ttft.append(now - t0)
                        else:
                            stats.itl.append(now - t_last)
                        t_last = now
                    name, data = None, None
                    n_events += 1
                    if cancel_after is not None and n_events >= cancel_after and not chk.ended:
                        stats.cancelled += 1
                        stats.per_route[route] += 1
                        return  # leaving the block closes the connection mid-stream
                elif line.startswith(":"):
                    continue  # comment / keep-alive
                elif line.startswith("event: "):
                    if name is not None or data is not None:
                        raise StreamError(f"event line inside an event: {line[:80]}")
                    name = line[7:]
                elif line.startswith("data: "):
                    if data is not None:
                        raise StreamError("two data lines in one event")
                    data = line[6:]
                else:
                    raise StreamError(f"malformed SSE line: {line[:80]!r}")
            if name is not None or data is not None:
                raise StreamError("stream ended inside an event")
            if not chk.ended:
                raise StreamError("stream ended without its terminal event")
            stats.done += 1
            stats.per_route[route] += 1
    except StreamError as e:
        stats.error(f"{route}: {e}")
    except (httpx.HTTPError, OSError) as e:
        stats.error(f"{route}: {type(e).__name__}: {e}")


async def client_loop(i, base, seed, stats, stop_at, local_address):
    rng = random.Random(seed * 100003 + i)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    transport = httpx.AsyncHTTPTransport(local_address=local_address, limits=limits)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), transport=transport) as client:
        await asyncio.sleep(rng.random() * 2)  # spread the first wave
        while time.monotonic() < stop_at:
            await one_request(client, base, rng, stats)


def sampler_client():
    # Its own source address: the server caps connections per client IP (256 by default), and
    # the sampler must not take one of the clients' places nor be refused.
    return httpx.AsyncClient(timeout=30, transport=httpx.AsyncHTTPTransport(local_address="127.0.0.254"))


async def sampler(base, pid, stats, t_start, interval, rows, stop_evt):
    async with sampler_client() as c:
        while True:
            rows.append(await sample(c, base, pid, stats, t_start))
            try:
                await asyncio.wait_for(stop_evt.wait(), interval)
                return
            except asyncio.TimeoutError:
                pass


async def sample(c, base, pid, stats, t_start):
    row = {"t": time.monotonic() - t_start, "rss": rss_mib(pid), "done": stats.done,
           "cancelled": stats.cancelled, "errors": stats.errors}
    try:
        m = (await c.get(base + "/metrics")).text
        row.update(running=metric_sum(m, "ferrox_requests_running"),
                   waiting=metric_sum(m, "ferrox_requests_waiting"),
                   kv=metric_sum(m, "ferrox_kv_blocks_used"))
    except (httpx.HTTPError, KeyError, ValueError) as e:
        stats.error(f"/metrics: {e}")
        row.update(running=float("nan"), waiting=float("nan"), kv=float("nan"))
    return row


async def soak(args, base, pid):
    stats = Stats()
    stats.cancel_frac = args.cancel_frac
    rows = []
    t_start = time.monotonic()
    stop_at = t_start + args.minutes * 60
    stop_evt = asyncio.Event()
    samp = asyncio.create_task(sampler(base, pid, stats, t_start, args.interval, rows, stop_evt))
    addrs = [f"127.0.0.{1 + k}" for k in range(args.client_addrs)]
    await asyncio.gather(*[client_loop(i, base, args.seed, stats, stop_at, addrs[i % len(addrs)])
                           for i in range(args.clients)])
    t_clients_done = time.monotonic() - t_start
    stop_evt.set()
    await samp
    # Back to idle: nothing running or waiting, no KV block referenced.
    idle = False
    async with sampler_client() as c:
        deadline = time.monotonic() + args.idle_timeout
        while time.monotonic() < deadline:
            row = await sample(c, base, pid, stats, t_start)
            if row["running"] == 0 and row["waiting"] == 0 and row["kv"] == 0:
                idle = True
                break
            await asyncio.sleep(0.5)
        rows.append(row)
    return stats, rows, idle, t_clients_done


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--clients", type=int, default=256)
    ap.add_argument("-np", "--parallel", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--max-queue", type=int, default=1024, help="server --max-queue (above --clients: no 429)")
    ap.add_argument("--client-addrs", type=int, default=4,
                    help="loopback source addresses the clients are spread over (127.0.0.1..N): the server's "
                         "per-client-IP connection cap is 256")
    ap.add_argument("--cancel-frac", type=float, default=0.2)
    ap.add_argument("--interval", type=float, default=10)
    ap.add_argument("--idle-timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--extra", default="", help="more ferrox serve flags")
    ap.add_argument("--json-out")
    args = ap.parse_args()

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logdir = tempfile.mkdtemp(prefix="ferrox-soak-")
    access_log = os.path.join(logdir, "access.jsonl")
    cmd = [args.ferrox, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
           "-np", str(args.parallel), "-t", str(args.threads), "--max-queue", str(args.max_queue),
           "--access-log", access_log, *shlex.split(args.extra)]
    server_log = open(os.path.join(logdir, "server.log"), "w")
    proc = subprocess.Popen(cmd, stdout=server_log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                sys.exit(f"ferrox serve exited ({proc.returncode}); see {server_log.name}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                sys.exit("ferrox serve did not become ready")
            time.sleep(0.2)
        cpu = next((l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
                    if l.startswith("Model name")), platform.processor())
        print(f"# soak: {' '.join(shlex.quote(a) for a in cmd)}")
        print(f"# {args.clients} clients from {args.client_addrs} source address(es), {args.minutes} min, cancel {args.cancel_frac:.0%}, CPU {cpu}, "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start", flush=True)
        stats, rows, idle, t_clients = asyncio.run(soak(args, base, proc.pid))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        server_log.close()
    rc = proc.returncode

    statuses = {}
    with open(access_log) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("route") in ROUTES:
                statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    with open(server_log.name) as f:
        server_errors = [l.rstrip() for l in f if re.search(r"error|fail|warn", l, re.I)]

    print()
    print("| t (s) | RSS (MiB) | running | waiting | KV blocks used | requests done | cancelled | errors |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['t']:.0f} | {r['rss']:.1f} | {r['running']:.0f} | {r['waiting']:.0f} | {r['kv']:.0f} | "
              f"{r['done']} | {r['cancelled']} | {r['errors']} |")
    ms = lambda x: f"{x * 1000:.1f}"
    print()
    total = stats.done + stats.cancelled
    print(f"requests: {total} ({stats.done} complete, {stats.cancelled} cancelled on purpose), "
          f"{stats.errors} errors; per route: " + ", ".join(f"{k} {v}" for k, v in stats.per_route.items()))
    print(f"text events: {stats.tokens} ({stats.tokens / max(t_clients, 1e-9):.1f}/s over {t_clients:.0f} s)")
    print(f"TTFT (request sent -> first text event, includes queueing): p50 {ms(pct(stats.ttft, 50))} ms, "
          f"p99 {ms(pct(stats.ttft, 99))} ms (n={len(stats.ttft)})")
    print(f"ITL (between text events of one stream): p50 {ms(pct(stats.itl, 50))} ms, "
          f"p99 {ms(pct(stats.itl, 99))} ms (n={len(stats.itl)})")
    print(f"RSS: first sample {rows[0]['rss']:.1f} MiB, after 60 s "
          f"{next((r['rss'] for r in rows if r['t'] >= 60), rows[-1]['rss']):.1f} MiB, max {max(r['rss'] for r in rows):.1f} MiB, "
          f"end {rows[-1]['rss']:.1f} MiB")
    print(f"back to idle (running, waiting, KV blocks used all 0): {'yes' if idle else 'NO'}; "
          f"server exit code {rc}")
    print(f"access log statuses (generating routes): {dict(sorted(statuses.items()))}")
    if server_errors:
        print(f"server log lines with error/fail/warn: {len(server_errors)}; first: {server_errors[:5]}")
    for k, v in sorted(stats.kinds.items(), key=lambda kv: -kv[1])[:10]:
        print(f"error kind x{v}: {k}")
    for e in stats.error_log[:20]:
        print("error:", e)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rows": rows, "done": stats.done, "cancelled": stats.cancelled, "errors": stats.errors,
                       "error_log": stats.error_log, "error_kinds": stats.kinds, "ttft": stats.ttft, "itl": stats.itl, "idle": idle,
                       "exit_code": rc, "statuses": statuses, "cmd": cmd}, f)
    print(f"# logs in {logdir}")
    sys.exit(0 if stats.errors == 0 and idle and rc == 0 else 1)


if __name__ == "__main__":
    main()

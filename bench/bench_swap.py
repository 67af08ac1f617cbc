#!/usr/bin/env python3
"""Hot-swap cost of `ferrox serve`: how long a replace takes to show, and what it does to the
streams that are running while it happens.

Starts `ferrox serve -m MODEL --alias m --admin-key KEY -np SLOTS`, makes a second checkpoint
as tests/e2e/test_swap.py does (the model with output_norm negated: greedy answers differ from
the first token), loads it once beside the first under alias "b" to learn both checkpoints'
greedy answers, unloads it, then:

1. Baseline (--baseline-s seconds, no swap): --streams clients loop on streamed greedy chat
   completions (--stream-tokens tokens, ignore_eos), and --probes clients on short greedy
   non-streamed probes (--probe-tokens tokens).
2. Swaps: the same load, plus --swaps POST /admin/models/load {"replace": true} that alternate
   between the two checkpoints under alias "m", --gap-s seconds after the previous swap showed.

Figures:
- load request: POST sent -> its 200 answer (the model is loaded and registered).
- swap latency: POST sent -> the first probe answer received that is the new checkpoint's
  (probes sent before the swap finish on the old generation, as they should).
- inter-token latency of the streams (gaps between consecutive text chunks), p50/p99/max: in the
  baseline, and for the streams in flight during a swap (their lifetime overlaps a load
  request's [sent, answered] window), and the gaps that overlap a load window themselves.
- every answer must be exactly one checkpoint's (a splice is an error), no request may fail,
  and after the last swap one model is left with its KV blocks back to 0.

Usage:
  python3 bench/bench_swap.py [--ferrox build/bin/ferrox] [-m MODEL] [--swaps 10] [-np 8] [-t 2]
                              [--streams 4] [--probes 2] [--baseline-s 30] [--gap-s 3]
                              [--json-out FILE]
"""
import argparse
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
KEY = "bench-admin"
ADMIN = {"Authorization": f"Bearer {KEY}"}
STREAM_PROMPT = [{"role": "user", "content": "Tell me about the history of the bicycle."}]
PROBE_PROMPT = [{"role": "user", "content": "Name three colors."}]


def perturbed_copy(src, dst):
    """output_norm negated: every logit flips sign (tests/e2e/test_swap.py)."""
    from gguf import GGUFReader
    shutil.copyfile(src, dst)
    t = next(t for t in GGUFReader(src).tensors if t.name == "output_norm.weight")
    assert t.tensor_type.name == "F32"
    with open(dst, "r+b") as f:
        f.seek(t.data_offset)
        vals = struct.unpack(f"<{t.n_elements}f", f.read(4 * t.n_elements))
        f.seek(t.data_offset)
        f.write(struct.pack(f"<{t.n_elements}f", *[-v for v in vals]))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def stream_chat(client, base, model, n):
    """(text, [(t, chunk)], t_sent, t_end) of a streamed greedy chat completion; raises on failure."""
    body = {"model": model, "messages": STREAM_PROMPT, "temperature": 0, "max_tokens": n, "ignore_eos": True,
            "stream": True}
    chunks = []
    t_sent = time.perf_counter()
    ended = False
    with client.stream("POST", base + "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:200]!r}")
        for line in r.iter_lines():
            if line == "data: [DONE]":
                ended = True
                continue
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(f"error event {ev}")
            for c in ev.get("choices", []):
                text = (c.get("delta") or {}).get("content")
                if text:
                    chunks.append((time.perf_counter(), text))
    if not ended:
        raise RuntimeError("stream without [DONE]")
    return "".join(c for _, c in chunks), chunks, t_sent, time.perf_counter()


def probe(client, base, model, n):
    body = {"model": model, "messages": PROBE_PROMPT, "temperature": 0, "max_tokens": n}
    r = client.post(base + "/v1/chat/completions", json=body)
    if r.status_code != 200:
        raise RuntimeError(f"probe HTTP {r.status_code}: {r.text[:200]}")
    return r.json()["choices"][0]["message"]["content"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ferrox", default=os.path.join(ROOT, "build/bin/ferrox"))
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL)
    ap.add_argument("--swaps", type=int, default=10)
    ap.add_argument("-np", "--parallel", type=int, default=8)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--stream-tokens", type=int, default=64)
    ap.add_argument("--probes", type=int, default=2)
    ap.add_argument("--probe-tokens", type=int, default=2)
    ap.add_argument("--baseline-s", type=float, default=30)
    ap.add_argument("--gap-s", type=float, default=3)
    ap.add_argument("--extra", default="")
    ap.add_argument("--json-out")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="ferrox-swap-")
    other = os.path.join(tmp, "perturbed.gguf")
    perturbed_copy(args.model, other)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd = [args.ferrox, "serve", "-m", args.model, "--alias", "m", "--admin-key", KEY, "--host", "127.0.0.1",
           "--port", str(port), "-np", str(args.parallel), "-t", str(args.threads), *args.extra.split()]
    log = open(os.path.join(tmp, "server.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                sys.exit(f"ferrox serve exited; see {log.name}")
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                sys.exit("not ready")
            time.sleep(0.2)
        print(f"# swap bench: {' '.join(cmd)}")
        print(f"# second checkpoint {other} (output_norm negated); load average {os.getloadavg()[0]:.2f}", flush=True)
        c = httpx.Client(timeout=300)
        t = time.perf_counter()
        r = c.post(base + "/admin/models/load", headers=ADMIN, json={"path": other, "alias": "b"})
        assert r.status_code == 200, r.text
        print(f"# first load of the second checkpoint beside the first: {time.perf_counter() - t:.2f} s")
        paths = {"a": args.model, "b": other}
        expect_probe = {"a": probe(c, base, "m", args.probe_tokens), "b": probe(c, base, "b", args.probe_tokens)}
        expect_stream = {"a": stream_chat(c, base, "m", args.stream_tokens)[0],
                         "b": stream_chat(c, base, "b", args.stream_tokens)[0]}
        assert expect_probe["a"] != expect_probe["b"] and expect_stream["a"] != expect_stream["b"]
        assert c.post(base + "/admin/models/unload", headers=ADMIN, json={"alias": "b"}).status_code == 200

        def which(text, expect):
            hits = [k for k, v in expect.items() if v == text]
            return hits[0] if hits else None

        stop = threading.Event()
        streams, probes = [], []  # (t_sent, t_end, chunks, ckpt) / (t_sent, t_recv, ckpt)
        lock = threading.Lock()

        def streamer():
            with httpx.Client(timeout=300) as cl:
                while not stop.is_set():
                    try:
                        text, chunks, t0, t1 = stream_chat(cl, base, "m", args.stream_tokens)
                        k = which(text, expect_stream)
                        if k is None:
                            failures.append(f"stream: neither checkpoint's answer: {text!r}")
                        with lock:
                            streams.append((t0, t1, chunks, k))
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"stream: {e!r}")

        def prober():
            with httpx.Client(timeout=300) as cl:
                while not stop.is_set():
                    try:
                        t0 = time.perf_counter()
                        text = probe(cl, base, "m", args.probe_tokens)
                        t1 = time.perf_counter()
                        k = which(text, expect_probe)
                        if k is None:
                            failures.append(f"probe: neither checkpoint's answer: {text!r}")
                        with lock:
                            probes.append((t0, t1, k))
                    except Exception as e:  # noqa: BLE001
                        failures.append(f"probe: {e!r}")

        threads = [threading.Thread(target=streamer) for _ in range(args.streams)]
        threads += [threading.Thread(target=prober) for _ in range(args.probes)]
        t_base0 = time.perf_counter()
        for th in threads:
            th.start()
        time.sleep(args.baseline_s)
        t_base1 = time.perf_counter()
        swaps = []  # (t_sent, t_answered, t_first_new, new)
        cur = "a"
        for i in range(args.swaps):
            new = "b" if cur == "a" else "a"
            t0 = time.perf_counter()
            r = c.post(base + "/admin/models/load", headers=ADMIN, json={"path": paths[new], "alias": "m", "replace": True})
            t1 = time.perf_counter()
            if r.status_code != 200:
                failures.append(f"load {i}: HTTP {r.status_code} {r.text[:200]}")
                break
            t_new = None
            deadline = time.perf_counter() + 60
            while t_new is None and time.perf_counter() < deadline:
                time.sleep(0.02)
                with lock:
                    t_new = min((p[1] for p in probes if p[0] >= t0 and p[2] == new), default=None)
            if t_new is None:
                failures.append(f"swap {i}: no answer from the new checkpoint within 60 s")
            swaps.append((t0, t1, t_new, new))
            print(f"swap {i + 1}: load request {t1 - t0:.3f} s, first answer of the new checkpoint "
                  f"{(t_new - t0) if t_new else float('nan'):.3f} s after the request", flush=True)
            cur = new
            time.sleep(args.gap_s)
        stop.set()
        for th in threads:
            th.join()
        deadline = time.time() + 30
        while time.time() < deadline:
            listed = c.get(base + "/admin/models", headers=ADMIN).json()["data"]
            if len(listed) == 1 and listed[0]["kv_blocks_used"] == 0 and listed[0]["requests_running"] == 0:
                break
            time.sleep(0.2)
        with open(f"/proc/{proc.pid}/status") as f:
            rss = next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()

    # A probe that was sent after the swap request but answered by the old checkpoint is fine
    # (it may have been admitted before the new generation was registered); one sent after the
    # load's answer must be the new checkpoint's.
    late_old = 0
    for j, (t0, t1, t_new, new) in enumerate(swaps):
        t_next = swaps[j + 1][0] if j + 1 < len(swaps) else float("inf")
        late_old += sum(1 for p in probes if t1 < p[0] < t_next and p[2] != new)
    windows = [(s[0], s[1]) for s in swaps]

    def overlaps(a, b):
        return any(a < w1 and b > w0 for w0, w1 in windows)

    def gaps(chunks):
        return [(chunks[k - 1][0], chunks[k][0]) for k in range(1, len(chunks))]

    base_itl = [b - a for s in streams if s[0] >= t_base0 and s[1] <= t_base1 for a, b in gaps(s[2])]
    swap_streams = [s for s in streams if overlaps(s[0], s[1])]
    swap_itl = [b - a for s in swap_streams for a, b in gaps(s[2])]
    window_itl = [b - a for s in swap_streams for a, b in gaps(s[2]) if overlaps(a, b)]
    quiet_itl = [b - a for s in streams if s[0] > t_base1 and not overlaps(s[0], s[1]) for a, b in gaps(s[2])]
    ms = lambda x: f"{x * 1000:.1f}"
    load_d = [s[1] - s[0] for s in swaps]
    lat = [s[2] - s[0] for s in swaps if s[2]]
    print()
    print("| figure | p50 | p99 / max | n |")
    print("|---|---:|---:|---:|")
    print(f"| load request (POST sent -> 200), s | {pct(load_d, 50):.3f} | {max(load_d):.3f} | {len(load_d)} |")
    print(f"| swap latency (POST sent -> first answer of the new checkpoint), s | {pct(lat, 50):.3f} | {max(lat):.3f} | {len(lat)} |")
    pd = [p[1] - p[0] for p in probes]
    print(f"| probe request (its resolution), s | {pct(pd, 50):.3f} | {pct(pd, 99):.3f} / {max(pd):.3f} | {len(pd)} |")
    for name, xs in [("ITL, baseline (no swap), ms", base_itl),
                     ("ITL, streams in flight during a swap, ms", swap_itl),
                     ("ITL, gaps overlapping a load window, ms", window_itl),
                     ("ITL, swap phase, streams between swaps, ms", quiet_itl)]:
        print(f"| {name} | {ms(pct(xs, 50))} | {ms(pct(xs, 99))} / {ms(max(xs) if xs else float('nan'))} | {len(xs)} |")
    n_a = sum(1 for s in streams if s[3] == "a") + sum(1 for p in probes if p[2] == "a")
    n_b = sum(1 for s in streams if s[3] == "b") + sum(1 for p in probes if p[2] == "b")
    print()
    print(f"answers: {len(streams)} streams ({len(swap_streams)} during a swap) + {len(probes)} probes; "
          f"{n_a} first checkpoint, {n_b} second, {len(failures)} failures; "
          f"{late_old} probes sent after a load's answer came from the old checkpoint")
    print(f"after the last swap: {len(listed)} model(s), kv_blocks_used {listed[0]['kv_blocks_used']}, "
          f"generation {listed[0]['generation']}, RSS {rss:.0f} MiB; server exit code {proc.returncode}")
    for f in failures[:10]:
        print("failure:", f)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"swaps": swaps, "probes": probes, "streams": [(s[0], s[1], [t for t, _ in s[2]], s[3]) for s in streams],
                       "failures": failures, "cmd": cmd}, f)
    sys.exit(1 if failures or late_old or proc.returncode != 0 else 0)


if __name__ == "__main__":
    main()

"""Hot swap under load never splices two checkpoints: many concurrent streams on every
generating route while the model is replaced back and forth between two checkpoints whose
greedy answers differ; every answer is exactly one checkpoint's, no request fails, and after
the last swap memory and KV are back to one model's."""
import os
import shutil
import struct
import threading
import time

import httpx
import pytest
from gguf import GGUFReader

from conftest import MODEL, Server

ADMIN = {"Authorization": "Bearer admin-secret"}
PROMPT = [{"role": "user", "content": "Name three colors."}]


def perturbed_copy(src, dst):
    """The default model with output_norm negated: every logit flips sign, so greedy decoding
    picks different tokens (the least likely ones) from the first token on."""
    shutil.copyfile(src, dst)
    t = next(t for t in GGUFReader(src).tensors if t.name == "output_norm.weight")
    assert t.tensor_type.name == "F32"
    with open(dst, "r+b") as f:
        f.seek(t.data_offset)
        vals = struct.unpack(f"<{t.n_elements}f", f.read(4 * t.n_elements))
        f.seek(t.data_offset)
        f.write(struct.pack(f"<{t.n_elements}f", *[-v for v in vals]))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(l.split()[1] for l in f if l.startswith("VmRSS:")))


def requests_for(model):
    """(route, body, extract) for each generating route, greedy, streamed."""
    chat = {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 12, "stream": True}
    return [
        ("/v1/chat/completions", chat),
        ("/v1/messages", {"model": model, "messages": PROMPT, "temperature": 0, "max_tokens": 12, "stream": True}),
        ("/v1/responses", {"model": model, "input": "Name three colors.", "temperature": 0, "max_output_tokens": 12,
                           "stream": True, "store": False}),
        ("/completion", {"model": model, "prompt": "Three colors are", "temperature": 0, "n_predict": 12, "stream": True}),
        ("/v1/completions", {"model": model, "prompt": "Three colors are", "temperature": 0, "max_tokens": 12, "stream": True}),
    ]


def stream_text(base, path, body):
    """The concatenated text of a streamed answer, whatever the protocol; raises on failure."""
    import json
    text = []
    with httpx.stream("POST", base + path, json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        ended = False
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                ended |= line == "data: [DONE]"
                continue
            ev = json.loads(line[6:])
            assert "error" not in ev or ev.get("type") == "content_block_delta", ev
            if "choices" in ev:
                for c in ev["choices"]:
                    text.append(c.get("delta", {}).get("content") or c.get("text") or "")
            elif ev.get("type") == "content_block_delta" and ev["delta"]["type"] == "text_delta":
                text.append(ev["delta"]["text"])
            elif ev.get("type") == "response.output_text.delta":
                text.append(ev["delta"])
            elif ev.get("type") in ("message_stop", "response.completed", "response.incomplete"):
                ended = True
            elif "content" in ev and "stop" in ev:
                text.append(ev["content"])
                ended |= ev["stop"]
        assert ended, f"{path}: the stream ended without its terminal event"
    return "".join(text)


@pytest.fixture(scope="module")
def swap_server(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    other = str(tmp_path_factory.mktemp("swap") / "perturbed.gguf")
    perturbed_copy(MODEL, other)
    s = Server("--admin-key", "admin-secret", "--alias", "m", "-np", "8")
    s.other = other
    yield s
    s.stop()


def admin_load(base, path, alias, replace=False):
    r = httpx.post(base + "/admin/models/load", headers=ADMIN, timeout=120,
                   json={"path": path, "alias": alias, "replace": replace})
    assert r.status_code == 200, r.text
    return r.json()


def test_admin_needs_its_key_and_reports_errors(swap_server):
    base = swap_server.base
    assert httpx.get(base + "/admin/models").status_code == 401
    assert httpx.get(base + "/admin/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    r = httpx.post(base + "/admin/models/load", headers=ADMIN, json={"path": "/nonexistent.gguf", "alias": "x"})
    assert r.status_code == 400 and "nonexistent" in r.json()["error"]["message"]
    r = httpx.post(base + "/admin/models/load", headers=ADMIN, json={"path": MODEL, "alias": "m"})
    assert r.status_code == 409  # taken without "replace"
    listed = httpx.get(base + "/admin/models", headers=ADMIN).json()["data"]
    assert [(m["id"], m["state"]) for m in listed] == [("m", "ready")]
    assert listed[0]["weight_bytes"] > 50 << 20 and listed[0]["kv_blocks_total"] > 0


def test_admin_off_without_key(server):
    assert httpx.get(server.base + "/admin/models").status_code == 403


def test_two_models_then_swap_under_load_never_splices(swap_server):
    base = swap_server.base
    # Expected greedy answers of each checkpoint on every route, with both loaded at once.
    admin_load(base, swap_server.other, "b")
    models = httpx.get(base + "/v1/models").json()["data"]
    assert sorted(m["id"] for m in models) == ["b", "m"]
    r = httpx.post(base + "/v1/chat/completions", json={"model": "nope", "messages": PROMPT})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    expect = {}
    for name in ("m", "b"):
        for path, body in requests_for(name):
            expect[(name, path)] = stream_text(base, path, body)
    for path, _ in requests_for("m"):
        assert expect[("m", path)] != expect[("b", path)], path
    assert httpx.post(base + "/admin/models/unload", headers=ADMIN, json={"alias": "b"}).status_code == 200
    time.sleep(1)
    rss_one = rss_kib(swap_server.proc.pid)

    results, failures = [], []
    stop = threading.Event()

    def client(i):
        while not stop.is_set():
            path, body = requests_for("m")[i % 5]
            try:
                results.append((path, stream_text(base, path, body)))
            except Exception as e:  # noqa: BLE001 - every failure counts
                failures.append(f"{path}: {e!r}")

    threads = [threading.Thread(target=client, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    swaps = 0
    rss_during = []
    for k in range(6):
        time.sleep(0.7)
        admin_load(base, swap_server.other if k % 2 == 0 else MODEL, "m", replace=True)
        rss_during.append(rss_kib(swap_server.proc.pid))
        swaps += 1
    time.sleep(0.7)
    stop.set()
    for t in threads:
        t.join()
    assert not failures, failures[:5]
    assert len(results) >= 30
    n_a = n_b = 0
    for path, text in results:
        a, b = text == expect[("m", path)], text == expect[("b", path)]
        assert a or b, f"{path}: {text!r} is neither checkpoint's answer"
        n_a += a
        n_b += b
    assert n_a > 0 and n_b > 0
    # Drained generations are freed: one model left, its KV back, memory near one model's.
    deadline = time.time() + 20
    while time.time() < deadline:
        listed = httpx.get(base + "/admin/models", headers=ADMIN).json()["data"]
        if len(listed) == 1 and listed[0]["kv_blocks_used"] == 0:
            break
        time.sleep(0.2)
    assert [(m["id"], m["state"], m["generation"]) for m in listed] == [("m", "ready", 7)]
    assert listed[0]["kv_blocks_used"] == 0 and listed[0]["requests_running"] == 0
    rss_after = rss_kib(swap_server.proc.pid)
    print(f"swap: {len(results)} answers ({n_a} first checkpoint, {n_b} second), {swaps} swaps, 0 failures; "
          f"RSS one model {rss_one >> 10} MiB, during swaps max {max(rss_during) >> 10} MiB, after {rss_after >> 10} MiB")
    assert rss_after < rss_one + 60 * 1024


def test_a_load_over_max_memory_is_refused_with_the_numbers():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    # One default model is ~98 MiB of weights + ~47 MiB of KV at -c 2048: a second does not fit.
    s = Server("--admin-key", "admin-secret", "--max-memory", "200")
    try:
        r = httpx.post(s.base + "/admin/models/load", headers=ADMIN, timeout=120, json={"path": MODEL, "alias": "two"})
        assert r.status_code == 400, r.text
        msg = r.json()["error"]["message"]
        assert "--max-memory 200 MiB" in msg and "MiB are in use" in msg
        deadline = time.time() + 20
        while time.time() < deadline:
            listed = httpx.get(s.base + "/admin/models", headers=ADMIN).json()["data"]
            if [m["id"] for m in listed] == ["SmolLM2-135M-Instruct.Q4_1"]:
                break
            time.sleep(0.2)
        assert [m["id"] for m in listed] == ["SmolLM2-135M-Instruct.Q4_1"]  # nothing changed
    finally:
        s.stop()

"""What a deployment needs: CORS, the access log, limits, a request timeout, --config, two
models from the command line, health routes, admin load without waiting."""
import glob
import json
import os
import subprocess
import time

import httpx
import pytest

from conftest import BIN, MODEL, Server, metric_value

MSG = [{"role": "user", "content": "Write a long story about a dragon."}]


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    d = tmp_path_factory.mktemp("svc")
    log = d / "access.jsonl"
    cfg = d / "ferrox.conf"
    cfg.write_text(f"# a config file\n--cors-origin https://app.example\n--access-log {log}\n"
                   "--max-prompt-tokens 200\n--max-tokens-cap 6\n--admin-key adm\n")
    s = Server("--config", str(cfg), "--alias", "first", "-m", MODEL, "--alias", "second")
    s.log = log
    # /health answers once the first model is ready; the second loads after it.
    deadline = time.time() + 60
    while time.time() < deadline and len(httpx.get(s.base + "/v1/models").json()["data"]) < 2:
        time.sleep(0.1)
    yield s
    s.stop()


def test_two_models_from_the_command_line(svc):
    ids = [m["id"] for m in httpx.get(svc.base + "/v1/models").json()["data"]]
    assert ids == ["first", "second"]
    for name in ids:
        r = httpx.post(svc.base + "/v1/chat/completions", timeout=60, json={"model": name, "messages": MSG, "temperature": 0})
        assert r.status_code == 200 and r.json()["model"] == name
    text = httpx.get(svc.base + "/metrics").text
    assert 'ferrox_requests_total{model="first"}' in text and 'ferrox_requests_total{model="second"}' in text
    assert text.count("# TYPE ferrox_requests_total ") == 1


def test_cors_preflight_and_headers(svc):
    r = httpx.options(svc.base + "/v1/chat/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert r.status_code == 204 and r.headers["access-control-allow-origin"] == "https://app.example"
    assert "POST" in r.headers["access-control-allow-methods"]
    r = httpx.get(svc.base + "/v1/models", headers={"Origin": "https://app.example"})
    assert r.headers["access-control-allow-origin"] == "https://app.example"
    r = httpx.get(svc.base + "/v1/models", headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers


def test_cors_off_by_default(server):
    r = httpx.options(server.base + "/v1/chat/completions", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST"})
    assert r.status_code == 405 and "access-control-allow-origin" not in r.headers


def test_limits_cap_and_refuse(svc):
    r = httpx.post(svc.base + "/v1/chat/completions", timeout=60, json={"model": "first", "messages": MSG, "max_tokens": 50})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 6
    r = httpx.post(svc.base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "word " * 400}]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "--max-prompt-tokens" in r.json()["error"]["message"]


def test_access_log_lines(svc):
    httpx.post(svc.base + "/v1/messages", timeout=60, json={"model": "second", "max_tokens": 3, "messages": MSG})
    httpx.get(svc.base + "/nope")
    time.sleep(0.2)
    lines = [json.loads(l) for l in svc.log.read_text().splitlines()]
    msg = [l for l in lines if l["route"] == "/v1/messages"][-1]
    assert msg["status"] == 200 and msg["model"] == "second" and msg["generated_tokens"] == 3
    assert msg["prompt_tokens"] > 5 and msg["ttft_ms"] > 0 and msg["total_ms"] >= msg["ttft_ms"]
    assert "prompt" not in msg  # never logged without --log-prompts
    assert [l for l in lines if l["route"] == "/nope"][-1]["status"] == 404


def test_health_routes_and_admin_without_wait(svc):
    assert httpx.get(svc.base + "/health").status_code == 200
    ready = httpx.get(svc.base + "/health/ready").json()
    assert ready["status"] == "ok" and ready["models"] == 2
    h = {"Authorization": "Bearer adm"}
    r = httpx.post(svc.base + "/admin/models/load", headers=h, json={"path": MODEL, "alias": "third", "wait": False})
    assert r.status_code == 202
    states = [m["state"] for m in httpx.get(svc.base + "/admin/models", headers=h).json()["data"] if m["id"] == "third"]
    assert states and states[0] in ("loading", "ready")
    deadline = time.time() + 30
    while time.time() < deadline and "third" not in [m["id"] for m in httpx.get(svc.base + "/v1/models").json()["data"]]:
        time.sleep(0.1)
    assert httpx.post(svc.base + "/v1/completions", timeout=60, json={"model": "third", "prompt": "Hi", "max_tokens": 2}).status_code == 200
    assert httpx.post(svc.base + "/admin/models/unload", headers=h, json={"alias": "third"}).status_code == 200
    r = httpx.post(svc.base + "/v1/completions", json={"model": "third", "prompt": "Hi", "max_tokens": 2})
    assert r.status_code == 404


def test_request_timeout_truncates(tmp_path):
    s = Server("--request-timeout", "0.5")
    try:
        t0 = time.time()
        r = httpx.post(s.base + "/v1/chat/completions", timeout=60,
                       json={"messages": MSG, "max_tokens": 2000, "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
        assert time.time() - t0 < 5 and 0 < r.json()["usage"]["completion_tokens"] < 2000
    finally:
        s.stop()


def test_default_model_serves_unknown_names_among_several(tmp_path):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server("--alias", "a", "-m", MODEL, "--alias", "b", "--default-model", "b")
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(httpx.get(s.base + "/v1/models").json()["data"]) < 2:
            time.sleep(0.1)
        for name, served in (("a", "a"), ("b", "b"), ("claude-sonnet-4-5", "b")):
            r = httpx.post(s.base + "/v1/chat/completions", timeout=60,
                           json={"model": name, "messages": MSG, "max_tokens": 2})
            assert r.status_code == 200 and r.json()["model"] == served, (name, r.text)
    finally:
        s.stop()


def test_default_model_must_name_a_model():
    import subprocess
    from conftest import BIN
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", "--default-model", "nope"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--default-model nope is none of the models' names" in p.stderr


def test_llama_server_command_line():
    """llama-server's flags with their meaning: --temp 0 makes requests that set no temperature
    greedy, -ctk/-ctv choose the KV type, GPU flags are noted, -hf is refused."""
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server("--temp", "0", "--seed", "42", "--top-k", "1", "-ngl", "99", "-fa", "on", "--jinja", "--metrics",
               "--offline", "-ctk", "q8_0", "-ctv", "q8_0")
    try:
        msg = [{"role": "user", "content": "Tell me a story."}]

        def answer(**extra):
            r = httpx.post(s.base + "/v1/chat/completions", timeout=60, json={"messages": msg, "max_tokens": 16, **extra})
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]
        assert answer() == answer(temperature=0, top_k=1)  # the server's defaults: greedy
        assert httpx.get(s.base + "/props").json()["kv_cache"]["type"] == "q8_0"
    finally:
        s.stop()
    import subprocess
    from conftest import BIN
    for flags, said in ((["-hf", "org/model"], "does not download"), (["-ctk", "q8_0", "-ctv", "f16"], "one type"),
                        (["--temp", "-1"], "out of range")):
        p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", *flags], capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and said in p.stderr, (flags, p.stderr)


def test_prompt_cache_survives_a_restart(tmp_path):
    # --cache-dir: a prompt computed before a restart is read back from disk, not recomputed:
    # at least 90 % of it cached, the same greedy answer, and faster than cold. A damaged block
    # file is skipped (recomputed): the answer does not change.
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    cache = str(tmp_path / "kv")
    prompt = " ".join(f"Step {i}: check the build, then the tests, then file {i * 7}." for i in range(60))
    body = {"prompt": prompt, "max_tokens": 12, "temperature": 0}

    def ask(s):
        t0 = time.time()
        r = httpx.post(s.base + "/v1/completions", timeout=120, json=body).json()
        return time.time() - t0, r["usage"], r["choices"][0]["text"]

    s = Server("--cache-dir", cache, threads=None)
    try:
        cold_s, cold, cold_text = ask(s)
    finally:
        s.stop()
    assert cold["prompt_tokens"] > 700 and cold["prompt_tokens_details"]["cached_tokens"] == 0
    files = sorted(glob.glob(cache + "/*/*.kv"))
    assert len(files) >= cold["prompt_tokens"] // 32
    s = Server("--cache-dir", cache, threads=None)
    try:
        warm_s, warm, warm_text = ask(s)
        hits = metric_value(httpx.get(s.base + "/metrics").text, "ferrox_prompt_cache_disk_hit_blocks_total")
    finally:
        s.stop()
    assert warm["prompt_tokens_details"]["cached_tokens"] >= 0.9 * warm["prompt_tokens"]
    assert warm_text == cold_text and hits >= len(files) * 0.9
    assert warm_s < cold_s
    # A flipped byte in every block file: the first block of the prompt is found damaged (and
    # removed), so nothing is read back and the prompt is recomputed; the answer is the same.
    for path in glob.glob(cache + "/*/*.kv"):
        with open(path, "r+b") as f:
            f.seek(4096)
            b = f.read(1)
            f.seek(4096)
            f.write(bytes([b[0] ^ 0x10]))
    n_before = len(glob.glob(cache + "/*/*.kv"))
    s = Server("--cache-dir", cache, threads=None)
    try:
        _, again, again_text = ask(s)
    finally:
        s.stop()
    assert again_text == cold_text
    assert again["prompt_tokens_details"]["cached_tokens"] == 0
    assert len(glob.glob(cache + "/*/*.kv")) >= n_before - 1  # the damaged first block went, rewritten


def test_cache_dir_that_cannot_be_made_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", "--cache-dir", str(blocker / "sub")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "--cache-dir" in r.stderr and len(r.stderr.strip().splitlines()) <= 3, r.stderr

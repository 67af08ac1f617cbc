"""What LLM-aware routers read from a replica (issue 47, parts 1-3): the model server protocol's
metrics (ferrox's and, with --metrics-compat vllm, vLLM's names), vLLM's /tokenize and
/detokenize forms beside llama.cpp's, the render routes, the load and info routes, readiness,
and SIGTERM's graceful drain."""
import json
import os
import re
import signal
import subprocess
import threading
import time

import httpx
import pytest

from conftest import BIN, MODEL, Server, metric_value

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colors."}]


@pytest.fixture(scope="module")
def rp():
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    # Repeated flag and a comma list: both forms of --metrics-compat.
    s = Server("--metrics-compat", "vllm", "--metrics-compat", "llamacpp,vllm")
    yield s
    assert s.stop() == 0


def series(text, name):
    """{labels: value} of every sample of `name` (labels as a dict)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if m and m.group(1) == name:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            out[tuple(sorted(labels.items()))] = float(m.group(3))
    return out


def props(s):
    return httpx.get(s.base + "/props").json()


def test_cache_config_and_usage_ratio_idle(rp):
    text = httpx.get(rp.base + "/metrics").text
    model = props(rp)["model_alias"]
    kv = props(rp)["kv_cache"]
    info = series(text, "ferrox_cache_config_info")
    assert info == {(("block_size", str(kv["block_size"])), ("model", model), ("num_blocks", str(kv["blocks"]))): 1.0}
    assert series(text, "ferrox_kv_cache_usage_ratio") == {(("model", model),): 0.0}
    vinfo = series(text, "vllm:cache_config_info")
    (labels, v), = vinfo.items()
    labels = dict(labels)
    assert v == 1 and labels["model_name"] == model and labels["block_size"] == str(kv["block_size"])
    assert labels["num_gpu_blocks"] == str(kv["blocks"])
    for family in ("ferrox_kv_cache_usage_ratio", "ferrox_cache_config_info", "vllm:kv_cache_usage_perc",
                   "vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"):
        assert text.count(f"# TYPE {family} ") == 1
    assert "llamacpp:kv_cache_usage_ratio" in text  # the llamacpp names too (comma list)


def test_usage_ratio_rises_under_load_and_falls_back(rp):
    """Four long streams hold KV blocks: the ratio rises into (0, 1], vLLM's gauges agree, and
    once they end it is 0 again (their cached blocks are evictable, so free)."""
    done = []

    def stream(i):
        body = {"messages": [{"role": "user", "content": f"Story {i}: " + "once upon a time " * 60}],
                "max_tokens": 300, "ignore_eos": True, "stream": True, "temperature": 0}
        with httpx.stream("POST", rp.base + "/v1/chat/completions", json=body, timeout=60) as r:
            for _ in r.iter_lines():
                pass
        done.append(i)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    seen, running = [], []
    deadline = time.time() + 30
    while len(done) < 4 and time.time() < deadline:
        text = httpx.get(rp.base + "/metrics").text
        seen.append(metric_value(text, "ferrox_kv_cache_usage_ratio"))
        running.append(metric_value(text, "vllm:num_requests_running"))
        assert abs(metric_value(text, "vllm:kv_cache_usage_perc") - seen[-1]) < 0.2
        time.sleep(0.02)
    for t in threads:
        t.join()
    assert all(0 <= v <= 1 for v in seen)
    assert max(seen) > 0.1, seen
    assert max(running) >= 1
    text = httpx.get(rp.base + "/metrics").text
    assert metric_value(text, "ferrox_kv_cache_usage_ratio") == 0
    assert metric_value(text, "vllm:num_requests_running") == 0
    assert metric_value(text, "vllm:generation_tokens_total") >= 1200
    assert metric_value(text, "vllm:prompt_tokens_total") == metric_value(text, "ferrox_prompt_tokens_total")
    q, h = metric_value(text, "vllm:prefix_cache_queries_total"), metric_value(text, "vllm:prefix_cache_hits_total")
    assert q > 0 and 0 <= h <= q
    assert metric_value(text, "vllm:time_to_first_token_seconds_count") >= 4


def tok_llama(s, content, **kw):
    r = httpx.post(s.base + "/tokenize", json={"content": content, **kw})
    assert r.status_code == 200 and set(r.json()) == {"tokens"}
    return r.json()["tokens"]


def test_tokenize_both_forms(rp):
    text = "Hello world, <|im_start|> and more"
    r = httpx.post(rp.base + "/tokenize", json={"model": props(rp)["model_alias"], "prompt": text,
                                                "add_special_tokens": False})
    assert r.status_code == 200
    v = r.json()
    assert set(v) == {"count", "max_model_len", "tokens", "token_strs"}
    assert v["tokens"] == tok_llama(rp, text) and v["count"] == len(v["tokens"])
    assert v["max_model_len"] == props(rp)["n_ctx"] and v["token_strs"] is None
    r = httpx.post(rp.base + "/tokenize", json={"prompt": text, "return_token_strs": True}).json()
    assert "".join(r["token_strs"]).endswith(" and more")
    # Chat: the template's rendering (/apply-template), tokenized as chat generation does.
    rendered = httpx.post(rp.base + "/apply-template", json={"messages": CHAT}).json()["prompt"]
    v = httpx.post(rp.base + "/tokenize", json={"model": "", "messages": CHAT}).json()
    assert v["tokens"] == tok_llama(rp, rendered) and v["count"] == len(v["tokens"])
    short = httpx.post(rp.base + "/tokenize", json={"messages": CHAT, "add_generation_prompt": False}).json()
    assert short["count"] < v["count"] and v["tokens"][:short["count"]] == short["tokens"]
    # llama.cpp's form is unchanged, pieces included.
    pieces = httpx.post(rp.base + "/tokenize", json={"content": "Hi there", "with_pieces": True}).json()["tokens"]
    assert "".join(p["piece"] for p in pieces) == "Hi there"


def test_detokenize_answers_both_keys(rp):
    ids = tok_llama(rp, "Hello world")
    v = httpx.post(rp.base + "/detokenize", json={"model": "", "tokens": ids}).json()
    assert v == {"content": "Hello world", "prompt": "Hello world"}


def test_render_routes(rp):
    chat = httpx.post(rp.base + "/tokenize", json={"messages": CHAT}).json()
    r = httpx.post(rp.base + "/v1/chat/completions/render", json={"model": props(rp)["model_alias"], "messages": CHAT})
    assert r.status_code == 200
    v = r.json()
    assert v["token_ids"] == chat["tokens"] == v["prompt_token_ids"] == v["tokens"]
    assert v["prompt"] == httpx.post(rp.base + "/apply-template", json={"messages": CHAT}).json()["prompt"]
    assert v["count"] == len(v["token_ids"]) and v["max_model_len"] == props(rp)["n_ctx"]
    one = httpx.post(rp.base + "/v1/completions/render", json={"prompt": "Hello world"}).json()
    assert one["token_ids"] == httpx.post(rp.base + "/tokenize", json={"prompt": "Hello world"}).json()["tokens"]
    ids = one["token_ids"]
    many = httpx.post(rp.base + "/v1/completions/render", json={"prompt": ["Hello world", ids]}).json()
    assert [m["token_ids"] for m in many] == [ids, ids] and many[1]["prompt"] == "Hello world"


def test_load_and_info_routes(rp):
    assert httpx.get(rp.base + "/get_load").json()["load"] == 0
    v = httpx.get(rp.base + "/v1/loads").json()
    assert v["dp_rank_count"] == 1 and len(v["loads"]) == 1
    load = v["loads"][0]
    assert load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 0 and 0 <= load["token_usage"] <= 1
    assert load["max_total_num_tokens"] == props(rp)["kv_cache"]["blocks"] * props(rp)["kv_cache"]["block_size"]
    for path in ("/server_info", "/get_server_info"):
        info = httpx.get(rp.base + path).json()
        assert info["dp_size"] == 1 and info["model_id"] == props(rp)["model_alias"]
        assert info["max_model_len"] == props(rp)["n_ctx"]
    r = httpx.get(rp.base + "/health/ready")
    assert r.status_code == 200 and r.json()["status"] == "ok"


@pytest.mark.parametrize("path,body,status,shape", [
    ("/tokenize", {"prompt": 5}, 400, "openai"),
    ("/tokenize", {"prompt": "x", "messages": CHAT}, 400, "openai"),
    ("/tokenize", {"messages": "hello"}, 400, "openai"),
    ("/tokenize", {"messages": [{"role": "user", "content": {"a": 1}}]}, 400, "openai"),
    ("/tokenize", {"prompt": "x", "return_token_strs": "yes"}, 400, "openai"),
    ("/tokenize", {"prompt": "x", "model": 7}, 400, "openai"),
    ("/tokenize", {"content": 5}, 400, "llamacpp"),
    ("/tokenize", {}, 400, "llamacpp"),
    ("/detokenize", {"tokens": [-1]}, 400, "llamacpp"),
    ("/detokenize", {"tokens": "abc"}, 400, "llamacpp"),
    ("/v1/completions/render", {}, 400, "openai"),
    ("/v1/completions/render", {"prompt": {}}, 400, "openai"),
    ("/v1/completions/render", {"prompt": [10 ** 12]}, 400, "openai"),
    ("/v1/completions/render", {"prompt": [[1, "a"]]}, 400, "openai"),
    ("/v1/completions/render", {"prompt": ["x"] * 2000}, 400, "openai"),
    ("/v1/completions/render", {"prompt": "x", "add_special_tokens": 1}, 400, "openai"),
    ("/v1/chat/completions/render", {"messages": 3}, 400, "openai"),
    ("/v1/chat/completions/render", {"messages": CHAT, "add_generation_prompt": "no"}, 400, "openai"),
    ("/v1/chat/completions/render", {"messages": CHAT, "model": 7}, 400, "openai"),
])
def test_hostile_bodies(rp, path, body, status, shape):
    r = httpx.post(rp.base + path, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    if shape == "openai":
        assert isinstance(err["message"], str) and "type" in err
    else:
        assert err["code"] == status


def test_hostile_raw_bodies(rp):
    for path in ("/tokenize", "/v1/completions/render", "/v1/chat/completions/render"):
        for raw in (b"{", b"[]", b"\xff\xfe", b"[" * 5000 + b"]" * 5000, b'{"prompt": "' + b"a" * 100 + b'"'):
            r = httpx.post(rp.base + path, content=raw, headers={"content-type": "application/json"})
            assert r.status_code in (400, 413), (path, raw[:20], r.status_code)
    r = httpx.post(rp.base + "/v1/chat/completions/render", json={"messages": []})
    assert r.status_code in (200, 400)
    assert httpx.get(rp.base + "/health").status_code == 200


def test_metrics_compat_refuses_unknown_names():
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--metrics-compat", "vllm,prometheus"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode != 0 and "--metrics-compat" in p.stderr
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--drain-timeout", "-1"], capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "--drain-timeout" in p.stderr


class Stream:
    """A streamed chat request on a thread: its SSE data lines once it ends."""

    def __init__(self, base, max_tokens):
        self.lines, self.first, self.error = [], threading.Event(), None
        body = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": max_tokens,
                "ignore_eos": True, "stream": True, "temperature": 0}

        def run():
            try:
                with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as r:
                    self.status = r.status_code
                    for line in r.iter_lines():
                        if line:
                            self.lines.append(line)
                            self.first.set()
            except Exception as e:  # noqa: BLE001: the test reports it
                self.error = e
            self.first.set()

        self.thread = threading.Thread(target=run)
        self.thread.start()

    def chunks(self):
        return [json.loads(l[6:]) for l in self.lines if l.startswith("data: {")]


def test_sigterm_drains_running_requests():
    s = Server("--drain-timeout", "30")
    st = Stream(s.base, 900)
    assert st.first.wait(30)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    assert st.thread.is_alive(), "the stream should still be running during the drain"
    r = httpx.get(s.base + "/health/ready")
    assert r.status_code == 503 and r.headers["retry-after"]
    assert httpx.get(s.base + "/health").status_code == 503
    r = httpx.post(s.base + "/v1/chat/completions", json={"messages": CHAT})
    assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["type"] == "server_error"
    r = httpx.post(s.base + "/v1/messages", json={"model": "m", "max_tokens": 4, "messages": CHAT})
    assert r.status_code == 503 and r.headers["retry-after"] and r.json()["type"] == "error"
    r = httpx.post(s.base + "/completion", json={"prompt": "hi"})
    assert r.status_code == 503 and r.headers["retry-after"] and r.json()["error"]["code"] == 503
    # /metrics stays up while draining: the scraper sees the running request end.
    r = httpx.get(s.base + "/metrics")
    assert r.status_code == 200 and metric_value(r.text, "ferrox_requests_running") == 1
    st.thread.join(60)
    assert st.error is None and st.status == 200
    assert st.lines[-1] == "data: [DONE]"
    finishes = [c["choices"][0]["finish_reason"] for c in st.chunks() if c["choices"]]
    assert finishes[-1] == "length"
    assert sum(1 for c in st.chunks() if c["choices"] and c["choices"][0]["delta"].get("content")) >= 850
    assert s.proc.wait(timeout=20) == 0
    assert time.time() - t0 < 30


def raw_stream(base, path, body, out):
    with httpx.stream("POST", base + path, json=body, timeout=30) as r:
        out[path] = [l for l in r.iter_lines() if l]


def test_drain_timeout_ends_a_long_request():
    s = Server("--drain-timeout", "1")
    st = Stream(s.base, 1900)
    assert st.first.wait(30)
    # Anthropic's and llama.cpp's streams cut off too, each with its protocol's last event.
    others = {}
    threads = [threading.Thread(target=raw_stream, args=(s.base, path, body, others)) for path, body in (
        ("/v1/messages", {"model": "m", "max_tokens": 1900, "stream": True, "ignore_eos": True,
                          "messages": [{"role": "user", "content": "Tell a long story."}]}),
        ("/completion", {"prompt": "Tell a long story.", "n_predict": 1900, "stream": True, "ignore_eos": True}))]
    for t in threads:
        t.start()
    time.sleep(0.3)
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=15) == 0
    assert time.time() - t0 < 8
    st.thread.join(15)
    # The cut-off stream gets a proper end: the terminator, not a broken connection.
    assert st.error is None and st.lines[-1] == "data: [DONE]"
    n = sum(1 for c in st.chunks() if c["choices"] and c["choices"][0]["delta"].get("content"))
    assert 0 < n < 1900
    for t in threads:
        t.join(15)
    assert others["/v1/messages"][-1] == 'data: {"type":"message_stop"}'
    last = json.loads(others["/completion"][-1][6:])
    assert last["stop"] is True and 0 < last["tokens_predicted"] < 1900


def test_idle_sigterm_exits_at_once():
    s = Server("--drain-timeout", "30")
    t0 = time.time()
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=10) == 0
    assert time.time() - t0 < 3

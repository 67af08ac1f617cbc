"""What llama.cpp's own server tests (bench/llamacpp_suite/run.sh) found missing in ferrox's
llama-server drop-in, each with its hostile inputs: the flags its harness passes
(--kv-unified, --swa-full, --spec-type, --spec-draft-n-max/-min, --verbose, --no-ui,
--backend_sampling, --no-context-shift, -cb, --metrics, --slot-save-path), /metrics' header and
llamacpp:* names under --metrics, an idle slot's budget, and POST /slots/{id}?action=save|
restore|erase."""
import os
import struct
import subprocess

import httpx
import pytest

from conftest import BIN, MODEL, Server, free_port

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="the default model is missing: run `make model`")

# About 90 tokens: two whole KV blocks (32 tokens each) and more, so the prefix cache keeps some.
LONG = ("The quick brown fox jumps over the lazy dog. Then the dog woke up and chased the fox across "
        "the field, over the river, through the village and into the dark forest, where an old owl "
        "watched them both from a high branch and wondered why anyone would run so fast on such a "
        "warm and quiet afternoon in the middle of the summer")


def serve_fails(*flags):
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", str(free_port()), *flags],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stderr
    return p.stderr


def completion(s, prompt, **kw):
    r = httpx.post(s.base + "/completion", json={"prompt": prompt, "n_predict": 4, "temperature": 0, **kw},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def slot_action(s, i, action, body=None, **kw):
    return httpx.post(f"{s.base}/slots/{i}?action={action}", json=body, timeout=120, **kw)


# --- command line -------------------------------------------------------------------------

def test_llama_server_harness_command_line_starts():
    """The command line llama.cpp's test harness builds for its tinyllama2 preset (the hub
    flags aside), with the flags ferrox refused before."""
    s = Server("--temp", "0.8", "--seed", "42", "--offline", "--batch-size", "32", "--no-slots", "--alias",
               "tinyllama-2", "--ctx-size", "512", "--parallel", "2", "--n-predict", "64", "--no-jinja",
               "--kv-unified", "--swa-full", "--no-context-shift", "-cb", "--backend_sampling", "--no-ui",
               "--spec-type", "ngram-simple", "--spec-draft-n-max", "4", "--spec-draft-n-min", "1", "--verbose",
               "--metrics")
    try:
        out = completion(s, "Hello")
        assert out["timings"]["predicted_n"] >= 1
        assert httpx.get(s.base + "/", timeout=10).status_code == 404  # --no-ui
    finally:
        s.stop()


def test_spec_type_draft_simple_uses_the_draft_model():
    s = Server("-md", MODEL, "--spec-type", "draft-simple", "--spec-draft-n-max", "4")
    try:
        props = httpx.get(s.base + "/props", timeout=10).json()
        assert props["speculative"]["draft_model"] == MODEL
        plain = completion(s, LONG, n_predict=12)
        assert plain["content"]
    finally:
        s.stop()


def test_spec_type_none_still_answers_the_same():
    a = Server("--spec-type", "none")
    b = Server()
    try:
        assert completion(a, LONG, n_predict=12)["content"] == completion(b, LONG, n_predict=12)["content"]
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("flags, says", [
    (["--context-shift"], "does not shift the context"),
    (["--spec-type", "draft-simple"], "needs a draft model"),
    (["--spec-type", "eagle3"], "'eagle3' is none of"),
    (["--spec-type", ""], "--spec-type"),
    (["--spec-type", "none", "-md", MODEL], "contradict"),
    (["--spec-draft-n-max", "65"], "must be in [0, 64]"),
    (["--spec-draft-n-max", "-1"], "must be in [0, 64]"),
    (["--spec-draft-n-max", "lots"], "not an integer"),
    (["--spec-draft-n-min", "-3"], "--spec-draft-n-min must be >= 0"),
    (["--slot-save-path", ""], "--slot-save-path needs a directory"),
    (["--slot-save-path", "/dev/null/slots"], "not a directory that can be created"),
])
def test_refused_llama_server_flags(flags, says):
    assert says in serve_fails(*flags)


def test_no_kv_unified_is_noted():
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--port", str(free_port()), "-t", "1", "--no-kv-unified"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        assert "--no-kv-unified" in line and "shared" in line, line
    finally:
        p.terminate()
        p.wait(timeout=15)


# --- /metrics and /slots ------------------------------------------------------------------

def test_metrics_flag_gives_llamacpp_names_and_start_time():
    s = Server("--metrics")
    try:
        completion(s, "Hello")
        r = httpx.get(s.base + "/metrics", timeout=10)
        assert r.status_code == 200
        assert "llamacpp:tokens_predicted_total" in r.text and "ferrox_" in r.text
        start = int(r.headers["Process-Start-Time-Unix"])
        assert 1_600_000_000 < start <= int(httpx.get(s.base + "/metrics", timeout=10).headers["Process-Start-Time-Unix"])
    finally:
        s.stop()


def test_idle_slot_shows_no_budget(server):
    completion(server, "Hello", n_predict=6)
    for slot in httpx.get(server.base + "/slots", timeout=10).json():
        assert slot["is_processing"] is False
        if "next_token" in slot:
            assert slot["next_token"][0]["n_remain"] == -1
            assert slot["next_token"][0]["n_decoded"] == 0


# --- POST /slots/{id}?action=save|restore|erase --------------------------------------------

@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("slots"))


@pytest.fixture(scope="module")
def slot_srv(slot_dir):
    s = Server("-np", "1", "--slot-save-path", slot_dir)
    yield s
    s.stop()


def test_slot_save_writes_the_slots_tokens(slot_srv, slot_dir):
    out = completion(slot_srv, LONG, n_predict=5)
    n_prompt = out["tokens_evaluated"]
    r = slot_action(slot_srv, 0, "save", {"filename": "long.bin"})
    assert r.status_code == 200, r.text
    body = r.json()
    # the prompt and the generated tokens but the last (sampled, never computed), as llama-server
    assert body["id_slot"] == 0 and body["filename"] == "long.bin"
    assert body["n_saved"] == n_prompt + out["tokens_predicted"] - 1
    assert body["timings"]["save_ms"] >= 0
    data = open(os.path.join(slot_dir, "long.bin"), "rb").read()
    assert body["n_written"] == len(data) == 16 + 4 * body["n_saved"]
    assert data[:8] == b"FXSLOT01"
    n_vocab, n = struct.unpack_from("<II", data, 8)
    assert n == body["n_saved"] and n_vocab > 1000
    toks = httpx.post(slot_srv.base + "/tokenize", json={"content": LONG}, timeout=10).json()["tokens"]
    assert list(struct.unpack_from(f"<{len(toks)}i", data, 16)) == toks


def test_slot_restore_after_a_restart_reuses_the_prefix(slot_dir):
    """The saved tokens come back in a new process: the next request with that beginning
    computes only what is past the restored whole blocks."""
    s = Server("-np", "1", "--slot-save-path", slot_dir)
    try:
        r = slot_action(s, 0, "restore", {"filename": "long.bin"})
        assert r.status_code == 200, r.text
        body = r.json()
        n = body["n_restored"]
        assert n > 64 and body["n_read"] == 16 + 4 * n and body["filename"] == "long.bin"
        out = completion(s, LONG)
        assert out["timings"]["cache_n"] >= 64  # whole 32-token blocks of the restored prompt
        assert out["timings"]["cache_n"] + out["timings"]["prompt_n"] == out["tokens_evaluated"]
        slot = httpx.get(s.base + "/slots", timeout=10).json()[0]
        assert slot["is_processing"] is False
    finally:
        s.stop()


def test_slot_erase_forgets_the_tokens(slot_srv):
    completion(slot_srv, "Hello there", n_predict=3)
    r = slot_action(slot_srv, 0, "erase")
    assert r.status_code == 200, r.text
    assert r.json()["id_slot"] == 0 and r.json()["n_erased"] > 0
    r = slot_action(slot_srv, 0, "save", {"filename": "empty.bin"})
    assert r.status_code == 200 and r.json()["n_saved"] == 0
    r = slot_action(slot_srv, 0, "restore", {"filename": "empty.bin"})
    assert r.status_code == 200 and r.json()["n_restored"] == 0


def test_slot_actions_need_slot_save_path(server):
    r = slot_action(server, 0, "save", {"filename": "x.bin"})
    assert r.status_code == 501
    assert r.json()["error"]["type"] == "not_supported_error"
    assert "--slot-save-path" in r.json()["error"]["message"]


@pytest.mark.parametrize("path, body, status, says", [
    ("/slots/0?action=save", {}, 400, "filename"),
    ("/slots/0?action=save", {"filename": 5}, 400, "filename"),
    ("/slots/0?action=save", {"filename": None}, 400, "filename"),
    ("/slots/0?action=save", [1, 2], 400, "JSON object"),
    ("/slots/0?action=save", {"filename": "../escape.bin"}, 400, "Invalid filename"),
    ("/slots/0?action=save", {"filename": "a/b.bin"}, 400, "Invalid filename"),
    ("/slots/0?action=save", {"filename": ".hidden"}, 400, "Invalid filename"),
    ("/slots/0?action=save", {"filename": "x" * 300}, 400, "Invalid filename"),
    ("/slots/0?action=save", {"filename": "a\nb"}, 400, "Invalid filename"),
    ("/slots/0?action=save", {"filename": ""}, 400, "Invalid filename"),
    ("/slots/1?action=save", {"filename": "x.bin"}, 400, "Invalid slot ID"),  # -np 1
    ("/slots/-1?action=save", {"filename": "x.bin"}, 400, "Invalid slot ID"),
    ("/slots/abc?action=erase", None, 400, "Invalid slot ID"),
    ("/slots/99999999999999999999?action=erase", None, 400, "Invalid slot ID"),
    ("/slots/0", None, 400, "Invalid action"),
    ("/slots/0?action=delete", None, 400, "Invalid action"),
    ("/slots/0?action=restore", {"filename": "missing.bin"}, 400, "Unable to restore slot"),
])
def test_slot_action_hostile_inputs(slot_srv, path, body, status, says):
    r = httpx.post(slot_srv.base + path, json=body, timeout=30)
    assert r.status_code == status, r.text
    assert says in r.json()["error"]["message"]


def test_slot_action_body_not_json(slot_srv):
    r = httpx.post(slot_srv.base + "/slots/0?action=save", content=b"{not json", timeout=30)
    assert r.status_code == 400


@pytest.mark.parametrize("data, says", [
    (b"", "not a ferrox slot file"),
    (b"GGUF" + b"\0" * 60, "not a ferrox slot file"),
    (b"FXSLOT01" + struct.pack("<II", 7, 1) + struct.pack("<i", 1), "model of 7 tokens"),
    (None, "cut short"),          # a header that promises more tokens than follow
    ("oov", "outside the vocabulary"),
    ("big", "do not fit the context"),
])
def test_slot_restore_refuses_broken_files(slot_srv, slot_dir, data, says):
    n_vocab = struct.unpack_from("<I", open(os.path.join(slot_dir, "long.bin"), "rb").read(), 8)[0]
    if data is None:
        data = b"FXSLOT01" + struct.pack("<II", n_vocab, 10) + struct.pack("<3i", 1, 2, 3)
    elif data == "oov":
        data = b"FXSLOT01" + struct.pack("<II", n_vocab, 2) + struct.pack("<2I", 1, n_vocab)
    elif data == "big":
        data = b"FXSLOT01" + struct.pack("<II", n_vocab, 100_000) + b"\1\0\0\0" * 100_000
    with open(os.path.join(slot_dir, "broken.bin"), "wb") as f:
        f.write(data)
    r = slot_action(slot_srv, 0, "restore", {"filename": "broken.bin"})
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]
    assert httpx.get(slot_srv.base + "/health", timeout=10).status_code == 200


def test_slot_restore_of_a_slot_file_from_a_directory_is_refused(slot_srv, slot_dir):
    os.makedirs(os.path.join(slot_dir, "adir.bin"), exist_ok=True)
    r = slot_action(slot_srv, 0, "restore", {"filename": "adir.bin"})
    assert r.status_code == 400


# --- /props -------------------------------------------------------------------------------

def test_props_report_the_servers_sampling_defaults():
    s = Server("--temp", "0.3", "--seed", "42", "--top-k", "7", "--repeat-penalty", "1.1")
    try:
        params = httpx.get(s.base + "/props", timeout=10).json()["default_generation_settings"]["params"]
        assert params["temperature"] == 0.3 and params["seed"] == 42 and params["top_k"] == 7
        assert params["repeat_penalty"] == 1.1
    finally:
        s.stop()


def test_props_seed_is_minus_one_without_seed(server):
    params = httpx.get(server.base + "/props", timeout=10).json()["default_generation_settings"]["params"]
    assert params["seed"] == -1 and params["temperature"] == 0.8


# --- Vertex AI's prediction protocol (AIP_MODE=PREDICTION) --------------------------------

class AipServer:
    """ferrox serve as a Vertex AI custom container starts it: the port from AIP_HTTP_PORT."""

    def __init__(self, *extra, **env):
        import time
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        e = {**os.environ, "AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(self.port), **env}
        self.proc = subprocess.Popen([BIN, "serve", "-m", MODEL, "-t", "1", "-c", "1024", "--port", "1", *extra],
                                     env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc.poll() is None, self.proc.stdout.read()
            try:
                if httpx.get(self.base + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError("not ready")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def aip():
    s = AipServer("--api-key", "k1", AIP_HEALTH_ROUTE="/healthz")
    yield s
    s.stop()


def predict(s, body, key="k1"):
    return httpx.post(s.base + "/predict", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=120)


def test_predict_runs_each_instance_through_its_route(aip):
    r = predict(aip, {"instances": [
        {"@requestFormat": "chatCompletions", "max_tokens": 4, "temperature": 0,
         "messages": [{"role": "user", "content": "Say hello"}]},
        {"@requestFormat": "/v1/completions", "prompt": PARIS_PROMPT, "max_tokens": 2, "temperature": 0,
         "stream": True},
        {"@requestFormat": "tokenize", "content": "Hello world"},
        {"@requestFormat": "embeddings", "input": "x"},
    ]})
    assert r.status_code == 200, r.text
    p = r.json()["predictions"]
    assert len(p) == 4
    assert p[0]["choices"][0]["message"]["role"] == "assistant" and p[0]["choices"][0]["message"]["content"]
    assert p[1]["object"] == "text_completion" and p[1]["choices"][0]["text"]  # streamed: sent whole
    assert p[2]["tokens"] == httpx.post(aip.base + "/tokenize", json={"content": "Hello world"},
                                        headers={"Authorization": "Bearer k1"}, timeout=10).json()["tokens"]
    assert "error" in p[3]  # a route's error is that instance's prediction


PARIS_PROMPT = "The capital of France is"


def test_predict_needs_the_api_key(aip):
    assert predict(aip, {"instances": []}, key="wrong").status_code == 401


def test_predict_health_route(aip):
    assert httpx.get(aip.base + "/healthz", timeout=10).status_code == 200


@pytest.mark.parametrize("body, says", [
    ({}, "array field named instances"),
    ({"instances": {"a": 1}}, "array field named instances"),
    ({"instances": [{"@requestFormat": "tokenize", "content": "a"}] * 129}, "maximum size of 128"),
])
def test_predict_hostile_bodies(aip, body, says):
    r = predict(aip, body)
    assert r.status_code == 400 and says in r.json()["error"]["message"]


@pytest.mark.parametrize("instance, says", [
    (5, "must be a JSON object"),
    ({"content": "a"}, "string @requestFormat"),
    ({"@requestFormat": 3}, "string @requestFormat"),
    ({"@requestFormat": "predict"}, "no handler"),  # itself: not a route it dispatches to
    ({"@requestFormat": "noSuchRoute"}, "no handler"),
    ({"@requestFormat": "/v1/models/{id}"}, "no handler"),
])
def test_predict_hostile_instances(aip, instance, says):
    r = predict(aip, {"instances": [instance, {"@requestFormat": "tokenize", "content": "a"}]})
    assert r.status_code == 200
    p = r.json()["predictions"]
    assert says in p[0]["error"]["message"] and "tokens" in p[1]


def test_predict_is_off_without_aip_mode(server):
    assert httpx.post(server.base + "/predict", json={"instances": []}, timeout=10).status_code == 404


@pytest.mark.parametrize("env, says", [
    ({"AIP_HTTP_PORT": "80000"}, "AIP_HTTP_PORT"),
    ({"AIP_HTTP_PORT": "x"}, "AIP_HTTP_PORT"),
    ({"AIP_PREDICT_ROUTE": "predict"}, "must start with /"),
    ({"AIP_PREDICT_ROUTE": "/completion"}, "one of the server's own routes"),
])
def test_bad_aip_variables_are_refused(env, says):
    p = subprocess.run([BIN, "serve", "-m", MODEL, "--port", str(free_port())], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "AIP_MODE": "PREDICTION", **env})
    assert p.returncode != 0 and says in p.stderr


# --- --host with several addresses ---------------------------------------------------------

def ipv6_loopback():
    import socket
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not ipv6_loopback(), reason="no IPv6 loopback")
def test_host_list_listens_on_each_address():
    port = free_port()
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "-t", "1", "--host", "127.0.0.1, [::1]", "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        import time
        for base in [f"http://127.0.0.1:{port}", f"http://[::1]:{port}"]:
            deadline = time.time() + 60
            while True:
                assert p.poll() is None, p.stdout.read()
                try:
                    if httpx.get(base + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    assert time.time() < deadline
                time.sleep(0.1)
            r = httpx.post(base + "/completion", json={"prompt": "Hi", "n_predict": 2}, timeout=60)
            assert r.status_code == 200
    finally:
        p.terminate()
        p.wait(timeout=15)


@pytest.mark.parametrize("host, says", [
    ("127.0.0.1,", "an empty address"),
    (",127.0.0.1", "an empty address"),
    ("127.0.0.1,127.0.0.1", "bind"),
    ("127.0.0.1,no.such.host.invalid", "cannot resolve"),
])
def test_host_list_hostile(host, says):
    assert says in serve_fails("--host", host)


# --- id_slot (issue 46) ----------------------------------------------------------------------

def slot_params(s, i):
    return httpx.get(s.base + "/slots", timeout=10).json()[i].get("params", {})


@pytest.mark.parametrize("route,body", [
    ("/completion", {"prompt": "Hello", "n_predict": 3}),
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 3}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}),
])
def test_id_slot_puts_the_request_on_that_slot(server, route, body):
    seed = 4600 + len(route)
    for want in (2, 3):
        r = httpx.post(server.base + route, json={**body, "id_slot": want, "seed": seed + want, "temperature": 0},
                       timeout=120)
        assert r.status_code == 200, r.text
        assert slot_params(server, want)["seed"] == seed + want
        if route == "/completion":
            assert r.json()["id_slot"] == want


def test_id_slot_wraps_around_as_llama_server(server):
    """llama-server takes id_slot modulo its slots (-np 4 here): 6 is slot 2."""
    out = completion(server, "Hello", id_slot=6, seed=4661)
    assert out["id_slot"] == 2
    assert slot_params(server, 2)["seed"] == 4661


def test_id_slot_busy_waits_for_its_slot(server):
    """A request for a busy slot is answered (llama-server defers it; it never fails); the slot
    keeps showing the request that holds it."""
    with httpx.stream("POST", server.base + "/completion", timeout=120,
                      json={"prompt": LONG, "n_predict": 48, "stream": True, "id_slot": 1, "seed": 4671,
                            "ignore_eos": True}) as r:
        lines = r.iter_lines()
        next(l for l in lines if l.startswith("data: "))
        slot = httpx.get(server.base + "/slots", timeout=10).json()[1]
        assert slot["is_processing"] is True and slot["params"]["seed"] == 4671
        second = completion(server, "Hello", id_slot=1, seed=4672, n_predict=2)
        assert second["id_slot"] == 1 and second["content"] is not None
        for _ in lines:
            pass
    assert httpx.get(server.base + "/slots", timeout=10).json()[1]["is_processing"] is False


@pytest.mark.parametrize("route,value,says", [
    ("/completion", "1", "id_slot"),
    ("/completion", -2, "id_slot"),
    ("/completion", 1.5, "id_slot"),
    ("/completion", 1 << 40, "id_slot"),
    ("/v1/chat/completions", [1], "id_slot"),
    ("/v1/completions", True, "id_slot"),
])
def test_id_slot_hostile(server, route, value, says):
    body = {"id_slot": value, "max_tokens": 2}
    body.update({"prompt": "Hi"} if "chat" not in route else {"messages": [{"role": "user", "content": "Hi"}]})
    r = httpx.post(server.base + route, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert says in r.text


def test_id_slot_minus_one_is_any_slot(server):
    assert completion(server, "Hello", id_slot=-1)["content"] is not None


# --- prompt_logprobs on chat (vLLM) ----------------------------------------------------------

CHAT = [{"role": "user", "content": "Say hello"}]


def test_chat_prompt_logprobs_as_vllm(server):
    r = httpx.post(server.base + "/v1/chat/completions", timeout=120,
                   json={"messages": CHAT, "max_tokens": 2, "prompt_logprobs": 2, "temperature": 0})
    assert r.status_code == 200, r.text
    out = r.json()
    plp = out["prompt_logprobs"]
    assert len(plp) == out["usage"]["prompt_tokens"]
    assert plp[0] is None
    for entry in plp[1:]:
        assert 1 <= len(entry) <= 3
        for tid, v in entry.items():
            assert int(tid) >= 0
            assert v["logprob"] <= 0 and v["rank"] >= 1 and isinstance(v["decoded_token"], str)
        ranks = sorted(v["rank"] for v in entry.values())
        assert ranks[0] == 1 or len(entry) == 3  # the alternatives are ranks 1 and 2
    # Not asked, not there.
    assert "prompt_logprobs" not in httpx.post(server.base + "/v1/chat/completions", timeout=120,
                                               json={"messages": CHAT, "max_tokens": 2}).json()


def test_chat_prompt_logprobs_zero_gives_the_token_alone(server):
    out = httpx.post(server.base + "/v1/chat/completions", timeout=120,
                     json={"messages": CHAT, "max_tokens": 1, "prompt_logprobs": 0}).json()
    assert out["prompt_logprobs"][0] is None
    assert all(len(e) == 1 for e in out["prompt_logprobs"][1:])


@pytest.mark.parametrize("value,extra,says", [
    (-1, {}, "prompt_logprobs"),
    (21, {}, "prompt_logprobs"),
    ("2", {}, "prompt_logprobs"),
    (2.5, {}, "prompt_logprobs"),
    (2, {"stream": True}, "stream"),
])
def test_chat_prompt_logprobs_hostile(server, value, extra, says):
    r = httpx.post(server.base + "/v1/chat/completions", timeout=60,
                   json={"messages": CHAT, "max_tokens": 2, "prompt_logprobs": value, **extra})
    assert r.status_code == 400, r.text
    assert says in r.text


# --- a server default max tokens (-n) beyond the context ---------------------------------------

@pytest.fixture(scope="module")
def small_ctx():
    s = Server("-c", "256", "-n", "1000")
    yield s
    s.stop()


@pytest.mark.parametrize("route,body", [
    ("/completion", {"prompt": "Hello"}),
    ("/v1/completions", {"prompt": "Hello"}),
    ("/v1/chat/completions", {"messages": CHAT}),
])
def test_default_n_predict_is_capped_to_the_context(small_ctx, route, body):
    r = httpx.post(small_ctx.base + route, json={**body, "temperature": 0, "ignore_eos": True}, timeout=300)
    assert r.status_code == 200, r.text
    out = r.json()
    if route == "/completion":
        assert out["tokens_evaluated"] + out["tokens_predicted"] <= 256
    else:
        u = out["usage"]
        assert u["prompt_tokens"] + u["completion_tokens"] <= 256


@pytest.mark.parametrize("route,body", [
    ("/completion", {"prompt": "Hello", "n_predict": 1000}),
    ("/v1/completions", {"prompt": "Hello", "max_tokens": 1000}),
    ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 1000}),
    ("/v1/chat/completions", {"messages": CHAT, "max_completion_tokens": 1000}),
])
def test_explicit_max_tokens_beyond_the_context_stays_a_400(small_ctx, route, body):
    r = httpx.post(small_ctx.base + route, json=body, timeout=60)
    assert r.status_code == 400, r.text
    assert "context" in r.text


def test_default_n_predict_with_a_prompt_that_fills_the_context_is_a_400(small_ctx):
    r = httpx.post(small_ctx.base + "/completion", json={"prompt": LONG * 4}, timeout=60)
    assert r.status_code == 400, r.text


# --- timings' draft counts --------------------------------------------------------------------

@pytest.fixture(scope="module")
def ngram_srv():
    s = Server("--spec-type", "ngram-simple")
    yield s
    s.stop()


def draft_counts_consistent(t):
    """Both keys or neither (llama-server writes them only when speculation ran), ints, and no
    more accepted than drafted."""
    assert ("draft_n" in t) == ("draft_n_accepted" in t), t
    if "draft_n" in t:
        assert isinstance(t["draft_n"], int) and isinstance(t["draft_n_accepted"], int)
        assert 0 <= t["draft_n_accepted"] <= t["draft_n"] and t["draft_n"] > 0
    return "draft_n" in t


def streamed_timings(s, body):
    import json as _json
    last = None
    with httpx.stream("POST", s.base + "/completion", timeout=120, json={**body, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                last = line
    return _json.loads(last[6:])["timings"]


# Speculation is priced per step (a draft runs only where it pays on this machine's measured
# step cost), so a loaded machine may skip it on one try; a repetitive prompt drafts on one of three.
@pytest.mark.parametrize("stream", [False, True])
def test_timings_carry_draft_counts_when_speculation_ran(ngram_srv, stream):
    body = {"prompt": LONG + " " + LONG, "n_predict": 32, "temperature": 0}
    ran = False
    for _ in range(3):
        t = streamed_timings(ngram_srv, body) if stream else completion(ngram_srv, **body)["timings"]
        if draft_counts_consistent(t):
            ran = True
            break
    assert ran


def test_batch_timings_count_each_prompt(ngram_srv):
    # Two sequences price drafts higher than one (they may not draft at all): each answer's
    # counts are its own and consistent; a list of one prompt drafts as a single prompt does.
    r = httpx.post(ngram_srv.base + "/completion", timeout=120,
                   json={"prompt": [LONG + " " + LONG, "Hi"], "n_predict": 24, "temperature": 0})
    assert r.status_code == 200, r.text
    for answer in r.json():
        draft_counts_consistent(answer["timings"])
    for _ in range(3):
        r = httpx.post(ngram_srv.base + "/completion", timeout=120,
                       json={"prompt": [LONG + " " + LONG], "n_predict": 24, "temperature": 0})
        assert r.status_code == 200, r.text
        if draft_counts_consistent(r.json()[0]["timings"]):
            return
    pytest.fail("no draft in three tries")


def test_no_draft_counts_without_speculation():
    s = Server("--spec-type", "none")
    try:
        t = completion(s, LONG + " " + LONG, n_predict=16)["timings"]
        assert not draft_counts_consistent(t)
    finally:
        s.stop()


def test_no_draft_counts_when_nothing_is_generated(ngram_srv):
    t = completion(ngram_srv, LONG, n_predict=0)["timings"]
    assert "draft_n" not in t


# --- /completion's generation_settings as llama-server's ------------------------------------

LLAMA_SERVER_SETTINGS = {
    "seed", "temperature", "dynatemp_range", "dynatemp_exponent", "top_k", "top_p", "min_p", "top_n_sigma",
    "xtc_probability", "xtc_threshold", "typical_p", "repeat_last_n", "repeat_penalty", "presence_penalty",
    "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n",
    "dry_sequence_breakers", "mirostat", "mirostat_tau", "mirostat_eta", "stop", "max_tokens", "n_predict",
    "n_keep", "n_discard", "ignore_eos", "stream", "logit_bias", "n_probs", "min_keep", "chat_format",
    "reasoning_format", "reasoning_in_content", "generation_prompt", "samplers", "timings_per_token",
    "post_sampling_probs", "backend_sampling", "lora",
}


def test_generation_settings_have_llama_servers_keys(server):
    g = completion(server, "Hello", n_predict=3, logit_bias=[[15, -2.5], [16, False]], seed=7)["generation_settings"]
    assert LLAMA_SERVER_SETTINGS <= set(g), LLAMA_SERVER_SETTINGS - set(g)
    assert g["max_tokens"] == g["n_predict"] == 3 and g["stream"] is False and g["seed"] == 7
    assert {"bias": -2.5, "token": 15} in g["logit_bias"]
    assert {"bias": None, "token": 16} in g["logit_bias"]  # banned: -inf, written null
    assert g["lora"] == [] and g["n_keep"] == 0


def test_streamed_generation_settings_say_stream(server):
    last = None
    with httpx.stream("POST", server.base + "/completion", timeout=120,
                      json={"prompt": "Hello", "n_predict": 2, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                last = line
    import json as _json
    assert _json.loads(last[6:])["generation_settings"]["stream"] is True

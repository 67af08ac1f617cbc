"""llama-server's command line and native routes on `ferrox serve` (issue 46): --chat-template
with llama.cpp's built-in names, --reasoning / --reasoning-budget, --embedding, --pooling,
--slots / --no-slots, -ub, --no-jinja, --metrics-compat llamacpp; GET /slots, POST /infill,
string keys in logit_bias, post_sampling_probs; each with its hostile inputs."""
import json
import os
import struct
import subprocess
import threading

import httpx
import pytest

from conftest import BIN, MODEL, ROOT, Server, free_port

EMBED = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
GREEDY = {"temperature": 0, "n_predict": 1}
PARIS = "The capital of France is"

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="the default model is missing: run `make model`")


def serve_fails(*flags, model=MODEL):
    """Runs `ferrox serve` that must refuse its command line; returns its stderr."""
    p = subprocess.run([BIN, "serve", "-m", model, "--port", str(free_port()), *flags],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0, p.stderr
    return p.stderr


@pytest.fixture(scope="module")
def srv():
    s = Server("-np", "2")
    yield s
    s.stop()


def post(s, path, body, **kw):
    return httpx.post(s.base + path, json=body, timeout=60, **kw)


# --- command line -------------------------------------------------------------------------

def test_help_groups_flags_and_lists_templates():
    out = subprocess.run([BIN, "serve", "-h"], capture_output=True, text=True, timeout=30).stdout
    for heading in ["server:", "model:", "cache:", "sampling", "chat templates and reasoning:",
                    "llama-server compatibility:"]:
        assert "\n" + heading in out, heading
    for flag in ["--chat-template", "--reasoning-budget", "--embedding", "--pooling", "--no-slots", "-ub",
                 "--metrics-compat", "--no-jinja"]:
        assert flag in out, flag
    assert "chatml, llama2" in out and "llama3" in out


@pytest.mark.parametrize("flags, says", [
    (["--no-such-flag"], "unknown argument '--no-such-flag'"),
    (["--chat-template", "not-a-template"], "neither a built-in template"),
    (["--chat-template", "{% for m in messages %}"], "not a valid Jinja template"),
    (["--chat-template", "chatml", "--chat-template-file", "/nonexistent"], "not both"),
    (["--chat-template-file", "/nonexistent/template.jinja"], "/nonexistent/template.jinja"),
    (["--reasoning", "maybe"], "--reasoning must be on, off or auto"),
    (["--reasoning-budget", "100"], "does not cut thinking"),
    (["--reasoning-budget", "-2"], "--reasoning-budget must be"),
    (["--reasoning-budget", "x"], "not an integer"),
    (["--reasoning-budget", "99999999999999"], "not an integer"),
    (["--reasoning", "on", "--reasoning-budget", "0"], "contradict"),
    (["--pooling", "rank"], "pooled embeddings only"),
    (["--pooling", "none"], "pooled embeddings only"),
    (["--pooling", "sum"], "--pooling must be"),
    (["-ub", "1"], "-ub must be >= 2"),
    (["-ub", "lots"], "not an integer"),
    (["--slots", "--no-slots"], "contradict"),
    (["--metrics-compat", "prometheus"], "--metrics-compat takes llamacpp"),
    (["--embedding"], "is not an embedding model"),
    (["-hf", "org/repo"], "does not download"),
])
def test_refused_command_lines(flags, says):
    assert says in serve_fails(*flags)


def test_no_jinja_and_ubatch_are_accepted_with_a_note():
    s = Server("--no-jinja", "-ub", "64", "-np", "1")
    try:
        r = post(s, "/completion", {"prompt": PARIS, **GREEDY})
        assert r.status_code == 200 and r.json()["content"] == " Paris"
    finally:
        s.stop()
    assert "--no-jinja" in s.proc.stdout.read()


# --- --chat-template NAME, --reasoning ------------------------------------------------------

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]


@pytest.mark.parametrize("name, want", [
    ("llama3", "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user"
               "<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("gemma", "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\n"),
    ("mistral-v7", "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] Hi[/INST]"),
    ("vicuna", "Be brief.\n\nUSER: Hi\nASSISTANT:"),
])
def test_builtin_template_name_renders_the_prompt(name, want):
    s = Server("--chat-template", name, "-np", "1")
    try:
        r = post(s, "/apply-template", {"messages": MESSAGES})
        assert r.status_code == 200, r.text
        assert r.json()["prompt"] == want
        assert httpx.get(s.base + "/props").json()["chat_template"].startswith("{%")
        # The chat route renders with it too (the answer is whatever the model makes of it).
        r = post(s, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text
    finally:
        s.stop()


THINK_TEMPLATE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                  "thinking={{ enable_thinking if enable_thinking is defined else 'unset' }}")


@pytest.mark.parametrize("flags, want", [
    ([], "thinking=unset"),
    (["--reasoning", "auto"], "thinking=unset"),
    (["--reasoning", "on"], "thinking=True"),
    (["--reasoning", "off"], "thinking=False"),
    (["--reasoning-budget", "0"], "thinking=False"),
    (["--reasoning-budget", "-1"], "thinking=unset"),
])
def test_reasoning_flags_set_enable_thinking(flags, want):
    s = Server("--chat-template", THINK_TEMPLATE, "-np", "1", *flags)
    try:
        r = post(s, "/apply-template", {"messages": MESSAGES})
        assert r.status_code == 200, r.text
        assert r.json()["prompt"].endswith(want), r.json()["prompt"]
        # A request's own chat_template_kwargs win over the server's default.
        r = post(s, "/apply-template", {"messages": MESSAGES, "chat_template_kwargs": {"enable_thinking": True}})
        assert r.json()["prompt"].endswith("thinking=True")
    finally:
        s.stop()


# --- --embedding, --pooling ---------------------------------------------------------------

@pytest.fixture(scope="module")
def embed_only():
    if not os.path.exists(EMBED):
        pytest.skip("models/all-MiniLM-L6-v2 is missing")
    s = EmbedServer("--embedding")
    yield s
    s.stop()


class EmbedServer(Server):
    """The embedding model alone (conftest's Server always serves the chat model)."""

    def __init__(self, *extra):
        import conftest
        saved = conftest.MODEL
        conftest.MODEL = EMBED
        try:
            super().__init__(*extra)
        finally:
            conftest.MODEL = saved


def embed(s, text):
    r = post(s, "/v1/embeddings", {"input": text, "model": "all-MiniLM-L6-v2"})
    assert r.status_code == 200, r.text
    return r.json()["data"][0]["embedding"]


def test_embedding_only_server_refuses_generation_in_each_shape(embed_only):
    s = embed_only
    assert len(embed(s, "hello")) == 384
    r = post(s, "/completion", {"prompt": "hi"})
    assert r.status_code == 501
    assert r.json()["error"] == {"code": 501, "type": "not_supported_error",
                                 "message": "This server does not support completions. Start it without `--embeddings`"}
    r = post(s, "/v1/chat/completions", {"messages": MESSAGES})
    assert r.status_code == 501 and r.json()["error"]["type"] == "not_supported_error"
    r = post(s, "/v1/messages", {"model": "x", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 501 and r.json()["type"] == "error"
    r = post(s, "/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 501


def test_pooling_replaces_the_checkpoints():
    if not os.path.exists(EMBED):
        pytest.skip("models/all-MiniLM-L6-v2 is missing")
    vecs = {}
    for pooling in ["mean", "cls", "last"]:
        s = EmbedServer("--pooling", pooling)
        try:
            vecs[pooling] = embed(s, "The quick brown fox")
        finally:
            s.stop()
    mean_default = None
    s = EmbedServer()
    try:
        mean_default = embed(s, "The quick brown fox")
    finally:
        s.stop()
    assert vecs["mean"] == pytest.approx(mean_default, abs=1e-6)  # MiniLM pools by mean
    assert vecs["cls"] != pytest.approx(vecs["mean"], abs=1e-3)
    assert vecs["last"] != pytest.approx(vecs["cls"], abs=1e-3)


# --- GET /slots ---------------------------------------------------------------------------

def test_slots_list_each_parallel_slot_with_the_last_request(srv):
    r = post(srv, "/completion", {"prompt": PARIS, "n_predict": 3, "temperature": 0, "top_k": 7, "stop": ["zz"]})
    assert r.status_code == 200
    slots = httpx.get(srv.base + "/slots").json()
    assert [s["id"] for s in slots] == [0, 1]
    assert all(s["n_ctx"] > 0 and s["is_processing"] is False for s in slots)
    used = [s for s in slots if "params" in s]
    assert used, slots
    last = max(used, key=lambda s: s["id_task"])
    assert last["params"]["top_k"] == 7 and last["params"]["temperature"] == 0 and last["params"]["stop"] == ["zz"]
    assert last["params"]["n_predict"] == 3
    # released: no budget left over, as llama-server resets n_decoded and n_remain (its
    # test_metrics_slots_idle_after_completion)
    assert last["next_token"][0]["n_decoded"] == 0 and last["next_token"][0]["n_remain"] == -1
    assert last["next_token"][0]["has_next_token"] is False
    assert last["n_prompt_tokens"] == r.json()["tokens_evaluated"]


def test_slots_show_a_running_request(srv):
    started = threading.Event()
    done = threading.Event()

    def stream():
        with httpx.stream("POST", srv.base + "/completion", timeout=60,
                          json={"prompt": "Count:", "n_predict": 400, "ignore_eos": True, "stream": True,
                                "temperature": 0}) as r:
            for _ in r.iter_lines():
                started.set()
                if done.is_set():
                    break

    t = threading.Thread(target=stream)
    t.start()
    try:
        assert started.wait(30)
        slots = httpx.get(srv.base + "/slots").json()
        busy = [s for s in slots if s["is_processing"]]
        assert len(busy) == 1
        assert busy[0]["next_token"][0]["n_remain"] == 400 - busy[0]["next_token"][0]["n_decoded"]
        r = httpx.get(srv.base + "/slots?fail_on_no_slot=1")
        assert r.status_code == 200  # one of two slots is still free
    finally:
        done.set()
        t.join()
    # The client left: its slot frees.
    for _ in range(50):
        if not any(s["is_processing"] for s in httpx.get(srv.base + "/slots").json()):
            break
        threading.Event().wait(0.1)
    assert not any(s["is_processing"] for s in httpx.get(srv.base + "/slots").json())


def test_slots_fail_on_no_slot_and_no_slots():
    s = Server("-np", "1")
    stop = threading.Event()
    started = threading.Event()

    def stream():
        with httpx.stream("POST", s.base + "/completion", timeout=60,
                          json={"prompt": "Count:", "n_predict": 400, "ignore_eos": True, "stream": True}) as r:
            for _ in r.iter_lines():
                started.set()
                if stop.is_set():
                    break

    t = threading.Thread(target=stream)
    t.start()
    try:
        assert started.wait(30)
        r = httpx.get(s.base + "/slots?fail_on_no_slot=1")
        assert r.status_code == 503
        assert r.json()["error"] == {"code": 503, "type": "unavailable_error", "message": "no slot available"}
    finally:
        stop.set()
        t.join()
        s.stop()
    s = Server("--no-slots", "-np", "1")
    try:
        r = httpx.get(s.base + "/slots")
        assert r.status_code == 501
        assert r.json()["error"]["message"] == "This server does not support slots endpoint. Start it with `--slots`"
        assert r.json()["error"]["type"] == "not_supported_error"
    finally:
        s.stop()


# --- POST /infill -------------------------------------------------------------------------

def test_infill_without_fim_tokens_is_llamacpps_error(srv):
    r = post(srv, "/infill", {"input_prefix": "def f(", "input_suffix": "\n"})
    assert r.status_code == 501
    assert r.json()["error"]["message"] == ("Infill is not supported by this model: prefix token is missing. "
                                            "suffix token is missing. middle token is missing. ")


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    """The default model with three of its unused special tokens renamed to Qwen's FIM tokens
    (same byte lengths, so the file's layout is unchanged). SmolLM2's own <reponame> is
    llama.cpp's FIM_REP; it has no <|file_sep|>."""
    data = open(MODEL, "rb").read()
    for old, new in [(b"<jupyter_text>", b"<|fim_prefix|>"), (b"<jupyter_code>", b"<|fim_suffix|>"),
                     (b"<empty_output>", b"<|fim_middle|>")]:
        assert len(old) == len(new) and data.count(old) == 1
        data = data.replace(old, new)
    path = tmp_path_factory.mktemp("fim") / "smollm2-fim.gguf"
    path.write_bytes(data)
    import conftest
    saved = conftest.MODEL
    conftest.MODEL = str(path)
    try:
        s = Server("-np", "1", "-c", "8192")
    finally:
        conftest.MODEL = saved
    yield s
    s.stop()


def test_infill_builds_llamacpps_fim_prompt(fim_server):
    r = post(fim_server, "/infill", {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
                                     "input_extra": [{"filename": "util.py", "text": "X = 1\n"}],
                                     "prompt": "a", "n_predict": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prompt"] == ("<reponame>myproject\n\n\n--- snippet ---\n\nX = 1\n"
                              "<|fim_prefix|>def add(a, b):\n    return a<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>")
    assert body["tokens_predicted"] >= 1 and body["stop"] is True
    # Streamed, it answers as /completion streams.
    with httpx.stream("POST", fim_server.base + "/infill", timeout=60,
                      json={"input_prefix": "x = ", "input_suffix": "", "n_predict": 2, "stream": True}) as s:
        events = [json.loads(l[6:]) for l in s.iter_lines() if l.startswith("data: ")]
    assert events[-1]["stop"] is True


def test_infill_cuts_the_prefix_to_llamacpps_share(fim_server):
    long_prefix = "word " * 4000  # ~4000 tokens: only the last 1536 (3/4 of a 2048 batch) stay
    r = post(fim_server, "/infill", {"input_prefix": long_prefix, "input_suffix": "end", "n_predict": 1})
    assert r.status_code == 200, r.text
    assert 1536 < r.json()["tokens_evaluated"] <= 1536 + 10


@pytest.mark.parametrize("body, says", [
    ({"input_suffix": "b"}, '"input_prefix" is required'),
    ({"input_prefix": "a"}, '"input_suffix" is required'),
    ({"input_prefix": "a", "input_suffix": "b", "prompt": 5}, '"prompt" must be a string'),
    ({"input_prefix": 7, "input_suffix": "b"}, '"input_prefix" must be a string or an array'),
    ({"input_prefix": [1, "x", -3], "input_suffix": "b"}, "input_prefix[2]"),
    ({"input_prefix": "a", "input_suffix": [10 ** 30]}, "input_suffix[0]"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": "x"}, '"input_extra" must be an array'),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "f"}]}, 'must contain a "text" field'),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [5]}, 'must contain a "text" field'),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t", "filename": 3}]}, '"filename" field must be a string'),
    ({"input_prefix": "a", "input_suffix": "b", "n_predict": "many"}, "n_predict"),
    ({"input_prefix": "a", "input_suffix": "b", "n_predict": 10 ** 12}, "n_predict"),
])
def test_infill_hostile_inputs(fim_server, body, says):
    r = post(fim_server, "/infill", body)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"] or says in json.dumps(r.json())


# --- logit_bias string keys, post_sampling_probs ------------------------------------------

@pytest.mark.parametrize("bias", [{" Paris": -100}, {" Paris": False}, [[" Paris", -100]], [[7042, False]]])
def test_logit_bias_by_text_bans_its_tokens(srv, bias):
    plain = post(srv, "/completion", {"prompt": PARIS, **GREEDY}).json()["content"]
    assert plain == " Paris"
    biased = post(srv, "/completion", {"prompt": PARIS, **GREEDY, "logit_bias": bias})
    assert biased.status_code == 200, biased.text
    assert biased.json()["content"] != " Paris"
    # The OpenAI route shares the field.
    r = post(srv, "/v1/completions", {"prompt": PARIS, "max_tokens": 1, "temperature": 0, "logit_bias": bias})
    assert r.status_code == 200 and r.json()["choices"][0]["text"] != " Paris"


def test_logit_bias_text_raises_every_token(srv):
    r = post(srv, "/completion", {"prompt": PARIS, "temperature": 0, "n_predict": 2, "logit_bias": {" Lyon Lyon": 100}})
    assert r.status_code == 200
    assert "Lyon" in r.json()["content"]


@pytest.mark.parametrize("bias, says", [
    ({"": 1}, "tokenize to 1..256 tokens"),
    ({"word " * 300: 1}, "tokenize to 1..256 tokens"),
    ({" Paris": "high"}, "biases must be numbers"),
    ({" Paris": 1000}, "biases must be numbers"),
    ([[" Paris"]], "pairs"),
    ([[" Paris", 1, 2]], "pairs"),
    ([[None, 1]], "pairs"),
    ({"99999999": 1}, "Invalid token id"),
    ("Paris", "logit_bias"),
])
def test_logit_bias_hostile(srv, bias, says):
    r = post(srv, "/completion", {"prompt": PARIS, **GREEDY, "logit_bias": bias})
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]


def test_post_sampling_probs_are_the_chains(srv):
    body = {"prompt": PARIS, "n_predict": 3, "n_probs": 5, "temperature": 0.7, "top_k": 3, "top_p": 1, "min_p": 0,
            "seed": 7}
    pre = post(srv, "/completion", body).json()["completion_probabilities"]
    post_ = post(srv, "/completion", {**body, "post_sampling_probs": True}).json()["completion_probabilities"]
    assert len(pre) == len(post_) == 3
    for a, b in zip(pre, post_):
        assert a["id"] == b["id"]  # the same seed draws the same tokens
        assert "logprob" in a and "top_logprobs" in a and "prob" in b and "top_probs" in b
        assert 1 <= len(b["top_probs"]) <= 3  # top_k 3 leaves at most 3 candidates
        assert sum(p["prob"] for p in b["top_probs"]) == pytest.approx(1.0, abs=1e-4)
        assert b["prob"] == pytest.approx(next(p["prob"] for p in b["top_probs"] if p["id"] == b["id"]), abs=1e-6)
        # Before the chain the same tokens weigh less: the rest of the vocabulary shares the mass.
        assert sum(2.718281828 ** p["logprob"] for p in a["top_logprobs"][:3]) < 1.0
    greedy = post(srv, "/completion", {"prompt": PARIS, **GREEDY, "n_probs": 3, "post_sampling_probs": True}).json()
    top = greedy["completion_probabilities"][0]["top_probs"]
    assert [p["prob"] for p in top] == [1.0] and top[0]["token"] == " Paris"
    streamed = []
    with httpx.stream("POST", srv.base + "/completion", timeout=60,
                      json={**body, "post_sampling_probs": True, "stream": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                streamed += json.loads(line[6:]).get("completion_probabilities", [])
    assert [p["id"] for p in streamed] == [p["id"] for p in post_]


@pytest.mark.parametrize("value", ["yes", 1, [True], {"a": 1}])
def test_post_sampling_probs_wrong_type(srv, value):
    r = post(srv, "/completion", {"prompt": PARIS, **GREEDY, "post_sampling_probs": value})
    assert r.status_code == 400 and "post_sampling_probs" in r.text


# --- --metrics-compat llamacpp ------------------------------------------------------------

def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise KeyError(name)


def test_metrics_compat_llamacpp_names():
    s = Server("--metrics-compat", "llamacpp", "--metrics", "-np", "2")
    try:
        r = post(s, "/completion", {"prompt": PARIS, "n_predict": 5, "ignore_eos": True, "temperature": 0})
        assert r.status_code == 200
        text = httpx.get(s.base + "/metrics").text
        assert "# TYPE llamacpp:prompt_tokens_total counter" in text
        assert "# TYPE llamacpp:requests_processing gauge" in text
        assert metric(text, "llamacpp:tokens_predicted_total") == 5
        assert metric(text, "llamacpp:prompt_tokens_total") == r.json()["tokens_evaluated"]
        assert metric(text, "llamacpp:n_decode_total") >= 5
        assert metric(text, "llamacpp:prompt_seconds_total") > 0
        assert metric(text, "llamacpp:tokens_predicted_seconds_total") > 0
        assert metric(text, "llamacpp:predicted_tokens_seconds") > 0  # over the window since the last scrape
        assert metric(text, "llamacpp:requests_processing") == 0
        assert metric(text, "llamacpp:requests_deferred") == 0
        assert 0 <= metric(text, "llamacpp:kv_cache_usage_ratio") <= 1
        assert metric(text, "llamacpp:n_tokens_max") == r.json()["tokens_evaluated"] + 5
        assert 0 < metric(text, "llamacpp:n_busy_slots_per_decode") <= 2
        # The window restarts at each scrape, as llama-server's buckets do.
        assert metric(httpx.get(s.base + "/metrics").text, "llamacpp:predicted_tokens_seconds") == 0
        assert "ferrox_generated_tokens_total" in text  # ferrox's own names stay
    finally:
        s.stop()


def test_metrics_without_compat_have_no_llamacpp_names(srv):
    assert "llamacpp:" not in httpx.get(srv.base + "/metrics").text


# --- a quant type ferrox lacks ------------------------------------------------------------

def test_unsupported_quant_type_is_named(tmp_path):
    """output_norm.weight's type rewritten to TQ1_0 (ggml type 34) in a copy of the model."""
    data = bytearray(open(MODEL, "rb").read())
    name = b"output_norm.weight"
    at = data.find(struct.pack("<Q", len(name)) + name)
    assert at > 0
    pos = at + 8 + len(name)
    n_dims = struct.unpack_from("<I", data, pos)[0]
    type_at = pos + 4 + 8 * n_dims
    assert struct.unpack_from("<I", data, type_at)[0] == 0  # F32
    struct.pack_into("<I", data, type_at, 34)
    path = tmp_path / "tq1.gguf"
    path.write_bytes(bytes(data))
    err = serve_fails(model=str(path))
    assert "unsupported tensor type tq1_0 (ggml type 34)" in err

"""The OpenAI-compatible routes, driven by the official `openai` SDK against the real binary."""
import json
import threading
import time

import anthropic
import httpx
import openai
import pytest
from conftest import metric_value


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


ID = "SmolLM2-135M-Instruct.Q4_1"
MSG = [{"role": "user", "content": "What is the capital of France?"}]


def greedy(client, **kw):
    args = dict(model=ID, messages=MSG, temperature=0, max_tokens=24)
    args.update(kw)
    return client.chat.completions.create(**args)


def test_models_lists_the_served_model(client):
    models = client.models.list().data
    assert len(models) == 1 and models[0].id == "SmolLM2-135M-Instruct.Q4_1"


def test_chat_completion(client):
    r = greedy(client)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content.strip() != ""
    assert r.choices[0].finish_reason in ("stop", "length")
    u = r.usage
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert 0 < u.completion_tokens <= 24 and u.prompt_tokens > 10
    assert u.prompt_tokens_details.cached_tokens == 0
    assert r.system_fingerprint and r.created > 0


def test_greedy_is_deterministic_and_stream_matches(client):
    full = greedy(client).choices[0].message.content
    assert greedy(client).choices[0].message.content == full
    chunks = list(greedy(client, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    assert all(c.id == chunks[0].id for c in chunks)


def test_stream_include_usage(client):
    chunks = list(greedy(client, stream=True, stream_options={"include_usage": True}, max_tokens=5))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert last.usage.completion_tokens == 5
    assert all(c.usage is None for c in chunks[:-1])


def test_max_tokens_gives_length(client):
    r = greedy(client, max_tokens=3, messages=[{"role": "user", "content": "Write a long essay about rivers."}])
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 3
    r = greedy(client, max_completion_tokens=2)
    assert r.usage.completion_tokens == 2


def test_stop_string_spanning_tokens(client):
    long = [{"role": "user", "content": "Write a short story about a dragon."}]
    full = greedy(client, messages=long, max_tokens=40).choices[0].message.content
    ids = httpx.post(str(client.base_url.join("/tokenize")), json={"content": full}).json()["tokens"]
    assert len(ids) > 10
    # A stop string made of the end of one token and the start of the next.
    pieces = [httpx.post(str(client.base_url.join("/detokenize")), json={"tokens": [t]}).json()["content"] for t in ids]
    k = next(i for i in range(5, len(pieces) - 1) if len(pieces[i]) >= 2 and len(pieces[i + 1]) >= 2)
    stop = pieces[k][-2:] + pieces[k + 1][:2]
    cut = full.index(stop)
    r = greedy(client, messages=long, max_tokens=40, stop=[stop])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].message.content == full[:cut]
    streamed = "".join(c.choices[0].delta.content or "" for c in greedy(client, messages=long, max_tokens=40,
                                                                        stop=stop, stream=True) if c.choices)
    assert streamed == full[:cut]


def test_seed_reproducible(client):
    kw = dict(temperature=1.0, max_tokens=16, messages=[{"role": "user", "content": "Tell me a fun fact."}])
    a = client.chat.completions.create(model=ID, seed=42, **kw).choices[0].message.content
    b = client.chat.completions.create(model=ID, seed=42, **kw).choices[0].message.content
    c = client.chat.completions.create(model=ID, seed=7, **kw).choices[0].message.content
    assert a == b
    assert a != c


def test_n_two_choices(client):
    r = client.chat.completions.create(model=ID, messages=MSG, n=2, temperature=1.0, seed=3, max_tokens=8)
    assert [c.index for c in r.choices] == [0, 1]
    assert r.usage.completion_tokens == sum(1 for _ in range(2)) * 8 or r.usage.completion_tokens <= 16


def test_logprobs(client):
    r = greedy(client, logprobs=True, top_logprobs=3, max_tokens=6)
    content = r.choices[0].logprobs.content
    assert len(content) >= 1
    for e in content:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token  # greedy picked the most likely
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token or "\ufffd" in e.token
        lps = [t.logprob for t in e.top_logprobs]
        assert lps == sorted(lps, reverse=True)


def test_legacy_completions(client):
    r = client.completions.create(model=ID, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text.startswith(" Paris")
    s = "".join(c.choices[0].text for c in client.completions.create(
        model=ID, prompt="The capital of France is", max_tokens=8, temperature=0, stream=True) if c.choices)
    assert s == r.choices[0].text
    r = client.completions.create(model=ID, prompt="1, 2, 3,", max_tokens=3, temperature=0, logprobs=2)
    assert len(r.choices[0].logprobs.tokens) == 3 and len(r.choices[0].logprobs.top_logprobs[0]) == 2


def test_errors_have_openai_shape(server, client):
    def post(body, path="/v1/chat/completions", **kw):
        return httpx.post(server.base + path, content=body if isinstance(body, (bytes, str)) else json.dumps(body), **kw)

    r = post("{not json")
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = post({"messages": MSG, "temperature": "hot"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = post({"messages": MSG, "temperature": 7})
    assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    r = post({"messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"
    r = post({"messages": MSG, "max_tokens": 100000})
    assert r.status_code == 400 and "100000" in r.json()["error"]["message"] and "2048" in r.json()["error"]["message"]
    # One chat model: a name it does not have is served by it (llama-server's rule, so clients
    # with a fixed model name work), and the answer names the model that served it.
    r = post({"messages": MSG, "model": "gpt-9", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["model"] == ID
    assert httpx.get(server.base + "/v1/nothing").status_code == 404
    assert httpx.get(server.base + "/v1/chat/completions").status_code == 405
    r = post(b"x" * (9 << 20))
    assert r.status_code == 413
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=ID, messages=[{"role": "wizard", "content": "hi"}])
    # Still serving after all of that.
    assert greedy(client, max_tokens=2).usage.completion_tokens == 2


def test_models_retrieve_in_both_sdks_and_route_aliases(server, client):
    m = client.models.retrieve(ID)
    assert m.id == ID and m.object == "model" and m.owned_by == "ferrox"
    assert client.models.retrieve("claude-sonnet-4-5").id == ID  # any name: the one model
    a = anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0)
    am = a.models.retrieve(ID)
    assert am.id == ID and am.type == "model" and am.display_name == ID
    assert httpx.get(server.base + "/models/" + ID).json()["id"] == ID
    # llama-server's routes without /v1.
    r = httpx.post(server.base + "/responses", timeout=60,
                   json={"model": ID, "input": "Hi", "max_output_tokens": 16, "temperature": 0})
    assert r.status_code == 200 and r.json()["object"] == "response" and r.json()["model"] == ID
    assert httpx.get(server.base + "/responses/" + r.json()["id"]).json()["id"] == r.json()["id"]
    r = httpx.post(server.base + "/chat/completions", timeout=60, json={"messages": MSG, "max_tokens": 2})
    assert r.status_code == 200 and r.json()["object"] == "chat.completion"


def test_api_keys(keyed_server):
    base = keyed_server.base + "/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0).models.list()
    r = httpx.get(base + "/models")
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    ok = openai.OpenAI(base_url=base, api_key="sk-two", max_retries=0)
    assert ok.models.list().data[0].id
    assert httpx.get(keyed_server.base + "/health").status_code == 200  # health needs no key


def test_client_disconnect_mid_stream(server, client):
    results = {}

    def other():
        results["other"] = greedy(client, max_tokens=16).usage.completion_tokens

    body = {"messages": [{"role": "user", "content": "Count from 1 to 1000."}], "max_tokens": 1500,
            "temperature": 0, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", server.base + "/v1/chat/completions", json=body, timeout=60) as r:
        lines = 0
        for line in r.iter_lines():
            if line.startswith("data:"):
                lines += 1
            if lines == 5:
                t = threading.Thread(target=other)
                t.start()
                break
    # The long generation was cancelled when the client left: the other request finishes soon.
    start = time.time()
    t.join(timeout=60)
    assert results.get("other") == 16
    assert time.time() - start < 30


def test_utility_routes(server):
    r = httpx.post(server.base + "/tokenize", json={"content": "Hello world", "with_pieces": True}).json()
    assert [t["piece"] for t in r["tokens"]] == ["Hello", " world"]
    ids = [t["id"] for t in r["tokens"]]
    assert httpx.post(server.base + "/detokenize", json={"tokens": ids}).json()["content"] == "Hello world"
    p = httpx.post(server.base + "/apply-template", json={"messages": MSG}).json()["prompt"]
    assert p.endswith("<|im_start|>assistant\n") and "What is the capital of France?" in p


def metric(base, name):
    return metric_value(httpx.get(base + "/metrics").text, name)


def test_queue_full_is_429_with_retry_after(tiny_queue_server):
    base = tiny_queue_server.base
    body = {"messages": [{"role": "user", "content": "Count to one thousand."}], "max_tokens": 400,
            "temperature": 0, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as running:
        assert running.status_code == 200
        # Keep the line iterator alive: a dropped httpx iterator closes the response, which
        # the server rightly takes as a disconnect and cancels the request.
        running_lines = running.iter_lines()
        next(running_lines)  # the first request holds the only slot
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as waiting:
            assert waiting.status_code == 200  # accepted into the queue (its stream has started)
            # One generating, one waiting: the queue (size 1) is full now.
            deadline = time.time() + 10
            while time.time() < deadline and not (metric(base, "ferrox_requests_running") == 1 and
                                                  metric(base, "ferrox_requests_waiting") == 1):
                time.sleep(0.05)
            if metric(base, "ferrox_requests_waiting") != 1:
                pytest.skip("could not hold one request running and one waiting: " +
                            httpx.get(base + "/metrics").text[:400])
            r = httpx.post(base + "/v1/chat/completions", json=dict(body, stream=False), timeout=60)
            assert r.status_code == 429
            assert r.headers.get("retry-after") == "1"
            assert r.json()["error"]["type"] == "rate_limit_error"
            c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.RateLimitError):
                c.chat.completions.create(model=ID, messages=MSG, max_tokens=2)
        del running_lines
    # Both streams closed: their requests are cancelled (within a step) and the server serves
    # again; a client that honours Retry-After gets through.
    c = openai.OpenAI(base_url=base + "/v1", api_key="x", max_retries=5, timeout=60)
    assert c.chat.completions.create(model=ID, messages=MSG, max_tokens=2).usage.completion_tokens == 2


def test_metrics_prometheus(server, client):
    before = httpx.get(server.base + "/metrics")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    greedy(client, max_tokens=3)

    value = metric_value

    after = httpx.get(server.base + "/metrics").text
    assert value(after, "ferrox_generated_tokens_total") >= value(before.text, "ferrox_generated_tokens_total") + 3
    assert value(after, "ferrox_kv_blocks_total") > 0
    assert value(after, "ferrox_time_to_first_token_seconds_count") >= 1
    assert 'ferrox_inter_token_latency_seconds_bucket{model="SmolLM2-135M-Instruct.Q4_1",le="+Inf"}' in after

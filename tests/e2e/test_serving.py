"""The serving core end to end: continuous batching, the prefix cache, preemption, the context
ceiling and the Q8_0 KV cache, driven by the official `openai` SDK against the real binary.

Each server here is started for this module only (conftest's `Server`, `-t 1`), with the pool
and slot counts a test needs. Generations are greedy and short so that the file stays quick.
"""
import concurrent.futures
import os
import re
import threading
import time

import httpx
import openai
import pytest

from conftest import MODEL, Server

ID = "SmolLM2-135M-Instruct.Q4_1"


def _start(*args):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    return Server(*args)


@pytest.fixture(scope="module")
def batch_server():
    """16 slots over a pool of 4096 tokens (128 blocks of 32): room for all of them at once."""
    s = _start("-c", "4096", "-np", "16")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def tiny_server():
    """3 blocks of 32 tokens (-c 96) for 4 slots. Admission keeps one free block per running
    sequence, so two sequences run at once, and when both cross 32 tokens the newest is
    preempted."""
    s = _start("-c", "96", "-np", "4")
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="module")
def q8_server():
    s = _start("-c", "512", "-np", "2", "--kv-type", "q8_0")
    yield s
    assert s.stop() == 0


def client_of(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


def metrics(server):
    """The unlabelled samples of /metrics, name -> value."""
    text = httpx.get(server.base + "/metrics", timeout=10).text
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{model=\"[^\"]*\"\})? (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def wait_idle(server, timeout=20):
    """Polls /metrics until nothing runs or waits and every KV block is back in the pool."""
    deadline = time.time() + timeout
    while True:
        m = metrics(server)
        idle = (m["ferrox_requests_running"] == 0 and m["ferrox_requests_waiting"] == 0
                and m["ferrox_kv_blocks_used"] == 0)
        if idle or time.time() > deadline:
            return m
        time.sleep(0.1)


# One request, streamed: the text it yields.
def stream_text(client, req, close_after=None):
    """Streams `req` (a dict: kind "chat" or "completion", plus the create() arguments) and
    returns the text; with close_after=k, closes the stream after k non-empty chunks."""
    args = dict(model=ID, temperature=0, stream=True)
    args.update({k: v for k, v in req.items() if k != "kind"})
    if req["kind"] == "chat":
        stream = client.chat.completions.create(**args)
        piece = lambda c: (c.choices[0].delta.content or "") if c.choices else ""
    else:
        stream = client.completions.create(**args)
        piece = lambda c: (c.choices[0].text or "") if c.choices else ""
    text, n = "", 0
    for chunk in stream:
        p = piece(chunk)
        text += p
        if p:
            n += 1
        if close_after is not None and n >= close_after:
            stream.close()
            break
    return text


TOPICS = ["the ocean", "a small village", "mountains in winter", "a robot learning to paint",
          "the history of bread", "a lighthouse keeper", "coffee", "the moon landing",
          "a cat and a dog", "rainy afternoons", "an old library", "the first computer",
          "a desert journey", "bees", "a violin maker", "trains at night"]


def batch_requests():
    """16 different requests: chat and plain completions alternate, max_tokens 6 to 20; the
    four at indices 3, 7, 11, 15 are long (the ones closed early)."""
    reqs = []
    for i, topic in enumerate(TOPICS):
        early = i % 4 == 3
        max_tokens = 400 if early else 6 + (i * 5) % 15
        if i % 2 == 0:
            # The chat template's system prompt makes these ~35 tokens: one full block, which
            # the alone runs leave in the prefix cache (so the batched run starts warm too).
            req = dict(kind="chat", messages=[{"role": "user", "content": f"Write a short story about {topic}."}],
                       max_tokens=max_tokens)
        else:
            req = dict(kind="completion", prompt=f"Here is a short poem about {topic}:\n", max_tokens=max_tokens)
        if early:
            req["extra_body"] = {"ignore_eos": True}
        reqs.append((req, early))
    return reqs


def test_16_concurrent_streams_match_their_alone_runs(batch_server):
    """Determinism under batching: 16 streams at once (4 closed by their client after a few
    chunks) give each of the 12 others exactly the text it gets alone; every KV block returns."""
    client = client_of(batch_server)
    reqs = batch_requests()
    alone = {}
    for i, (req, early) in enumerate(reqs):
        if not early:
            alone[i] = stream_text(client, req)
            assert alone[i].strip(), f"request {i} alone gave no text"

    start = threading.Barrier(len(reqs))

    def run(i):
        req, early = reqs[i]
        start.wait()
        return stream_text(client, req, close_after=3 if early else None)

    generated_before = metrics(batch_server)["ferrox_generated_tokens_total"]
    with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
        got = list(pool.map(run, range(len(reqs))))

    for i, (req, early) in enumerate(reqs):
        if early:
            assert got[i], f"early closer {i} got no text before closing"
        else:
            assert got[i] == alone[i], f"request {i} ({req}): batched text differs from alone"

    # The early closers asked for 400 tokens (ignore_eos): only their cancellation ends them
    # within the wait.
    m = wait_idle(batch_server)
    assert m["ferrox_requests_running"] == 0
    assert m["ferrox_requests_waiting"] == 0
    assert m["ferrox_kv_blocks_used"] == 0
    generated = m["ferrox_generated_tokens_total"] - generated_before
    # Each early closer would make 400 tokens if it ran on; cancelled, it makes a handful.
    assert generated < sum(r["max_tokens"] for r, early in reqs if not early) + 4 * 100, \
        "the early closers were not cancelled"


LONG = " ".join(f"Note {i}: the {['red', 'green', 'blue', 'yellow', 'white'][i % 5]} crate on shelf "
                f"{i % 7} holds {(i * 7) % 13} apples." for i in range(18))


def test_prefix_cache_reuses_a_repeated_prompt(batch_server):
    client = client_of(batch_server)
    prompt = LONG + "\nQuestion: which crate holds the most apples?\nAnswer:"
    before = metrics(batch_server)["ferrox_prefix_cache_hit_tokens_total"]
    ask = lambda **kw: client.completions.create(model=ID, prompt=prompt, max_tokens=8, temperature=0, **kw)

    cold = ask()
    n = cold.usage.prompt_tokens
    assert n > 250, "the prompt should span several blocks"
    warm = ask()
    cached = warm.usage.prompt_tokens_details.cached_tokens
    assert warm.usage.prompt_tokens == n
    assert cached > 0 and cached % 32 == 0 and cached < n
    # Every full block but the one holding the last two tokens (always computed) is reused.
    assert cached >= n - 2 - 31
    assert warm.choices[0].text == cold.choices[0].text

    opted_out = ask(extra_body={"cache_prompt": False})
    assert opted_out.usage.prompt_tokens_details.cached_tokens == 0
    assert opted_out.choices[0].text == cold.choices[0].text

    after = metrics(batch_server)["ferrox_prefix_cache_hit_tokens_total"]
    assert after - before >= cached


def test_multi_turn_chat_reuses_the_previous_turn(batch_server):
    client = client_of(batch_server)
    before = metrics(batch_server)["ferrox_prefix_cache_hit_tokens_total"]
    turn1 = [{"role": "user", "content": LONG + "\nHow many apples does the crate of note 4 hold?"}]
    r1 = client.chat.completions.create(model=ID, messages=turn1, max_tokens=12, temperature=0)
    n1 = r1.usage.prompt_tokens
    assert n1 > 250
    answer = r1.choices[0].message.content
    turn2 = turn1 + [{"role": "assistant", "content": answer},
                     {"role": "user", "content": "And the crate of note 5?"}]
    r2 = client.chat.completions.create(model=ID, messages=turn2, max_tokens=12, temperature=0)
    cached = r2.usage.prompt_tokens_details.cached_tokens
    assert r2.usage.prompt_tokens > n1
    assert cached % 32 == 0 and cached < r2.usage.prompt_tokens
    # At least every full block of turn 1's prompt.
    assert cached >= (n1 // 32) * 32, (n1, cached)
    after = metrics(batch_server)["ferrox_prefix_cache_hit_tokens_total"]
    assert after - before >= cached
    m = wait_idle(batch_server)
    assert m["ferrox_kv_blocks_used"] == 0


def test_preemption_on_a_tiny_pool_keeps_every_text(tiny_server):
    """8 concurrent requests of 35 to 41 tokens each on a pool of 3 blocks with 4 slots: the running
    ones outgrow the pool, the newest are preempted and recomputed, and each still gets the text
    it gets alone. A ninth request that fits the ceiling but needs the whole pool waits in the
    queue (not a 400, not a 429) and completes, with its alone text too."""
    client = client_of(tiny_server)
    # Prompts of 25 to 29 tokens (one block at admission) that cross 32 tokens a few tokens in.
    reqs = [dict(kind="completion", prompt=f"Here is a short poem about {t}, in the style of an English poet of "
                 "the nineteenth century, four rhyming lines:\n", max_tokens=10 + i % 3, extra_body={"ignore_eos": True})
            for i, t in enumerate(TOPICS[:8])]
    big = dict(kind="completion", prompt=LONG[:200] + "\nIn short:", max_tokens=12, extra_body={"ignore_eos": True})
    reqs.append(big)
    alone = [stream_text(client, r) for r in reqs]
    m0 = wait_idle(tiny_server)
    assert m0["ferrox_kv_blocks_used"] == 0
    n_big = client.completions.create(model=ID, prompt=big["prompt"], max_tokens=1).usage.prompt_tokens
    assert 64 < n_big + big["max_tokens"] <= 96, "the big request must need all 3 blocks, and fit"

    start = threading.Barrier(len(reqs))
    max_waiting = [0.0]
    done = threading.Event()

    def watch():
        while not done.is_set():
            max_waiting[0] = max(max_waiting[0], metrics(tiny_server)["ferrox_requests_waiting"])
            time.sleep(0.05)

    def run(i):
        start.wait()
        if i == len(reqs) - 1:
            time.sleep(0.3)  # behind the others in the queue
        return stream_text(client, reqs[i])

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(len(reqs)) as pool:
            got = list(pool.map(run, range(len(reqs))))
    finally:
        done.set()
        watcher.join()
    for i in range(len(reqs)):
        assert got[i] == alone[i], f"request {i} ({reqs[i]}): text under preemption differs from alone"
    m = wait_idle(tiny_server)
    assert m["ferrox_kv_blocks_used"] == 0 and m["ferrox_requests_running"] == 0
    assert m["ferrox_preemptions_total"] > m0["ferrox_preemptions_total"], "no preemption happened"
    assert max_waiting[0] >= 1, "nothing ever waited in the queue"


@pytest.mark.parametrize("which,n_ctx", [("batch_server", 4096), ("tiny_server", 96)])
def test_context_ceiling_is_reported_and_enforced(request, which, n_ctx):
    server = request.getfixturevalue(which)
    client = client_of(server)
    models = httpx.get(server.base + "/v1/models", timeout=10).json()
    assert models["data"][0]["meta"]["n_ctx"] == n_ctx
    assert httpx.get(server.base + "/props", timeout=10).json()["n_ctx"] == n_ctx

    too_many = n_ctx + 10
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=ID, prompt="Once upon a time", max_tokens=too_many, temperature=0)
    msg = e.value.message
    assert str(n_ctx) in msg and str(too_many) in msg, msg
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=ID, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=too_many, temperature=0)
    assert str(n_ctx) in e.value.message and str(too_many) in e.value.message


def test_q8_0_kv_cache_answers_coherently(q8_server):
    props = httpx.get(q8_server.base + "/props", timeout=10).json()
    assert props["kv_cache"]["type"] == "q8_0"
    client = client_of(q8_server)
    r = client.completions.create(model=ID, prompt="The capital of France is", max_tokens=8, temperature=0)
    assert "Paris" in r.choices[0].text, r.choices[0].text


GEMMA = os.path.join(os.path.dirname(MODEL), "gemma-3-270m-q4_k_m.gguf")


def test_draft_model_speculation_keeps_the_answers():
    """-md: the default model drafts for itself (the only model of its vocabulary here). Greedy
    answers with speculation are the answers without it ("speculative": false), drafts were
    accepted, and /props names the draft model."""
    s = _start("-c", "2048", "-np", "2", "-md", MODEL)
    try:
        props = httpx.get(s.base + "/props", timeout=10).json()
        assert props["speculative"]["draft_model"] == MODEL
        c = client_of(s)
        before = metrics(s)["ferrox_spec_accepted_tokens_total"]
        asks = ["Repeat exactly: the quick brown fox jumps over the lazy dog, twice.",
                "Write a haiku about winter."]
        for ask in asks:
            texts = []
            for spec in (True, False):
                r = c.chat.completions.create(model=ID, messages=[{"role": "user", "content": ask}],
                                              max_tokens=48, temperature=0,
                                              extra_body={} if spec else {"speculative": False})
                texts.append(r.choices[0].message.content)
            assert texts[0] == texts[1]
        assert metrics(s)["ferrox_spec_accepted_tokens_total"] > before
        wait_idle(s)
    finally:
        assert s.stop() == 0


def test_draft_max_0_does_not_load_the_draft_model():
    """--draft-max 0 turns speculation off, so -md's model is not loaded (its memory and load
    time would buy nothing): the server says so, /props names no draft model, nothing is drafted."""
    s = _start("-c", "1024", "-np", "1", "--draft-max", "0", "-md", MODEL)
    try:
        props = httpx.get(s.base + "/props", timeout=10).json()
        assert "speculative" not in props, props
        r = client_of(s).completions.create(model=ID, prompt="one two three one two three one two",
                                            max_tokens=16, temperature=0)
        assert r.choices[0].text
        assert metrics(s).get("ferrox_spec_draft_tokens_total", 0) == 0
    finally:
        assert s.stop() == 0
    out = s.proc.stdout.read()
    assert "--draft-max 0: speculation is off, draft model" in out and "not loaded" in out, out
    assert "draft model " + MODEL not in out.split("ready:")[-1], out


def test_draft_model_of_another_vocabulary_is_a_one_line_error():
    if not os.path.exists(GEMMA):
        pytest.skip(f"{GEMMA} is missing: run `make model`")
    with pytest.raises(RuntimeError) as e:
        _start("-md", GEMMA)
    assert "not the same vocabulary" in str(e.value)

"""The prompt cache as coding agents meet it: tiers that keep evicted prefixes (--cache-ram),
Anthropic cache_control pins, the reasons a turn re-read more than its new tokens (access log and
/metrics), and a cache directory that is full, broken mid-run or shared by two processes."""
import glob
import json
import os
import resource
import subprocess
import time

import anthropic
import httpx
import pytest

from conftest import BIN, MODEL, Server, free_port, metric_value

ID = "SmolLM2-135M-Instruct.Q4_1"
T0 = {"temperature": 0}

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason=f"{MODEL} is missing: run `make model`")


def complete(s, prompt, n=8, **extra):
    r = httpx.post(s.base + "/v1/completions", timeout=120,
                   json={"prompt": prompt, "max_tokens": n, "temperature": 0, **extra})
    assert r.status_code == 200, r.text
    j = r.json()
    return j["choices"][0]["text"], j["usage"]["prompt_tokens_details"]["cached_tokens"], j["usage"]["prompt_tokens"]


def churn(s, n=6):
    # Other prompts that together need more than the pool: every cached block of an earlier
    # prompt that nothing protects is evicted.
    for k in range(n):
        complete(s, " ".join(f"unrelated {k} filler {i}." for i in range(30)), n=2)


LONG = " ".join(f"Step {i}: read file {i * 7}, then run its tests." for i in range(25))


def test_evicted_prefixes_come_back_from_host_memory():
    # A pool of 640 tokens (20 blocks): the churn evicts the long prompt. With --cache-ram its
    # blocks are copied out as they go and read back: the same answer, nearly all of it cached.
    results = {}
    for ram in ("0", "64"):
        s = Server("-c", "640", "-np", "1", "--cache-ram", ram)
        try:
            cold_text, cold_cached, n = complete(s, LONG)
            churn(s)
            text, cached, _ = complete(s, LONG)
            hits = metric_value(httpx.get(s.base + "/metrics").text, "ferrox_prompt_cache_ram_hit_blocks_total")
        finally:
            s.stop()
        assert cold_cached == 0 and n > 250
        results[ram] = (cold_text, text, cached, n, hits)
    cold_text, text, cached, n, hits = results["0"]
    assert cached < n // 2 and hits == 0  # evicted, recomputed
    cold_text, text, cached, n, hits = results["64"]
    assert text == cold_text
    assert cached >= 0.9 * n and hits >= n // 32 * 0.9


def test_cache_control_pins_the_prefix_against_other_traffic():
    # An Anthropic breakpoint (ttl 1h) keeps the system prompt's blocks in the pool while other
    # requests churn through it; the same traffic evicts an unpinned prompt.
    s = Server("-c", "1024", "-np", "1", "--cache-ram", "0")
    try:
        claude = anthropic.Anthropic(base_url=s.base, api_key="x", max_retries=0)

        def ask(system, pin):
            block = {"type": "text", "text": system}
            if pin:
                block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
            return claude.messages.create(model=ID, max_tokens=2, extra_body=T0, system=[block],
                                          messages=[{"role": "user", "content": "Go on."}]).usage

        pinned_sys = "You review code. " + LONG
        plain_sys = "You write code. " + LONG
        first = ask(pinned_sys, True)
        assert first.cache_creation_input_tokens > 250
        ask(plain_sys, False)
        text = httpx.get(s.base + "/metrics").text
        assert metric_value(text, "ferrox_kv_blocks_pinned") >= first.cache_creation_input_tokens // 32 - 1
        churn(s)
        again = ask(pinned_sys, True)
        other = ask(plain_sys, True)  # a breakpoint now, to read what the cache still had
        broken = metric_value(httpx.get(s.base + "/metrics").text, "ferrox_prompt_cache_pins_broken_total")
    finally:
        s.stop()
    assert again.cache_read_input_tokens >= first.cache_creation_input_tokens - 32
    assert other.cache_read_input_tokens < other.cache_creation_input_tokens  # it was evicted
    assert broken == 0


def test_an_unknown_ttl_is_a_400(server):
    # A ttl Anthropic does not have is a 400 in Anthropic's shape.
    r = httpx.post(server.base + "/v1/messages", timeout=60, json={
        "model": ID, "max_tokens": 2, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "2h"}}]}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert "ttl" in r.json()["error"]["message"]


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_cache_misses_are_explained(tmp_path):
    # Each turn of a keyed conversation that re-reads more than its new tokens says why, in the
    # access log and in /metrics: a clock in the system prompt, a reordered tool list, an edited
    # earlier turn, and a prefix the pool evicted. A turn that only adds tokens says nothing.
    log = tmp_path / "access.jsonl"
    s = Server("-c", "640", "-np", "1", "--cache-ram", "0", "--access-log", str(log))
    try:
        def chat(key, system, user, tools=None, history=()):
            body = {"model": ID, "max_tokens": 2, "temperature": 0, "prompt_cache_key": key,
                    "messages": [{"role": "system", "content": system}, *history,
                                 {"role": "user", "content": user}]}
            if tools:
                body["tools"] = tools
            r = httpx.post(s.base + "/v1/chat/completions", timeout=120, json=body)
            assert r.status_code == 200, r.text
            return r.json()["choices"][0]["message"]["content"]

        base = "You are a coding agent. Follow the repository's rules. " * 8
        chat("clock", "Current time: 12:01:05. " + base, "List the files.")
        chat("clock", "Current time: 12:01:09. " + base, "List the files.")

        def tool(name):
            return {"type": "function", "function": {"name": name, "description": f"The {name} tool, " * 6,
                                                     "parameters": {"type": "object", "properties": {}}}}
        tools = [tool("read"), tool("write"), tool("grep")]
        chat("tools", "You are a coding agent.", "Find the bug.", tools=tools)
        chat("tools", "You are a coding agent.", "Find the bug.", tools=tools[::-1])

        hist = [{"role": "user", "content": "Describe the build system in detail. " * 6},
                {"role": "assistant", "content": "It uses CMake with presets and Ninja. " * 6}]
        answer = chat("edit", "You are a coding agent.", "And the tests?", history=hist)
        grown = hist + [{"role": "user", "content": "And the tests?"}, {"role": "assistant", "content": answer}]
        chat("edit", "You are a coding agent.", "Run them.", history=grown)  # only new tokens: no miss
        edited = [{"role": "user", "content": "Describe the build system briefly. " * 6}] + grown[1:]
        chat("edit", "You are a coding agent.", "Run them.", history=edited)

        chat("evict", base + "Rules for the evicted one.", "Hello.")
        churn(s)
        chat("evict", base + "Rules for the evicted one.", "Hello.", history=[])
        metrics = httpx.get(s.base + "/metrics").text
    finally:
        s.stop()
    entries = [e for e in read_log(log) if e.get("route", e.get("path", "")).endswith("/chat/completions")]
    by_key = {}
    for e in entries:
        by_key.setdefault(e.get("cache_key"), []).append(e)
    assert by_key["clock"][1]["cache_miss"]["reason"] == "timestamp"
    assert by_key["tools"][1]["cache_miss"]["reason"] == "tools_reordered"
    assert "cache_miss" not in by_key["edit"][1]
    miss = by_key["edit"][2]["cache_miss"]
    assert miss["reason"] == "history_changed" and miss["missed"] > 32 and miss["at"] > 0
    assert by_key["evict"][1]["cache_miss"]["reason"] == "evicted"
    assert "cache_miss" not in by_key["clock"][0]
    counts = {line.split('"')[1]: float(line.split()[-1]) for line in metrics.splitlines()
              if line.startswith("ferrox_prompt_cache_misses_total{reason=")}
    for reason in ("timestamp", "tools_reordered", "history_changed", "evicted"):
        assert counts[reason] >= 1, (reason, counts)
    assert counts["system_changed"] == 0 and counts["model_changed"] == 0, counts


def start(args, fsize=None):
    port = free_port()
    pre = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))) if fsize else None
    p = subprocess.Popen([BIN, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(port), "-t", "1",
                          "-c", "2048", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         preexec_fn=pre)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        assert p.poll() is None, p.stdout.read()
        try:
            if httpx.get(base + "/health", timeout=1).status_code == 200:
                return p, base
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError("ferrox serve did not become ready")


def stop(p):
    p.terminate()
    try:
        out, _ = p.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return p.returncode, out


def ask(base, prompt):
    r = httpx.post(base + "/v1/completions", timeout=120, json={"prompt": prompt, "max_tokens": 8, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["text"]


def test_a_full_cache_directory_costs_nothing_but_the_cache(tmp_path):
    # A file-size limit below one block file: every write fails (EFBIG, as a full disk's ENOSPC).
    # The server keeps answering, the same text as without a disk cache, with one warning.
    p, base = start(["--cache-dir", str(tmp_path / "kv")], fsize=4096)
    try:
        texts = [ask(base, LONG + f" Variant {k}.") for k in range(3)]
        assert ask(base, LONG + " Variant 0.") == texts[0]
        assert httpx.get(base + "/health").status_code == 200
    finally:
        rc, out = stop(p)
    assert rc == 0, out
    assert out.count("prompt cache: cannot write") == 1, out
    assert not glob.glob(str(tmp_path / "kv" / "*" / "*.kv"))
    q, base2 = start([])
    try:
        assert ask(base2, LONG + " Variant 0.") == texts[0]
    finally:
        stop(q)


def test_a_cache_directory_broken_while_serving(tmp_path):
    # The model's directory replaced by a file mid-run (a cleanup script, a read-only remount):
    # writes and reads fail, answers do not change, the process goes on.
    cache = tmp_path / "kv"
    p, base = start(["--cache-dir", str(cache)])
    try:
        first = ask(base, LONG)
        time.sleep(0.5)  # the writer thread
        sub = glob.glob(str(cache / "*"))
        assert len(sub) == 1 and glob.glob(sub[0] + "/*.kv")
        subprocess.run(["rm", "-rf", sub[0]], check=True)
        with open(sub[0], "w") as f:
            f.write("not a directory")
        assert ask(base, "Other work. " + LONG) != ""  # new blocks: their writes fail
        assert ask(base, LONG) == first
    finally:
        rc, out = stop(p)
    assert rc == 0, out
    assert "prompt cache: cannot write" in out


def test_two_processes_share_a_cache_directory(tmp_path):
    # Two servers on one directory at once: each writes whole files by rename and verifies what
    # it reads, so neither sees a damaged file; a third, started later, reads what both wrote.
    cache = str(tmp_path / "kv")
    a, base_a = start(["--cache-dir", cache])
    b, base_b = start(["--cache-dir", cache])
    try:
        prompts = [LONG + f" Task {k}." for k in range(4)]
        ta = [ask(base_a, q) for q in prompts[:2]] + [ask(base_a, prompts[2])]
        tb = [ask(base_b, q) for q in prompts[2:]] + [ask(base_b, prompts[0])]
        time.sleep(0.5)
    finally:
        rc_a, out_a = stop(a)
        rc_b, out_b = stop(b)
    assert rc_a == 0 and rc_b == 0
    assert "damaged" not in out_a + out_b
    assert ta[2] == tb[0] and ta[0] == tb[2]
    c, base_c = start(["--cache-dir", cache])
    try:
        for q, want in zip(prompts, ta[:2] + tb[:2]):
            r = httpx.post(base_c + "/v1/completions", timeout=120,
                           json={"prompt": q, "max_tokens": 8, "temperature": 0}).json()
            assert r["choices"][0]["text"] == want
            assert r["usage"]["prompt_tokens_details"]["cached_tokens"] >= 0.9 * r["usage"]["prompt_tokens"]
    finally:
        rc, out = stop(c)
    assert "damaged" not in out


GEMMA = os.path.join(os.path.dirname(MODEL), "gemma-3-270m-q4_k_m.gguf")


@pytest.mark.skipif(not os.path.exists(GEMMA), reason=f"{GEMMA} is missing: run `make model`")
def test_sliding_window_models_reuse_their_prefix():
    # Gemma 3 (5 of every 6 layers attend to a 512-token window): the pool keeps every layer's
    # K/V for all positions, so a conversation's next turn, 2,000 tokens on, re-reads only its new
    # tokens, with the answer a cold server gives.
    p = subprocess.Popen([BIN, "serve", "-m", GEMMA, "--host", "127.0.0.1", "--port", str(port := free_port()),
                          "-t", "2", "-c", "4096", "-np", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        history = [{"role": "user", "content": "Summarize these notes. " + LONG + " " + LONG + " " + LONG}]

        def turn(msgs, cache=True):
            r = httpx.post(base + "/v1/chat/completions", timeout=300, json={
                "model": "g", "messages": msgs, "max_tokens": 6, "temperature": 0, "cache_prompt": cache})
            assert r.status_code == 200, r.text
            j = r.json()
            return j["choices"][0]["message"]["content"], j["usage"]

        answer, u1 = turn(history)
        assert u1["prompt_tokens"] > 1000
        nxt = history + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Shorter, please."}]
        warm_text, u2 = turn(nxt)
        cold_text, u3 = turn(nxt, cache=False)
    finally:
        p.terminate()
        p.wait(timeout=15)
    new = u2["prompt_tokens"] - u1["prompt_tokens"]
    assert u2["prompt_tokens"] - u2["prompt_tokens_details"]["cached_tokens"] <= new + 32
    assert u3["prompt_tokens_details"]["cached_tokens"] == 0
    assert warm_text == cold_text

"""Every protocol through one path: the anthropic SDK on /v1/messages, the openai SDK on
/v1/responses, raw llama.cpp /completion, against the real binary and the default model."""
import json
import os
import threading

import anthropic
import httpx
import openai
import pytest

from conftest import MODEL, Server, metric_value

ID = "SmolLM2-135M-Instruct.Q4_1"
QUESTION = "What is the capital of France?"
# The anthropic SDK no longer has sampling arguments; greedy decoding goes in the body.
T0 = {"temperature": 0}
SYSTEM = "You are a helpful assistant who answers questions about geography briefly and well. " * 3


@pytest.fixture(scope="module")
def server():
    """The default configuration (`-t` = cores: the engine thread runs the stream parsers and
    sinks) serving every protocol. The other modules' servers use `-t 1`, the worker path, since
    ctest runs two test programs at once on two cores."""
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    s = Server(threads=None)
    yield s
    assert s.stop() == 0, "SIGTERM must end the server with exit code 0"


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=60)


def test_same_prompt_same_tokens_on_all_five_generating_routes(server, claude, oai):
    msgs = [{"role": "user", "content": QUESTION}]
    chat = oai.chat.completions.create(model=ID, messages=msgs, temperature=0, max_tokens=20)
    text = chat.choices[0].message.content
    assert text
    m = claude.messages.create(model=ID, messages=msgs, extra_body=T0, max_tokens=20)
    assert m.content[0].text == text
    r = oai.responses.create(model=ID, input=QUESTION, temperature=0, max_output_tokens=20)
    assert r.output_text == text
    prompt = httpx.post(server.base + "/apply-template", json={"messages": msgs}).json()["prompt"]
    legacy = oai.completions.create(model=ID, prompt=prompt, temperature=0, max_tokens=20)
    assert legacy.choices[0].text == text
    native = httpx.post(server.base + "/completion", timeout=60,
                        json={"prompt": prompt, "temperature": 0, "n_predict": 20}).json()
    assert native["content"] == text


# ---- Anthropic Messages ----

def test_messages_plain_shape_and_usage(claude):
    m = claude.messages.create(model=ID, max_tokens=16, extra_body=T0,
                               system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                               messages=[{"role": "user", "content": QUESTION}],
                               metadata={"user_id": "u1"})
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert m.model == ID and m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason in ("end_turn", "max_tokens") and m.stop_sequence is None
    assert m.usage.output_tokens > 0 and m.usage.input_tokens > 5
    again = claude.messages.create(model=ID, max_tokens=16, extra_body=T0,
                                   system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
                                   messages=[{"role": "user", "content": QUESTION}])
    # The second identical request reads the system prompt (its breakpoint) from the prefix
    # cache; input_tokens is only the rest, as Anthropic counts it.
    assert again.usage.cache_read_input_tokens > 0

    def prompt(u):
        return u.input_tokens + (u.cache_read_input_tokens or 0) + (u.cache_creation_input_tokens or 0)
    assert prompt(again.usage) == prompt(m.usage)
    assert again.content[0].text == m.content[0].text


def test_messages_stream_events_and_final_message(claude):
    with claude.messages.stream(model=ID, max_tokens=12, extra_body=T0,
                                messages=[{"role": "user", "content": "Write a poem about the sea."}]) as s:
        events = list(s)
        final = s.get_final_message()
    types = [e.type for e in events]
    assert types[0] == "message_start" and "content_block_start" in types and types[-1] == "message_stop"
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    assert final.content[0].text == text and final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 12


def test_messages_stop_sequence_and_beta_route(claude, server):
    full = claude.messages.create(model=ID, max_tokens=30, extra_body=T0,
                                  messages=[{"role": "user", "content": "Count from 1 to 10."}]).content[0].text
    words = full.split()
    assert len(words) > 3
    stop = words[2]
    m = claude.beta.messages.create(model=ID, max_tokens=30, extra_body=T0, stop_sequences=[stop],
                                    messages=[{"role": "user", "content": "Count from 1 to 10."}])
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert stop not in m.content[0].text and full.startswith(m.content[0].text)


def test_messages_lenient_inputs(claude, server):
    # role "system" inside messages (Claude Code), thinking in history, unknown fields.
    r = httpx.post(server.base + "/v1/messages?beta=true", timeout=60, headers={
        "anthropic-version": "2023-06-01", "anthropic-beta": "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"},
        json={"model": ID, "max_tokens": 8,
              "messages": [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "Hi"},
                           {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "x"},
                                                              {"type": "redacted_thinking", "data": "abc"},
                                                              {"type": "text", "text": "Hello."}]},
                           {"role": "user", "content": [{"type": "text", "text": "Again"}]}],
              "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
              "context_management": {"edits": []}, "output_config": {"effort": "low"}})
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["type"] == "text"


def test_messages_errors_have_anthropic_shape(claude, server):
    # Claude Code's model name is served by the one model, and the answer names it.
    m = claude.messages.create(model="claude-sonnet-4-5", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert m.model == ID
    r = httpx.post(server.base + "/v1/messages/nope", json={})
    assert r.status_code == 404 and r.json()["type"] == "error" and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(server.base + "/v1/messages", json={"messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["type"] == "error"
    assert r.json()["error"]["type"] == "invalid_request_error" and "max_tokens" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/v1/messages", json={"max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]})
    assert r.status_code == 400 and "image" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/v1/messages", json={"max_tokens": 5, "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}]}]})
    assert r.status_code == 400 and "tool_use_id" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/v1/messages", content=b"{not json")
    assert r.status_code == 400 and r.json()["type"] == "error"
    r = httpx.get(server.base + "/v1/messages")
    assert r.status_code == 405 and r.json()["type"] == "error"


def test_count_tokens(claude, server):
    n = claude.messages.count_tokens(model=ID, messages=[{"role": "user", "content": QUESTION}])
    ids = httpx.post(server.base + "/tokenize", json={
        "content": httpx.post(server.base + "/apply-template", json={"messages": [{"role": "user", "content": QUESTION}]}).json()["prompt"],
        "add_special": True}).json()["tokens"]
    assert n.input_tokens == len(ids)


def test_billing_header_does_not_defeat_the_prefix_cache(claude):
    def ask(cch):
        return claude.messages.create(model=ID, max_tokens=4, extra_body=T0, system=[
            {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.0; cc_entrypoint=cli; cch={cch};"},
            {"type": "text", "text": "You are Claude Code, a helpful coding agent. " * 8,
             "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": "List the files."}])
    ask("a1b2c")
    second = ask("f9e8d")
    assert second.usage.cache_read_input_tokens >= 64


def test_anthropic_cache_accounting(claude):
    # Anthropic's usage: without cache_control both cache fields are 0, whatever the prefix cache
    # did; with a breakpoint the prompt up to it is written (first turn) then read (next turn),
    # and the three fields sum to the prompt (count_tokens).
    system = "You are a careful reviewer of pull requests. " * 12
    msgs = [{"role": "user", "content": [{"type": "text", "text": "Review this diff: " + "x = x + 1\n" * 20,
                                          "cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]
    total = claude.messages.count_tokens(model=ID, system=system, messages=msgs).input_tokens
    plain = [{"role": "user", "content": msgs[0]["content"][0]["text"]}]
    u0 = claude.messages.create(model=ID, max_tokens=1, extra_body=T0, system=system, messages=plain).usage
    assert u0.cache_creation_input_tokens == 0 and u0.cache_read_input_tokens == 0 and u0.input_tokens == total
    fresh = system.replace("careful", "patient")  # a prefix nothing cached yet
    total = claude.messages.count_tokens(model=ID, system=fresh, messages=msgs).input_tokens
    u1 = claude.messages.create(model=ID, max_tokens=1, extra_body=T0, system=fresh, messages=msgs).usage
    u2 = claude.messages.create(model=ID, max_tokens=1, extra_body=T0, system=fresh, messages=msgs).usage
    for u in (u1, u2):
        assert u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens == total
        assert u.input_tokens < 16  # after the breakpoint: the generation prompt
    assert u1.cache_creation_input_tokens > 100 and u1.cache_read_input_tokens < 32
    assert u2.cache_read_input_tokens >= u1.cache_creation_input_tokens - 32 and u2.cache_creation_input_tokens < 32


def test_mid_conversation_system_message_keeps_the_history_cached(claude):
    # A hook's role:"system" message late in the conversation stays in place (as Anthropic keeps
    # it): the turns before it are the previous request's prompt, read from the cache.
    history = [{"role": "user", "content": "Describe the repository layout. " * 6},
               {"role": "assistant", "content": "It has src, tests, bench and docs folders, each with a README. " * 6},
               {"role": "user", "content": "And the build? " * 6}]
    history[-1] = {"role": "user", "content": [{"type": "text", "text": "And the build? " * 6,
                                                "cache_control": {"type": "ephemeral"}}]}
    first = claude.messages.create(model=ID, max_tokens=2, extra_body=T0, system="You are a coding agent.",
                                   messages=history)
    second = claude.messages.create(model=ID, max_tokens=2, extra_body=T0, system="You are a coding agent.",
                                    messages=history + [
                                        {"role": "assistant", "content": "CMake with presets."},
                                        {"role": "system", "content": "<system-reminder>Files changed.</system-reminder>"},
                                        {"role": "user", "content": [{"type": "text", "text": "Run the tests.",
                                                                      "cache_control": {"type": "ephemeral"}}]}])
    first_prompt = first.usage.input_tokens + first.usage.cache_creation_input_tokens + first.usage.cache_read_input_tokens
    assert first_prompt > 100
    assert second.usage.cache_read_input_tokens >= first_prompt - 32  # all but a partial block


def test_models_list_in_anthropic_shape(claude):
    models = claude.models.list().data
    assert models[0].id == ID and models[0].type == "model"


def test_anthropic_auth_with_x_api_key(keyed_server):
    c = anthropic.Anthropic(base_url=keyed_server.base, api_key="sk-two", max_retries=0)
    assert c.messages.create(model=ID, max_tokens=2, messages=[{"role": "user", "content": "Hi"}]).content
    bad = anthropic.Anthropic(base_url=keyed_server.base, api_key="sk-wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=ID, max_tokens=2, messages=[{"role": "user", "content": "Hi"}])


# ---- OpenAI Responses ----

def test_responses_plain_and_store(oai, server):
    r = oai.responses.create(model=ID, input=QUESTION, instructions="Answer briefly.", temperature=0,
                             max_output_tokens=16)
    assert r.id.startswith("resp_") and r.object == "response" and r.status in ("completed", "incomplete")
    assert r.output[0].type == "message" and r.output[0].content[0].type == "output_text"
    assert r.output_text and r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    got = oai.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text
    items = oai.responses.input_items.list(r.id).data
    assert items[0].type == "message" and items[0].content[0].text == QUESTION
    # previous_response_id continues the stored conversation, and its KV comes from the cache.
    follow = oai.responses.create(model=ID, input="And of Italy?", previous_response_id=r.id, temperature=0,
                                  max_output_tokens=8)
    assert follow.previous_response_id == r.id and follow.usage.input_tokens_details.cached_tokens > 10
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model=ID, input="x", previous_response_id=r.id)


def test_responses_incomplete_on_length(oai):
    r = oai.responses.create(model=ID, input="Write a long essay about rivers.", max_output_tokens=3, store=False)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)


def test_responses_stream_order_and_ids(oai):
    with oai.responses.stream(model=ID, input="Hi", temperature=0, max_output_tokens=60) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[1] == "response.in_progress"
    assert types[-1] in ("response.completed", "response.incomplete")
    assert sum(t in ("response.completed", "response.incomplete", "response.failed") for t in types) == 1
    seqs = [e.sequence_number for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.id for i in done] == [o.id for o in final.output]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == final.output_text


def test_responses_stream_truncated_ends_with_incomplete(server):
    with httpx.stream("POST", server.base + "/v1/responses", timeout=60, json={
            "model": ID, "input": "Write a long essay about rivers.", "max_output_tokens": 4, "stream": True}) as r:
        events = [json.loads(l[6:]) for l in r.iter_lines() if l.startswith("data: ")]
    terminal = [e for e in events if e["type"] in ("response.completed", "response.incomplete", "response.failed")]
    assert len(terminal) == 1 and terminal[0] is events[-1] and events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"]["reason"] == "max_output_tokens"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_responses_accepts_codex_style_input(oai, server):
    r = httpx.post(server.base + "/v1/responses", timeout=60, json={
        "model": ID, "instructions": "You are a coding agent.", "store": False, "stream": False,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "abc", "max_output_tokens": 4,
        "tools": [{"type": "function", "name": "shell", "description": "run", "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}},
                  {"type": "custom", "name": "apply_patch", "description": "patch"},
                  {"type": "web_search"}, {"type": "local_shell"}],
        "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "ctx"}]},
                  {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
                  {"type": "reasoning", "summary": [], "encrypted_content": "opaque"},
                  {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"cmd\": \"ls\"}"},
                  {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
                  {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "There is a.txt."}]},
                  {"type": "message", "role": "user", "content": "thanks"}]})
    assert r.status_code == 200, r.text
    r = httpx.post(server.base + "/v1/responses", json={"model": ID, "input": [
        {"type": "function_call_output", "call_id": "nope", "output": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].call_id"


def test_responses_resumed_codex_session_with_local_shell_calls(server):
    # A resumed Codex session pairs its outputs with local_shell_call items (function_call_output
    # by call_id, local_shell_call_output by id): accepted, and the calls are in the prompt.
    def usage(items):
        r = httpx.post(server.base + "/v1/responses", timeout=60, json={
            "model": ID, "store": False, "max_output_tokens": 2, "tools": [{"type": "local_shell"}],
            "input": [{"type": "message", "role": "user", "content": "list files"}] + items +
                     [{"type": "message", "role": "user", "content": "thanks"}]})
        assert r.status_code == 200, r.text
        return r.json()["usage"]["input_tokens"]
    shell = [{"type": "local_shell_call", "id": "lsh_1", "call_id": "call_9", "status": "completed",
              "action": {"type": "exec", "command": ["bash", "-lc", "ls -la"], "timeout_ms": 10000,
                         "working_directory": "/repo", "env": {}, "user": None}},
             {"type": "function_call_output", "call_id": "call_9", "output": "a.txt b.txt"},
             {"type": "local_shell_call", "id": "lsh_2", "call_id": "call_10", "status": "completed",
              "action": {"type": "exec", "command": ["cat", "a.txt"]}},
             {"type": "local_shell_call_output", "id": "call_10", "output": "hello"}]
    assert usage(shell) > usage([]) + 20  # the commands and their outputs were rendered


# ---- llama.cpp /completion ----

def test_completion_native_shapes(server):
    r = httpx.post(server.base + "/completion", timeout=60, json={
        "prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "n_probs": 2, "return_tokens": True}).json()
    assert r["stop"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 6
    assert len(r["tokens"]) == 6 and len(r["completion_probabilities"]) == 6
    assert len(r["completion_probabilities"][0]["top_logprobs"]) == 2
    assert r["timings"]["predicted_n"] == 6 and r["timings"]["prompt_n"] > 0
    ids = httpx.post(server.base + "/tokenize", json={"content": "The capital of France is", "add_special": True}).json()["tokens"]
    by_ids = httpx.post(server.base + "/completion", timeout=60, json={"prompt": ids, "n_predict": 6, "temperature": 0}).json()
    assert by_ids["content"] == r["content"]
    mixed = httpx.post(server.base + "/completion", timeout=60, json={
        "prompt": ids[:2] + [httpx.post(server.base + "/detokenize", json={"tokens": ids[2:]}).json()["content"]],
        "n_predict": 6, "temperature": 0}).json()
    assert mixed["tokens_evaluated"] >= len(ids) - 1


def test_completion_stream_stop_word_and_prefill_only(server):
    with httpx.stream("POST", server.base + "/completion", timeout=60, json={
            "prompt": "1, 2, 3, 4,", "n_predict": 30, "temperature": 0, "stream": True, "stop": [" 7"]}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert all(c["stop"] is False for c in chunks[:-1]) and chunks[-1]["stop"] is True
    text = "".join(c["content"] for c in chunks)
    assert chunks[-1]["stop_type"] == "word" and chunks[-1]["stopping_word"] == " 7" and " 7" not in text
    fill = httpx.post(server.base + "/completion", timeout=60, json={"prompt": "A long shared prefix. " * 12, "n_predict": 0}).json()
    assert fill["tokens_predicted"] == 0 and fill["content"] == ""
    again = httpx.post(server.base + "/completion", timeout=60, json={"prompt": "A long shared prefix. " * 12, "n_predict": 1}).json()
    assert again["timings"]["cache_n"] >= 32
    cold = httpx.post(server.base + "/completion", timeout=60, json={"prompt": "A long shared prefix. " * 12, "n_predict": 1, "cache_prompt": False}).json()
    assert cold["timings"]["cache_n"] == 0


def test_completion_errors(server):
    r = httpx.post(server.base + "/completion", json={"prompt": [1, 2, 10 ** 12]})
    assert r.status_code == 400 and "prompt[2]" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/completion", json={"prompt": {"x": 1}})
    assert r.status_code == 400 and r.json()["error"]["code"] == 400


def test_disconnect_mid_stream_on_every_protocol(server):
    routes = [("/v1/messages", {"model": ID, "max_tokens": 400, "stream": True, "messages": [{"role": "user", "content": "Write a long story."}]}),
              ("/v1/responses", {"model": ID, "max_output_tokens": 400, "stream": True, "input": "Write a long story."}),
              ("/completion", {"prompt": "Once upon a time", "n_predict": 400, "stream": True})]
    for path, body in routes:
        with httpx.stream("POST", server.base + path, json=body, timeout=60) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i > 6:
                    break
    # The cancelled generations give their slots back: the server answers at once.
    running = None
    for _ in range(50):
        running = metric_value(httpx.get(server.base + "/metrics").text, "ferrox_requests_running")
        if running == 0:
            break
        threading.Event().wait(0.1)
    assert running == 0


def test_a_trailing_assistant_message_is_continued_on_every_chat_route(server, claude, oai):
    # The answer goes on from the prefill, token for token what the raw prompt gives: the
    # template's generation prompt for the conversation before it, then the prefill's text.
    prefill = "The capital of France is"
    head = [{"role": "user", "content": QUESTION}]
    convo = head + [{"role": "assistant", "content": prefill}]
    prompt = httpx.post(server.base + "/apply-template", json={"messages": head}).json()["prompt"]
    want = httpx.post(server.base + "/completion", timeout=60,
                      json={"prompt": prompt + prefill, "n_predict": 16, "temperature": 0}).json()["content"]
    assert want.strip() and not want.startswith(prefill)
    chat = httpx.post(server.base + "/v1/chat/completions", timeout=60,
                      json={"messages": convo, "max_tokens": 16, "temperature": 0}).json()
    assert chat["choices"][0]["message"]["content"] == want
    # vLLM's spelling of the same, with its rule that both flags at once are a 400.
    cont = httpx.post(server.base + "/v1/chat/completions", timeout=60, json={
        "messages": convo, "max_tokens": 16, "temperature": 0,
        "continue_final_message": True, "add_generation_prompt": False}).json()
    assert cont["choices"][0]["message"]["content"] == want
    for extra, msgs in (({"add_generation_prompt": True}, convo), ({}, head)):
        r = httpx.post(server.base + "/v1/chat/completions",
                       json={"messages": msgs, "max_tokens": 2, "continue_final_message": True, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == "continue_final_message", r.text
    # Anthropic's prefill and the Responses API.
    m = claude.messages.create(model=ID, max_tokens=16, messages=convo, extra_body=T0)
    assert m.content[0].text == want
    r = oai.responses.create(model=ID, input=convo, max_output_tokens=16, temperature=0, store=False)
    assert r.output_text == want


def test_add_generation_prompt_false_ends_the_prompt_after_the_last_message(server):
    def usage(**extra):
        return httpx.post(server.base + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, **extra}).json()["usage"]["prompt_tokens"]
    with_prompt, without = usage(), usage(add_generation_prompt=False)
    header = httpx.post(server.base + "/tokenize", json={"content": "<|im_start|>assistant\n"}).json()["tokens"]
    assert with_prompt - without == len(header)

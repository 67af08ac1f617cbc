"""A hostile client against the real binary: every malformed request gets a 4xx in its
protocol's shape, never a 5xx or a crash, and the server answers normally afterwards."""
import concurrent.futures
import copy
import http.client
import json
import socket
import struct
import threading
import time

import httpx
import pytest


def _post(server, path, body, **kw):
    return httpx.post(server.base + path, content=body, headers={"Content-Type": "application/json"},
                      timeout=30, **kw)


def _assert_alive(server):
    r = httpx.post(server.base + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/tokenize", "/apply-template"])
@pytest.mark.parametrize("shape", ["array", "object", "in_field"])
def test_deep_nesting_is_a_400_not_a_crash(server, path, shape):
    n = 80000
    if shape == "array":
        body = "[" * n + "]" * n
    elif shape == "object":
        body = '{"a":' * n + "1" + "}" * n
    else:
        body = '{"messages": [{"role": "user", "content": "x"}], "tools": ' + "[" * n + "]" * n + "}"
    r = _post(server, path, body)
    assert r.status_code == 400, r.text
    assert "nests deeper" in r.json()["error"]["message"]
    _assert_alive(server)


def test_nesting_below_the_limit_is_parsed(server):
    # 60 levels inside a tool schema is legal JSON and not refused for depth.
    deep = {"type": "object"}
    for _ in range(25):
        deep = {"type": "object", "properties": {"x": deep}}
    r = httpx.post(server.base + "/apply-template", timeout=30, json={
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": deep}}]})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("path,body,param", [
    ("/v1/completions", {"prompt": "x", "echo": None}, None),
    ("/v1/completions", {"prompt": "x", "echo": 3}, "echo"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": None, "text": "x"}]}]}, None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": 7, "text": "x"}]}]}, None),
    ("/apply-template", {"messages": [{"role": "user", "content": [{"type": None}]}]}, None),
])
def test_wrong_types_are_400s(server, path, body, param):
    r = httpx.post(server.base + path, json=dict(body, max_tokens=2), timeout=60)
    if body.get("echo", 0) is None:  # null counts as absent
        assert r.status_code == 200, r.text
        return
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["message"]
    if param:
        assert err["param"] == param
    _assert_alive(server)


# ---------------------------------------------------------------------------------------------
# The field matrix: for each route a valid base body; every field the route reads (nested ones
# too) takes each hostile value in turn. Run against the scripted server (the real binary, its
# HTTP layer, router, adapters, templates and tokenizer, with a stand-in model that answers in
# microseconds) so thousands of cases fit in seconds; the sampling fields also run against the
# real model below.

ID = "SmolLM2-135M-Instruct.Q4_1"
RAW_UTF8 = "@@invalid-utf8@@"          # replaced by the raw bytes "\xff\xfe" in the body
BIG = ("hello " * 180000)[:1 << 20]   # a 1 MB string
DEEP = []
for _ in range(99):
    DEEP = [DEEP]                      # 100 levels of arrays
VALUES = [("null", None), ("true", True), ("0", 0), ("-1", -1), ("1e308", 1e308), ("2**64", 2 ** 64),
          ("-2**63-1", -2 ** 63 - 1), ('""', ""), ('"x"', "x"), ("[]", []), ("{}", {}), ("deep100", DEEP),
          ("bad-utf8", RAW_UTF8), ("1MB", BIG)]
# Number literals Python's json cannot write: substituted as text for numeric fields.
RAW_NUMBERS = ["1e400", "1" + "0" * 4000, "1.5", "9223372036854775808.0"]
RAW_MARK = "@@raw-number@@"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SAMPLING = {"temperature": 0.5, "top_p": 0.9, "min_p": 0.05, "top_k": 40, "presence_penalty": 0.1,
            "frequency_penalty": 0.1, "repetition_penalty": 1.05, "repeat_penalty": 1.05, "repeat_last_n": 64,
            "seed": 7, "ignore_eos": False, "cache_prompt": True}

OPENAI_CONVERSATION = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}], "name": "bob"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": ""}], "reasoning": "Call the tool.",
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"},
        {"role": "developer", "content": [{"type": "input_text", "text": "Answer in English."}]},
        {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                "parameters": SCHEMA}}],
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "parallel_tool_calls": True,
    "chat_template_kwargs": {"enable_thinking": False},
}
# Fields a route reads that the base leaves out (each is added by the substitution).
OPENAI_CONVERSATION_EXTRA = [("messages", 2, "reasoning_content"), ("messages", 3, "name"), ("messages", 0, "name")]

CHAT = dict(OPENAI_CONVERSATION, model=ID, max_tokens=2, max_completion_tokens=2, n_predict=2, n=1, stream=False,
            stream_options={"include_usage": True}, stop=["\n\n", "END"], logprobs=True, top_logprobs=1, user="u",
            logit_bias={"1": 0}, **SAMPLING)

COMPLETIONS = dict(model=ID, prompt="The capital of France is", max_tokens=2, n_predict=2, n=1, stream=False,
                   stream_options={"include_usage": True}, stop=["\n"], logprobs=1, echo=False, user="u",
                   logit_bias={"1": 0}, **SAMPLING)

RESPONSES = dict(
    model=ID, instructions="Be brief.", stream=False, store=False, max_output_tokens=2, metadata={"k": "v"},
    input=[
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "ctx"}]},
        {"type": "message", "role": "user", "content": "What is the weather in Paris?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}],
         "content": [{"type": "reasoning_text", "text": "t"}], "encrypted_content": "opaque"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "22 degrees"},
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "It is 22."}, {"type": "refusal", "refusal": "no"}]},
        {"type": "item_reference", "id": "msg_x"},
        {"type": "message", "role": "user", "content": "thanks"}],
    tools=[{"type": "function", "name": "get_weather", "description": "d", "parameters": SCHEMA},
           {"type": "custom", "name": "apply_patch", "description": "patch"}, {"type": "web_search"}],
    tool_choice={"type": "function", "name": "get_weather"}, parallel_tool_calls=True, reasoning={"effort": "low"},
    **SAMPLING)

MESSAGES = dict(
    model=ID, max_tokens=2, stop_sequences=["\n\n"], stream=False, metadata={"user_id": "u"},
    system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"}, {"type": "redacted_thinking", "data": "abc"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "22"}]},
            {"type": "text", "text": "Thanks"}]},
        {"role": "assistant", "content": "You are welcome."},
        {"role": "user", "content": "Bye"}],
    tools=[{"name": "get_weather", "description": "d", "input_schema": SCHEMA},
           {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
    tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": False},
    thinking={"type": "enabled", "budget_tokens": 1024},
    **{k: v for k, v in SAMPLING.items() if k != "temperature"}, temperature=0.5)

COMPLETION = dict(model=ID, prompt="The capital of France is", n_predict=2, max_tokens=2, n_probs=1, id_slot=-1,
                  stop=["\n"], stream=False, return_tokens=True, logit_bias=[[1, 0]], **SAMPLING)

# (name, path, base, extra paths, paths: exact ones, None for every path of the base, or a number
# for those up to that depth)
ROUTES = [
    ("chat", "/v1/chat/completions", CHAT, OPENAI_CONVERSATION_EXTRA, None),
    ("chat-string-choice", "/v1/chat/completions", dict(CHAT, tool_choice="required", stream=True), [],
     [("tool_choice",), ("stream",), ("stream_options", "include_usage"), ("logprobs",)]),
    ("completions", "/v1/completions", COMPLETIONS, [], None),
    ("completions-ids", "/v1/completions", dict(COMPLETIONS, prompt=[[1, 2, 3]], stream=True), [],
     [("prompt", 0), ("prompt", 0, 1), ("stream",), ("logprobs",)]),
    ("responses", "/v1/responses", RESPONSES, [("previous_response_id",)], None),
    ("responses-string-input", "/v1/responses", dict(RESPONSES, input="Hi", tool_choice="auto", stream=True), [],
     [("input",), ("tool_choice",), ("stream",), ("store",)]),
    ("messages", "/v1/messages", MESSAGES, [], None),
    ("messages-strings", "/v1/messages", dict(MESSAGES, system="Be brief.", stream=True), [],
     [("system",), ("stream",), ("messages", 3, "content"), ("messages", 4, "role")]),
    # Same parser as /v1/messages (and /apply-template as chat): the nested fields once, there.
    ("count_tokens", "/v1/messages/count_tokens", {k: v for k, v in MESSAGES.items() if k != "max_tokens"},
     [("max_tokens",)], 1),
    ("completion", "/completion", COMPLETION, [], None),
    ("completion-mixed", "/completion", dict(COMPLETION, prompt=[1, "text", 2], logit_bias={"1": False}, stream=True),
     [], [("prompt", 0), ("prompt", 1), ("prompt", 2), ("logit_bias", "1"), ("stream",)]),
    ("tokenize", "/tokenize", dict(model=ID, content="Hello world", add_special=True, parse_special=True,
                                   with_pieces=True), [], None),
    ("detokenize", "/detokenize", dict(model=ID, tokens=[1, 2, 3]), [], None),
    ("apply-template", "/apply-template", dict(OPENAI_CONVERSATION, model=ID), [], 1),
]
OPAQUE = {"parameters", "input_schema", "chat_template_kwargs", "metadata", "cache_control"}  # passed through


def protocol_of(path):
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.split("?")[0] in ("/completion", "/tokenize", "/detokenize", "/apply-template", "/health", "/props",
                              "/metrics"):
        return "llamacpp"
    return "openai"


def shape_error(path, status, body):
    """Why `body` is not a 4xx error in the route's protocol shape, or None."""
    try:
        j = json.loads(body)
    except ValueError:
        return f"error body is not JSON: {body[:200]!r}"
    proto = protocol_of(path)
    err = j.get("error") if isinstance(j, dict) else None
    if not isinstance(err, dict) or not isinstance(err.get("message"), str) or not err["message"]:
        return f"no error.message: {body[:200]!r}"
    if proto == "anthropic" and (j.get("type") != "error" or not isinstance(err.get("type"), str)):
        return f"not Anthropic-shaped: {body[:200]!r}"
    if proto == "llamacpp" and (err.get("code") != status or not isinstance(err.get("type"), str)):
        return f"not llama.cpp-shaped: {body[:200]!r}"
    if proto == "openai" and not isinstance(err.get("type"), str):
        return f"not OpenAI-shaped: {body[:200]!r}"
    return None


def sse_error(text):
    events = [e for e in text.replace("\r\n", "\n").split("\n\n") if e.strip()]
    if not events:
        return "empty stream"
    n_data = 0
    for e in events:
        for line in e.split("\n"):
            if line.startswith(":") or line.startswith("event: "):
                continue
            if not line.startswith("data: "):
                return f"not an SSE line: {line[:200]!r}"
            n_data += 1
            if line[6:] != "[DONE]":
                try:
                    json.loads(line[6:])
                except ValueError:
                    return f"SSE data is not JSON: {line[:200]!r}"
    return None if n_data else "no data events"


def answer_error(path, r, status=None, content_type=None, body=None):
    """Why the answer (an httpx response, or its parts) to a hostile request is wrong, or None."""
    if r is not None:
        status, content_type, body = r.status_code, r.headers.get("content-type", ""), r.content
    if status >= 500:
        return f"{status}: {body[:300]!r}"
    if 400 <= status < 500:
        return shape_error(path, status, body)
    if status != 200:
        return f"unexpected status {status}"
    if content_type.startswith("text/event-stream"):
        return sse_error(body.decode("utf-8", "replace"))
    try:
        json.loads(body)
    except ValueError:
        return f"200 body is not JSON: {body[:200]!r}"
    return None


def all_paths(v, prefix=(), depth=99):
    yield prefix
    if len(prefix) >= depth:
        return
    if isinstance(v, dict):
        for k, x in v.items():
            if k in OPAQUE:
                yield prefix + (k,)
            else:
                yield from all_paths(x, prefix + (k,), depth)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from all_paths(x, prefix + (i,), depth)


def substituted(base, path, value):
    """`base` with `value` at `path`; only the containers along the path are copied."""
    if not path:
        return value
    top = copy.copy(base)
    node = top
    for k in path[:-1]:
        node[k] = copy.copy(node[k])
        node = node[k]
    node[path[-1]] = value
    return top


def value_at(base, path):
    node = base
    for k in path:
        try:
            node = node[k]
        except (KeyError, IndexError, TypeError):
            return None
    return node


MARK = "@@hostile-value@@"
ENCODED = [(name, b'"\xff\xfe"' if v is RAW_UTF8 else json.dumps(v).encode()) for name, v in VALUES]
ENCODED_NUMBERS = [(lit[:12], lit.encode()) for lit in RAW_NUMBERS]


def encode(body):
    return json.dumps(body).encode().replace(b'"' + RAW_UTF8.encode() + b'"', b'"\xff\xfe"')


def cases_for(base, extra, paths):
    if paths is None or isinstance(paths, int):
        paths = list(all_paths(base, depth=paths or 99)) + list(extra)
    for p in paths:
        pre, _, post = json.dumps(substituted(base, p, MARK)).encode().partition(b'"' + MARK.encode() + b'"')
        old = value_at(base, p)
        numeric = isinstance(old, (int, float))  # bools too
        for name, v in ENCODED + (ENCODED_NUMBERS if numeric else []):
            yield p, name, pre + v + post


def run_cases(server, path, cases, workers=4):
    """Sends every case over keep-alive connections (http.client: a fraction of httpx's cost per
    request); returns (number of cases, failures)."""
    local = threading.local()

    def post(body):
        for attempt in (0, 1):
            conn = getattr(local, "conn", None)
            if conn is None:
                conn = local.conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            try:
                conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                if r.will_close:
                    conn.close()
                    local.conn = None
                return r.status, r.getheader("content-type", ""), data
            except (http.client.HTTPException, OSError):
                conn.close()
                local.conn = None
                if attempt:  # a fresh connection failed too
                    raise

    def one(case):
        fpath, name, body = case
        try:
            status, ctype, data = post(body)
        except (http.client.HTTPException, OSError) as e:
            return f"{path} {fpath}={name}: transport error {e!r}"
        why = answer_error(path, None, status, ctype, data)
        if why is None and name in ("bad-utf8", "deep100") and status != 400:
            why = f"expected 400, got {status}"
        return None if why is None else f"{path} {fpath}={name}: {why}"

    n, failures = 0, []
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for res in pool.map(one, cases):
            n += 1
            if res:
                failures.append(res)
    assert server.proc.poll() is None, "the server crashed:\n" + "\n".join(failures[:5])
    return n, failures


def _assert_up(server):
    """Cheap: the process lives and answers (the full check with a generation is _assert_serving)."""
    assert server.proc.poll() is None, "the server crashed"
    assert httpx.post(server.base + "/tokenize", json={"content": "hi"}, timeout=30).status_code == 200


def _assert_serving(server):
    assert server.proc.poll() is None, "the server crashed"
    r = httpx.post(server.base + "/v1/chat/completions", timeout=60,
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] is not None


@pytest.mark.parametrize("name,path,base,extra,paths", ROUTES, ids=[r[0] for r in ROUTES])
def test_every_field_takes_every_hostile_value(scripted_server, name, path, base, extra, paths):
    # The base itself is a normal request.
    r = httpx.post(scripted_server.base + path, content=encode(base), timeout=60)
    assert r.status_code == 200 and answer_error(path, r) is None, r.text
    n, failures = run_cases(scripted_server, path, cases_for(base, extra, paths))
    assert not failures, f"{len(failures)} of {n} cases failed:\n" + "\n".join(failures[:30])
    _assert_serving(scripted_server)


def test_sampling_fields_on_the_real_model(server):
    path = "/completion"  # read_sampling and read_logit_bias are shared by every generating route
    # The sampler is the stand-in model's business on the scripted server: the real one here.
    base = dict(prompt="The capital of France is", n_predict=2, max_tokens=2, logit_bias={"1": 0}, **SAMPLING)
    n, failures = run_cases(server, path, cases_for(base, [], [(k,) for k in SAMPLING] + [("logit_bias", "1")]))
    assert not failures, f"{len(failures)} of {n} cases failed:\n" + "\n".join(failures[:30])
    _assert_serving(server)


def test_tool_arguments_hiding_deep_json_in_a_string(scripted_server):
    # The body's depth check cannot see inside strings, and the prompt builder parses call
    # arguments and copies them recursively: 100,000 '[' in an arguments string crashed the
    # server (SIGSEGV). Now a 400; 30 levels are still accepted.
    deep = '{"a": ' + "[" * 100000 + "]" * 100000 + "}"
    fine = '{"a": ' + "[" * 30 + "]" * 30 + "}"
    conv = dict(OPENAI_CONVERSATION, model=ID)
    chat_args = ("messages", 2, "tool_calls", 0, "function", "arguments")
    for args, status in ((deep, 400), (fine, 200)):
        for path, body in (("/v1/chat/completions", substituted(CHAT, chat_args, args)),
                           ("/apply-template", substituted(conv, chat_args, args)),
                           ("/v1/responses", substituted(RESPONSES, ("input", 3, "arguments"), args))):
            r = httpx.post(scripted_server.base + path, content=encode(body), timeout=60)
            assert r.status_code == status and answer_error(path, r) is None, f"{path}: {r.status_code} {r.text[:300]}"
            if status == 400:
                assert "arguments" in r.json()["error"]["message"]
    # A custom tool's input is plain text, whatever it looks like.
    r = httpx.post(scripted_server.base + "/v1/responses", timeout=60,
                   content=encode(substituted(RESPONSES, ("input", 5, "input"), deep)))
    assert r.status_code == 200, r.text[:300]
    _assert_serving(scripted_server)


JSON_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
               "/v1/messages/count_tokens", "/completion", "/tokenize", "/detokenize", "/apply-template"]
MALFORMED = [b"", b" ", b"{", b"}", b"[", b"{not json", b'{"a":}', b'{"a" 1}', b'{"a":1,}', b"{'a':1}",
             b'{"a":NaN}', b'{"a":Infinity}', b'{"a":-Infinity}', b'{"a":1} trailing', b'{"a":1}{"b":2}',
             b'{"a":"\\x"}', b'{"a":"\\u12"}', b'{"a":"\\ud800"}', b'{"a":"\\udc00\\ud800"}', b'{"a":"\x01"}',
             b'{"a":"tab\there"}', b"\x00", b'{"a":1}\x00', b'{"a":01}', b'{"a":.5}', b'{"a":-}', b'{"a":1e}',
             b'{"a":tru}', b'{"a":nul}', b'{"\xff":1}', b'{"a":"\xc0\x80"}', b'{"a":"\xed\xa0\x80"}',
             b'{"a":"\xf4\x90\x80\x80"}', b'\xef\xbb\xbf{}', b'\xfe\xff\x00{\x00}', b"[1,2]", b'"str"', b"123",
             b"null", b"true", b"{}", b'{"a":' + b"1" * 100000 + b"}", b'{"a":1e99999}', b'{"' + b"k" * 100000 + b'":1}',
             b'{"a":"' + b"\\" * 99999 + b'"}', b'{"messages":[', b'{"messages":[{"role":"user","content":"x"}]',
             b"[" * 65 + b"]" * 65, b"[" * 64 + b"]" * 64, b'{"a":' * 64 + b"1" + b"}" * 64,
             b'{"a":"' + b"[" * 1000 + b'"}', b"]" * 1000 + b"[" * 10, b"\n" * 10000, b"{" + b" " * 100000 + b"}"]


@pytest.mark.parametrize("path", JSON_ROUTES)
def test_malformed_json_of_every_kind(server, path):
    failures = []
    with httpx.Client(base_url=server.base, timeout=60) as c:
        for body in MALFORMED:
            r = c.post(path, content=body, headers={"Content-Type": "application/json"})
            why = answer_error(path, r)
            if why is None and r.status_code != 400:
                why = f"expected 400, got {r.status_code}"
            if why:
                failures.append(f"{body[:40]!r}: {why}")
    assert not failures, "\n".join(failures)
    _assert_up(server)


def test_hostile_ids_methods_and_queries(server):
    failures = []
    paths = ["/v1/responses/" + "a" * 8000, "/v1/responses/%ff%fe", "/v1/responses/%00", "/v1/responses/..%2f..",
             "/v1/responses/resp_nope/input_items", "/v1/responses/resp_nope/cancel", "/v1/models?x=%ff&x=1",
             "/v1/models/" + "x" * 100, "/v1//models", "/%ff", "/" + "a/" * 2000]
    with httpx.Client(base_url=server.base, timeout=30) as c:
        for p in paths:
            for method in ("GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "FOO"):
                r = c.request(method, p, content=b"\xff{", headers={"anthropic-version": "\x7f" * 3})
                why = answer_error(p, r)
                if why:
                    failures.append(f"{method} {p[:60]}: {why}")
        for p in JSON_ROUTES + ["/v1/models", "/v1/responses/x", "/health", "/props", "/metrics"]:
            for method in ("GET", "PUT", "DELETE", "PATCH", "FOO"):
                r = c.request(method, p)
                if r.status_code >= 500 or (r.status_code >= 400 and shape_error(p, r.status_code, r.content)):
                    failures.append(f"{method} {p}: {r.status_code} {r.text[:200]}")
        r = c.get("/v1/models", headers={"anthropic-version": "2023-06-01"})
        assert r.status_code == 200 and r.json()["data"][0]["type"] == "model"
    assert not failures, "\n".join(failures)
    _assert_serving(server)


# ---------------------------------------------------------------------------------------------
# HTTP framing, over raw sockets. The header timeout is 10 s by default and ferrox serve has no
# flag for it, so the clients here that stall only stall for a moment (a test of a client that
# never finishes its header would need a shorter --header-timeout).

def _connect(server, timeout=15):
    s = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_all(s):
    """Everything until the server closes, and whether it did."""
    data = b""
    try:
        while True:
            chunk = s.recv(1 << 16)
            if not chunk:
                return data, True
            data += chunk
    except socket.timeout:
        return data, False
    except ConnectionResetError:
        return data, True


def _parse_responses(data):
    """[(status, headers, body)] of the HTTP/1.1 responses in `data` (Content-Length or chunked)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, f"truncated response head: {data[:200]!r}"
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status == 100:
            data = rest
            continue
        if "content-length" in headers:
            n = int(headers["content-length"])
            assert len(rest) >= n, f"truncated body: {len(rest)} of {n} bytes"
            body, data = rest[:n], rest[n:]
        elif headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    _, _, rest = rest.partition(b"\r\n")
                    break
                body += rest[:size]
                rest = rest[size + 2:]
            data = rest
        else:
            body, data = rest, b""
        out.append((status, headers, body))
    return out


def _exchange(server, data, shutdown_wr=False):
    with _connect(server) as s:
        try:
            s.sendall(data)
            if shutdown_wr:
                s.shutdown(socket.SHUT_WR)
        except (BrokenPipeError, ConnectionResetError):
            pass
        raw, closed = _read_all(s)
    return _parse_responses(raw), closed


def _post_bytes(path, body, *headers):
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    return (head + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + body


CHAT_BODY = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}).encode()


@pytest.mark.parametrize("name,data,path,status,closes", [
    ("oversized header", b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
     "/v1/models", 431, True),
    ("many header fields", b"GET /props HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(9000))
     + b"\r\n", "/props", 431, True),
    ("oversized request line", b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", None, 431, True),
    ("chunk size not hex", _post_bytes("/completion", b"zz\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
     "/completion", 400, True),
    ("chunk size overflow", _post_bytes("/completion", b"fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n",
                                        "Transfer-Encoding: chunked"), "/completion", None, True),
    ("chunk without CRLF", _post_bytes("/v1/messages", b"3\r\nabcXY0\r\n\r\n", "Transfer-Encoding: chunked"),
     "/v1/messages", 400, True),
    ("negative chunk size", _post_bytes("/tokenize", b"-1\r\na\r\n0\r\n\r\n", "Transfer-Encoding: chunked"),
     "/tokenize", 400, True),
    ("transfer-encoding gzip", _post_bytes("/v1/chat/completions", b"abc", "Transfer-Encoding: gzip"),
     "/v1/chat/completions", 400, True),
    ("transfer-encoding gzip, chunked", _post_bytes("/v1/chat/completions", b"3\r\nabc\r\n0\r\n\r\n",
                                                    "Transfer-Encoding: gzip, chunked"),
     "/v1/chat/completions", 400, True),
    ("content-length and transfer-encoding", _post_bytes("/v1/messages", b"3\r\nabc\r\n0\r\n\r\n", "Content-Length: 5",
                                                         "Transfer-Encoding: chunked"), "/v1/messages", 400, True),
    ("two content-lengths", _post_bytes("/v1/completions", b"{}xyz", "Content-Length: 2", "Content-Length: 5"),
     "/v1/completions", 400, True),
    ("content-length not a number", _post_bytes("/v1/completions", b"{}", "Content-Length: abc"),
     "/v1/completions", 400, True),
    ("negative content-length", _post_bytes("/v1/completions", b"{}", "Content-Length: -1"), "/v1/completions", 400, True),
    ("huge content-length", _post_bytes("/v1/completions", b"{}", "Content-Length: 99999999999999999999999"),
     "/v1/completions", None, True),
    ("body over the limit", _post_bytes("/v1/completions", b"{}", "Content-Length: 100000000"),
     "/v1/completions", 413, True),
    ("request line garbage", b"GARBAGE\r\n\r\n", None, 400, True),
    ("request line without version", b"GET /health\r\n\r\n", None, 400, True),
    ("request line with extra words", b"GET /health HTTP/1.1 extra\r\nHost: x\r\n\r\n", None, 400, True),
    ("binary request line", b"\x00\xff\xfe\x16\x03\x01\r\n\r\n", None, 400, True),
    ("unknown protocol", b"GET /health FOO/1.1\r\nHost: x\r\n\r\n", None, 400, True),
    ("control byte in target", b"GET /he\x7fal\x01th HTTP/1.1\r\nHost: x\r\n\r\n", None, 400, True),
    ("header without colon", b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n", None, 400, True),
    ("header name with space", b"GET /health HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", None, 400, True),
    ("bare LF line ends", b"GET /health HTTP/1.1\nHost: x\n\n", None, None, None),
    ("TLS hello", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100, None, 400, True),
])
def test_bad_framing_is_a_4xx(server, name, data, path, status, closes):
    responses, closed = _exchange(server, data)
    assert responses, f"{name}: no answer"
    got, headers, body = responses[0]
    assert got < 500, f"{name}: {got} {body[:200]!r}"
    if status is not None:
        assert got == status, f"{name}: {got} {body[:200]!r}"
    if closes:
        assert closed, f"{name}: the connection stays open"
    if path is not None and got >= 400:
        assert shape_error(path, got, body) is None, f"{name}: {shape_error(path, got, body)}"
    _assert_up(server)


def test_chunked_body_is_served(server):
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (CHAT_BODY[:7], CHAT_BODY[7:])) + b"0\r\n\r\n"
    [(status, _, body)], _ = _exchange(server, _post_bytes("/v1/chat/completions", chunks,
                                                           "Transfer-Encoding: chunked", "Connection: close"))
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] is not None


def test_half_closed_client_gets_its_full_answer(server):
    data = _post_bytes("/v1/chat/completions", CHAT_BODY, f"Content-Length: {len(CHAT_BODY)}")
    responses, closed = _exchange(server, data, shutdown_wr=True)
    assert closed and len(responses) == 1
    status, headers, body = responses[0]
    assert status == 200 and int(headers["content-length"]) == len(body)
    assert json.loads(body)["object"] == "chat.completion"
    # Pipelined requests, then the half-close: both answered, in order.
    two = _post_bytes("/tokenize", b'{"content":"a"}', "Content-Length: 15") + \
        _post_bytes("/detokenize", b'{"tokens":[1]}', "Content-Length: 14")
    responses, closed = _exchange(server, two, shutdown_wr=True)
    assert closed and [r[0] for r in responses] == [200, 200]
    assert "tokens" in json.loads(responses[0][2]) and "content" in json.loads(responses[1][2])


def test_slow_client_sending_byte_by_byte_is_served(server):
    data = _post_bytes("/v1/chat/completions", CHAT_BODY, f"Content-Length: {len(CHAT_BODY)}", "Connection: close")
    start = time.time()
    with _connect(server) as s:
        for i in range(len(data)):
            s.send(data[i:i + 1])
            time.sleep(0.005)  # ~1.5 s in all, well within the 10 s header timeout
        raw, closed = _read_all(s)
    assert time.time() - start < 9
    [(status, _, body)] = _parse_responses(raw)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] is not None


def test_half_open_and_vanishing_clients(server):
    socks = []
    for i in range(40):
        s = _connect(server)
        part = [b"", b"GET /hea", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"me",
                b"POST /completion HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"][i % 4]
        if part:
            s.sendall(part)
        socks.append(s)
    # Half of them go away abruptly (RST), half with a FIN; the server answers others meanwhile.
    _assert_serving(server)
    for i, s in enumerate(socks):
        if i % 2:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    # A client that sends a full request and disconnects before the answer.
    with _connect(server) as s:
        s.sendall(_post_bytes("/v1/chat/completions", CHAT_BODY, f"Content-Length: {len(CHAT_BODY)}"))
    _assert_serving(server)


def test_still_serving_after_everything(server, scripted_server):
    for s in (server, scripted_server):
        _assert_serving(s)
        assert s.proc.poll() is None


def _metric(server, name):
    from conftest import metric_value
    return metric_value(httpx.get(server.base + "/metrics", timeout=10).text, name)


@pytest.mark.parametrize("path,body", [
    ("/v1/messages", {"max_tokens": 50, "stream": True,
                      "messages": [{"role": "user", "content": "Hi"}]}),
    ("/v1/chat/completions", {"max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}),
])
def test_stream_closed_while_queued_is_cancelled_at_once(tiny_queue_server, path, body):
    """Issue #19's soak finding: a streaming client that closes its socket while its request
    waits for the only slot frees its queue place at once (the server probes an event stream
    after a FIN), not when the slot frees and its first tokens are written."""
    server = tiny_queue_server
    long_body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 400,
                 "ignore_eos": True, "stream": True}
    with httpx.stream("POST", server.base + "/v1/chat/completions", json=long_body, timeout=60) as a:
        assert a.status_code == 200
        lines = a.iter_lines()
        next(line for line in lines if line.startswith("data:"))  # A holds the slot and streams
        with _connect(server) as s:
            model = httpx.get(server.base + "/v1/models", timeout=10).json()["data"][0]["id"]
            data = json.dumps(dict(body, model=model)).encode()
            s.sendall(_post_bytes(path, data, f"Content-Length: {len(data)}"))
            deadline = time.time() + 10
            while _metric(server, "ferrox_requests_waiting") < 1:
                assert time.time() < deadline, "the second request never queued"
                time.sleep(0.05)
            # Read what was sent (headers, message_start) so that the close is a FIN, not a
            # reset for unread data (which the server notices without any probe).
            s.settimeout(0.5)
            try:
                while s.recv(1 << 16):
                    pass
            except socket.timeout:
                pass
        # Closed (FIN, then the socket is gone): the queue place is given back within a second
        # or two, while A still runs.
        start = time.time()
        while _metric(server, "ferrox_requests_waiting") > 0:
            assert time.time() - start < 3, "the closed client's request is still queued"
            time.sleep(0.05)
        assert _metric(server, "ferrox_requests_running") == 1
    # A's stream closed: the server is idle again and serves a new request.
    deadline = time.time() + 10
    while _metric(server, "ferrox_requests_running") > 0:
        assert time.time() < deadline
        time.sleep(0.05)
    r = httpx.post(server.base + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}, timeout=60)
    assert r.status_code == 200

#!/usr/bin/env python3
"""Writes tests/server/fuzz_corpus/, the seeds of http_fuzz.cc (run from anywhere).

Two kinds of seed (see http_fuzz.cc):
- raw HTTP (the bytes a client sends): one request for every route, with the bodies and
  headers the official clients send (openai-python, anthropic-python, llama.cpp's web UI),
  plus chunked bodies, pipelined requests, HTTP/1.0, HEAD, CORS preflight and hostile ones;
- JSON-body mode: byte 0 < 0x20 picks the route (its index in kJsonRoutes), the rest is the
  body of a well-formed POST to it.

A seed's name says what the replay test (http_fuzz_replay_test.cc) expects of it:
NAME.2xx-N: N final responses (1xx ones aside), all 2xx; NAME.4xx-N: the same, all 4xx. Files named crash-* or
regress-* are inputs the fuzzer found (no expectation beyond the fuzz target's own checks);
this script leaves them alone.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fuzz_corpus")

# The order of kJsonRoutes in http_fuzz.cc.
JSON_ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
               "/v1/messages/count_tokens", "/completion", "/tokenize", "/detokenize",
               "/apply-template"]

OPENAI_HEADERS = [
    ("Accept", "application/json"),
    ("User-Agent", "OpenAI/Python 1.51.0"),
    ("X-Stainless-Lang", "python"),
    ("X-Stainless-Package-Version", "1.51.0"),
    ("Authorization", "Bearer sk-no-key-required"),
]
ANTHROPIC_HEADERS = [
    ("Accept", "application/json"),
    ("User-Agent", "Anthropic/Python 0.39.0"),
    ("anthropic-version", "2023-06-01"),
    ("x-api-key", "sk-ant-no-key"),
]
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"},
                           "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}

BODIES = {
    "chat": {"model": "tiny", "messages": [{"role": "system", "content": "You are helpful."},
                                           {"role": "user", "content": "Say hello."}],
             "max_tokens": 8, "temperature": 0},
    "chat-stream-tools": {
        "model": "tiny", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
        "tools": [WEATHER_TOOL], "tool_choice": "auto", "max_tokens": 64},
    "chat-n2-logprobs": {
        "model": "tiny", "n": 2, "logprobs": True, "top_logprobs": 2, "seed": 7,
        "temperature": 0.8, "top_p": 0.9, "stop": ["\n\n"], "presence_penalty": 0.5,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "think first: 2+2?"}]}]},
    "chat-tool-result": {
        "model": "tiny",
        "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "22 degrees"}],
        "tools": [WEATHER_TOOL], "parallel_tool_calls": False},
    "completions": {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 8,
                    "logprobs": 2, "echo": False},
    "completions-stream": {"model": "tiny", "prompt": "The capital of France is",
                           "max_tokens": 6, "stream": True, "suffix": None},
    "responses": {"model": "tiny", "input": "Tell me about the weather in Paris",
                  "instructions": "Be brief.", "store": True,
                  "tools": [{"type": "function", "name": "get_weather",
                             "parameters": WEATHER_TOOL["function"]["parameters"]}]},
    "responses-stream": {
        "model": "tiny", "stream": True, "max_output_tokens": 16,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "think first"}]}],
        "reasoning": {"effort": "low"}},
    "messages": {"model": "tiny", "max_tokens": 16, "system": "Be brief.",
                 "messages": [{"role": "user", "content": "think first: 2+2?"}]},
    "messages-stream-tools": {
        "model": "tiny", "max_tokens": 64, "stream": True,
        "tools": [{"name": "get_weather", "description": "Weather in a city",
                   "input_schema": WEATHER_TOOL["function"]["parameters"]}],
        "messages": [
            {"role": "user", "content": "Weather in two cities?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "22 degrees"}]}]},
    "count-tokens": {"model": "tiny", "system": "Be brief.",
                     "messages": [{"role": "user", "content": "Hello, world"}]},
    "completion": {"prompt": "Hello", "n_predict": 8, "temperature": 0, "cache_prompt": True},
    "completion-stream": {"prompt": "Building a website can be done in 10 steps:",
                          "n_predict": 12, "stream": True, "stop": ["\n"], "n_probs": 2},
    "tokenize": {"content": "Hello world, é 🦙", "add_special": True, "with_pieces": True},
    "detokenize": {"tokens": [15496, 995, 11, 1312]},
    "apply-template": {"messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Hi"}]},
}
ROUTE_OF = {
    "chat": 0, "chat-stream-tools": 0, "chat-n2-logprobs": 0, "chat-tool-result": 0,
    "completions": 1, "completions-stream": 1, "responses": 2, "responses-stream": 2,
    "messages": 3, "messages-stream-tools": 3, "count-tokens": 4, "completion": 5,
    "completion-stream": 5, "tokenize": 6, "detokenize": 7, "apply-template": 8,
}


def request(method, path, body=b"", headers=(), version="HTTP/1.1", length=True):
    lines = [f"{method} {path} {version}", "Host: 127.0.0.1:8080"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body or (length and method == "POST"):
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def body_bytes(name):
    return json.dumps(BODIES[name], ensure_ascii=False).encode()


def headers_for(path):
    return ANTHROPIC_HEADERS if path.startswith("/v1/messages") else OPENAI_HEADERS


def chunked(path, body, n_parts=3):
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode()
    step = max(1, len(body) // n_parts)
    parts = [body[i:i + step] for i in range(0, len(body), step)]
    out = head
    for i, p in enumerate(parts):
        ext = ";ext=1" if i == 1 else ""
        out += f"{len(p):x}{ext}\r\n".encode() + p + b"\r\n"
    return out + b"0\r\nX-Trailer: done\r\n\r\n"


def seeds():
    s = {}
    for name, i_route in ROUTE_OF.items():
        path = JSON_ROUTES[i_route]
        s[f"raw-{name}.2xx-1"] = request("POST", path, body_bytes(name), headers_for(path))
        s[f"json-{name}.2xx-1"] = bytes([i_route]) + body_bytes(name)
    for path in ["/v1/models", "/models", "/props", "/health", "/health/ready", "/metrics"]:
        s[f"raw-get{path.replace('/', '-')}.2xx-1"] = request("GET", path, headers=OPENAI_HEADERS)
    s["raw-head-v1-models.2xx-1"] = request("HEAD", "/v1/models")
    s["raw-options-cors.2xx-1"] = request("OPTIONS", "/v1/chat/completions", headers=[
        ("Origin", "https://example.com"), ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", "authorization, content-type")])
    s["raw-chunked-chat.2xx-1"] = chunked("/v1/chat/completions", body_bytes("chat-stream-tools"))
    s["raw-chunked-messages.2xx-1"] = chunked("/v1/messages", body_bytes("messages"))
    s["raw-pipelined-3.2xx-3"] = (request("GET", "/health") +
                                  request("POST", "/tokenize", body_bytes("tokenize")) +
                                  request("GET", "/v1/models"))
    s["raw-pipelined-stream-then-chunked.2xx-2"] = (
        request("POST", "/v1/chat/completions", body_bytes("chat-stream-tools")) +
        chunked("/v1/completions", body_bytes("completions"), 2))
    s["raw-http10-stream.2xx-1"] = request("POST", "/v1/chat/completions",
                                           body_bytes("chat-stream-tools"), version="HTTP/1.0")
    s["raw-expect-continue.2xx-1"] = request("POST", "/apply-template", body_bytes("apply-template"),
                                             [("Expect", "100-continue")])
    # Hostile ones: each must be a 4xx, never a 5xx.
    s["raw-bad-json.4xx-1"] = request("POST", "/v1/chat/completions", b'{"messages": [{"role": "user",')
    s["raw-deep-json.4xx-1"] = request("POST", "/v1/completions", b"[" * 100 + b"]" * 100)
    s["raw-cl-and-te.4xx-1"] = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                                b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    s["raw-unknown-route.4xx-1"] = request("GET", "/v2/nothing")
    s["raw-wrong-method.4xx-1"] = request("DELETE", "/v1/chat/completions")
    # (One chat model: a name it does not have is served by it, as llama-server does.)
    s["raw-other-model-name.2xx-1"] = request("POST", "/v1/chat/completions", json.dumps(
        {"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}).encode())
    s["raw-wrong-type.4xx-1"] = request("POST", "/v1/chat/completions", json.dumps(
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "eight"}).encode())
    s["raw-bad-token-id.4xx-1"] = request("POST", "/detokenize", b'{"tokens": [1, -5, 99999999]}')
    s["raw-completions-prompt-list.2xx-1"] = request("POST", "/v1/completions", json.dumps(
        {"model": "tiny", "prompt": ["a", "b"], "max_tokens": 4}).encode())
    s["raw-completions-prompt-list-empty.4xx-1"] = request("POST", "/v1/completions", json.dumps(
        {"model": "tiny", "prompt": [], "max_tokens": 4}).encode())
    s["raw-garbage.4xx-1"] = b"GET / HTTP/1.1\r\nHost x\r\n\r\n"
    return s


def main():
    os.makedirs(OUT, exist_ok=True)
    for name in os.listdir(OUT):
        if not name.startswith(("crash-", "regress-")):
            os.remove(os.path.join(OUT, name))
    all_seeds = seeds()
    for name, data in sorted(all_seeds.items()):
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(all_seeds)} seeds to {OUT}")


if __name__ == "__main__":
    main()

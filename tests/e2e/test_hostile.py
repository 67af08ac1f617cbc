"""A hostile client against the real binary: every malformed request gets a 4xx in its
protocol's shape, never a 5xx or a crash, and the server answers normally afterwards."""
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

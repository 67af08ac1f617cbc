"""Codex's Responses API as it sends it today (codex-rs: protocol models.rs ResponseItem, tools
tool_spec.rs / responses_api.rs): every history item type and tool type accepted, freeform
tools (custom) round-tripped as custom_tool_call items and constrained by their Lark / regex
grammar, local_shell and namespaced (MCP) calls, sealed reasoning (store: false + include
reasoning.encrypted_content), the echoed options, and stateless replays that hit the prefix
cache as previous_response_id chains do.

The server is the real binary with the scripted stand-in model (--test-script) and a small
chat template that renders tools, reasoning and tool calls (Qwen-style markup), so what the
prompt holds can be seen in its token count."""
import json
import os
import re

import httpx
import pytest
from openai import OpenAI

from conftest import MODEL, Server

ID = "SmolLM2-135M-Instruct.Q4_1"


def call(name, args):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, \"world\"\n*** End Patch\n"

# Written for this test in the shape of Codex's apply_patch grammar.
APPLY_PATCH_LARK = r'''start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change?
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
change: (change_context | change_line)+
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
%import common.LF
'''

SCRIPT = [
    {"when": "<tool_response>", "reply": "Done."},
    {"when": "apply the patch", "reply": call("apply_patch", {"input": PATCH})},
    {"when": "digits please", "reply": call("code", {"input": "hello"})},
    {"when": "run ls", "reply": "<think>I should list the files.</think>" +
                                call("local_shell", {"command": ["ls", "-la"], "working_directory": "/repo"})},
    {"when": "search the docs", "reply": call("mcp__docs__search", {"query": "lark"})},
    {"when": "think first", "reply": "<think>Two plus two is four.</think>The answer is 4."},
    {"when": "", "reply": "Scripted default answer."},
]

# ChatML with tools, reasoning and tool calls rendered (every assistant turn keeps its
# reasoning, so a restored reasoning item shows in the prompt's token count).
TEMPLATE = """{%- if messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}{% if tools %}

Tools:{% for t in tools %}
{{ t | tojson }}{% endfor %}{% endif %}<|im_end|>
{% elif tools %}<|im_start|>system
Tools:{% for t in tools %}
{{ t | tojson }}{% endfor %}<|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'system' and loop.first %}
{%- elif m.role == 'assistant' %}<|im_start|>assistant
{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}
{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>
{{ {"name": c.function.name, "arguments": c.function.arguments} | tojson }}
</tool_call>{% endfor %}{% endif %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


@pytest.fixture(scope="module")
def codex(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.skip(f"{MODEL} is missing: run `make model`")
    d = tmp_path_factory.mktemp("codex")
    (d / "script.json").write_text(json.dumps(SCRIPT))
    (d / "template.jinja").write_text(TEMPLATE)
    log = d / "access.log"
    s = Server("--test-script", str(d / "script.json"), "--chat-template-file", str(d / "template.jinja"),
               "--access-log", str(log))
    s.access_log = log
    yield s
    s.stop()


@pytest.fixture(scope="module")
def oai(codex):
    return OpenAI(base_url=codex.base + "/v1", api_key="none")


def post(server, body):
    r = httpx.post(server.base + "/v1/responses", timeout=60, json={"model": ID, **body})
    assert r.status_code == 200, r.text
    return r.json()


def user(text):
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


FUNCTION = {"type": "function", "name": "read_file", "description": "Reads a file", "strict": False,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edits files with a patch.",
               "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_LARK}}
NAMESPACE = {"type": "namespace", "name": "mcp__docs", "description": "Tools in the mcp__docs namespace.",
             "tools": [{"type": "function", "name": "search", "description": "Searches the docs", "strict": False,
                        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]}


# ---- every history item and tool type is accepted ----

def test_every_codex_history_item_type_is_accepted_and_unmapped_ones_are_noted(codex, oai):
    history = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>...</permissions>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look at this"},
                                                       {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAAABo-from-another-server"},
        {"type": "local_shell_call", "call_id": "call_1", "status": "completed",
         "action": {"type": "exec", "command": ["bash", "-lc", "ls"], "timeout_ms": 1000, "working_directory": "/r",
                    "env": None, "user": None}},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {"type": "function_call", "name": "search", "namespace": "mcp__docs", "arguments": "{\"query\":\"x\"}", "call_id": "call_2"},
        {"type": "function_call_output", "call_id": "call_2",
         "output": [{"type": "input_text", "text": "found"}, {"type": "input_image", "image_url": "data:,"}]},
        {"type": "custom_tool_call", "status": "completed", "call_id": "call_3", "name": "apply_patch", "input": PATCH},
        {"type": "custom_tool_call_output", "call_id": "call_3", "output": "Success. Updated: hello.txt"},
        {"type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "weather"}},
        {"type": "image_generation_call", "id": "ig_1", "status": "completed", "result": "AAAA"},
        {"type": "tool_search_call", "call_id": "ts_1", "execution": "client", "arguments": {"query": "calendar"}},
        {"type": "tool_search_output", "call_id": "ts_1", "status": "completed", "execution": "client", "tools": []},
        {"type": "item_reference", "id": "msg_abc"},
        {"type": "compaction", "encrypted_content": "opaque"},
        {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}},
        {"type": "a_future_item_type", "payload": 1},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Patched."}], "phase": "final_answer"},
        user("thanks"),
    ]
    body = {"instructions": "You are Codex.", "store": False, "stream": False, "max_output_tokens": 4,
            "include": ["reasoning.encrypted_content"], "prompt_cache_key": "sess-1",
            "tools": [FUNCTION, APPLY_PATCH, NAMESPACE, {"type": "local_shell"}], "input": history}
    r = post(codex, body)
    notes = r["ferrox"]
    skipped = {n["type"]: n["index"] for n in notes["skipped_input_items"]}
    assert set(skipped) == {"reasoning", "web_search_call", "image_generation_call", "tool_search_call",
                            "tool_search_output", "item_reference", "compaction", "ghost_snapshot",
                            "a_future_item_type"}
    assert skipped["reasoning"] == 2 and skipped["item_reference"] == 13
    assert [p["type"] for p in notes["skipped_content_parts"]] == ["input_image", "input_image"]
    # The mapped calls and outputs are in the prompt: without them it is much shorter.
    mapped = {3, 4, 5, 6, 7, 8}
    short = post(codex, {**body, "input": [it for i, it in enumerate(history) if i not in mapped]})
    assert r["usage"]["input_tokens"] > short["usage"]["input_tokens"] + 60
    # The official SDK parses it and keeps the note.
    sdk = oai.responses.create(model=ID, store=False, max_output_tokens=4, input=history,
                               tools=[FUNCTION, APPLY_PATCH, NAMESPACE, {"type": "local_shell"}])
    assert sdk.status in ("completed", "incomplete")
    assert len(sdk.ferrox["skipped_input_items"]) == 9


def test_every_codex_tool_type_is_accepted_hosted_ones_noted(codex):
    tools = [FUNCTION, APPLY_PATCH, {"type": "custom", "name": "notes", "description": "free text", "format": {"type": "text"}},
             NAMESPACE, {"type": "local_shell"}, {"type": "web_search", "external_web_access": False},
             {"type": "image_generation", "output_format": "png"},
             {"type": "tool_search", "execution": "client", "description": "find tools", "parameters": {"type": "object"}}]
    r = post(codex, {"input": "hello", "max_output_tokens": 4, "tools": tools, "tool_choice": "auto",
                     "parallel_tool_calls": False})
    assert [t["type"] for t in r["ferrox"]["skipped_tools"]] == ["web_search", "image_generation", "tool_search"]
    assert r["tools"] == tools and r["parallel_tool_calls"] is False
    # The offered tools reach the prompt (the template lists them): far more tokens than none.
    bare = post(codex, {"input": "hello", "max_output_tokens": 4})
    assert r["usage"]["input_tokens"] > bare["usage"]["input_tokens"] + 200
    # A tool that is not an object is still a 400.
    bad = httpx.post(codex.base + "/v1/responses", json={"model": ID, "input": "x", "tools": ["web_search"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools[0]"


# ---- custom (freeform) tools ----

def test_custom_tool_call_comes_back_as_custom_tool_call_and_round_trips(codex, oai):
    r = oai.responses.create(model=ID, input="apply the patch please", tools=[FUNCTION, APPLY_PATCH])
    calls = [o for o in r.output if o.type == "custom_tool_call"]
    assert len(calls) == 1 and calls[0].name == "apply_patch" and calls[0].input == PATCH
    assert calls[0].id.startswith("ctc_") and calls[0].call_id
    assert r.ferrox["custom_tool_grammars"] == [{"name": "apply_patch", "syntax": "lark", "constrained": True}]
    follow = oai.responses.create(model=ID, previous_response_id=r.id, tools=[FUNCTION, APPLY_PATCH], input=[
        {"type": "custom_tool_call_output", "call_id": calls[0].call_id, "output": "Success. Added hello.txt"}])
    assert follow.output_text == "Done."


def test_custom_tool_call_streams_input_events_like_openai(codex, oai):
    with oai.responses.stream(model=ID, input="apply the patch please", tools=[APPLY_PATCH]) as s:
        events = list(s)
        final = s.get_final_response()
    types = [e.type for e in events]
    delta = [e for e in events if e.type == "response.custom_tool_call_input.delta"]
    done = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    assert "".join(e.delta for e in delta) == PATCH and len(done) == 1 and done[0].input == PATCH
    item_done = [e for e in events if e.type == "response.output_item.done" and e.item.type == "custom_tool_call"]
    assert len(item_done) == 1 and item_done[0].item.input == PATCH
    assert types.index("response.output_item.added") < types.index("response.custom_tool_call_input.delta") \
        < types.index("response.custom_tool_call_input.done") < types.index("response.output_item.done")
    final_call = [o for o in final.output if o.type == "custom_tool_call"][0]
    assert (final_call.id, final_call.call_id) == (item_done[0].item.id, item_done[0].item.call_id)
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_regex_grammar_constrains_the_custom_tool_input(codex):
    def code_tool(fmt):
        return {"type": "custom", "name": "code", "description": "A three-digit code.", "format": fmt}
    regex = {"type": "grammar", "syntax": "regex", "definition": "[0-9]{3}"}
    base = {"input": "digits please", "temperature": 0, "max_output_tokens": 64}
    # Unconstrained (format text), the scripted model writes "hello".
    free = post(codex, {**base, "tools": [code_tool({"type": "text"})]})
    assert [o["input"] for o in free["output"] if o["type"] == "custom_tool_call"] == ["hello"]
    # Forced call under the regex: three digits, whatever the model wanted.
    forced = post(codex, {**base, "tools": [code_tool(regex)], "tool_choice": {"type": "custom", "name": "code"}})
    inputs = [o["input"] for o in forced["output"] if o["type"] == "custom_tool_call"]
    assert len(inputs) == 1 and re.fullmatch(r"[0-9]{3}", inputs[0]), forced["output"]
    assert forced["ferrox"]["custom_tool_grammars"][0]["constrained"] is True
    # tool_choice auto (what Codex sends): every call the model makes is still under the regex.
    auto = post(codex, {**base, "tools": [code_tool(regex)], "tool_choice": "auto"})
    inputs = [o["input"] for o in auto["output"] if o["type"] == "custom_tool_call"]
    assert inputs and all(re.fullmatch(r"[0-9]{3}", i) for i in inputs), auto["output"]
    # A grammar ferrox cannot compile is offered unconstrained and said so, never a 400.
    bad = post(codex, {**base, "tools": [code_tool({"type": "grammar", "syntax": "lark",
                                                      "definition": "start: WORD\n%ignore \" \"\n%import common.WORD"})]})
    note = bad["ferrox"]["custom_tool_grammars"][0]
    assert note["constrained"] is False and "%ignore" in note["reason"]
    assert [o["input"] for o in bad["output"] if o["type"] == "custom_tool_call"] == ["hello"]


# ---- local_shell and namespaced (MCP) tools ----

def test_local_shell_call_comes_back_as_local_shell_call(codex, oai):
    r = oai.responses.create(model=ID, input="run ls here", tools=[{"type": "local_shell"}])
    shell = [o for o in r.output if o.type == "local_shell_call"]
    assert len(shell) == 1 and shell[0].id.startswith("lsh_") and shell[0].status == "completed"
    a = shell[0].action
    assert a.type == "exec" and a.command == ["ls", "-la"] and a.working_directory == "/repo" and a.env == {}
    with httpx.stream("POST", codex.base + "/v1/responses", timeout=60, json={
            "model": ID, "input": "run ls here", "stream": True, "tools": [{"type": "local_shell"}]}) as s:
        events = [json.loads(l[6:]) for l in s.iter_lines() if l.startswith("data: ")]
    done = [e["item"] for e in events if e["type"] == "response.output_item.done" and e["item"]["type"] == "local_shell_call"]
    assert len(done) == 1 and done[0]["action"]["command"] == ["ls", "-la"]
    assert events[-1]["response"]["output"][-1] == done[0]


def test_namespaced_function_call_carries_its_namespace(codex, oai):
    r = oai.responses.create(model=ID, input="search the docs for lark", tools=[FUNCTION, NAMESPACE])
    fc = [o for o in r.output if o.type == "function_call"]
    assert len(fc) == 1 and fc[0].name == "search" and fc[0].namespace == "mcp__docs"
    assert json.loads(fc[0].arguments) == {"query": "lark"}
    # Replayed with its namespace, the call renders as the stored history does.
    replay = post(codex, {"store": False, "tools": [FUNCTION, NAMESPACE], "input": [
        user("search the docs for lark"),
        {"type": "function_call", "name": "search", "namespace": "mcp__docs", "arguments": fc[0].arguments,
         "call_id": fc[0].call_id},
        {"type": "function_call_output", "call_id": fc[0].call_id, "output": "3 hits"}]})
    chain = oai.responses.create(model=ID, previous_response_id=r.id, tools=[FUNCTION, NAMESPACE], input=[
        {"type": "function_call_output", "call_id": fc[0].call_id, "output": "3 hits"}])
    assert replay["usage"]["input_tokens"] == chain.usage.input_tokens
    assert replay["output"][-1]["content"][0]["text"] == "Done."


# ---- sealed reasoning ----

def test_encrypted_reasoning_restores_the_reasoning_and_a_bad_blob_changes_nothing_else(codex):
    first = post(codex, {"input": [user("think first: 2+2?")], "store": False,
                         "include": ["reasoning.encrypted_content"]})
    rs = [o for o in first["output"] if o["type"] == "reasoning"][0]
    msg = [o for o in first["output"] if o["type"] == "message"][0]
    assert rs["encrypted_content"].startswith("fxr1.") and "Two plus two" not in rs["encrypted_content"]
    plain = post(codex, {"input": [user("think first: 2+2?")], "store": False})
    assert "encrypted_content" not in [o for o in plain["output"] if o["type"] == "reasoning"][0]

    def replay(reasoning_item):
        items = [user("think first: 2+2?")] + ([reasoning_item] if reasoning_item else []) + [msg, user("and 3+3?")]
        return post(codex, {"input": items, "store": False, "max_output_tokens": 2})
    sealed = replay({"type": "reasoning", "summary": [], "encrypted_content": rs["encrypted_content"]})
    readable = replay({"type": "reasoning", "summary": [], "content": rs["content"]})
    none = replay(None)
    blob = rs["encrypted_content"]
    forged = replay({"type": "reasoning", "summary": [], "encrypted_content": blob[:-8] + ("A" if blob[-8] != "A" else "B") + blob[-7:]})
    # The blob alone restores the reasoning (the template renders it) exactly as its text does.
    assert sealed["usage"]["input_tokens"] == readable["usage"]["input_tokens"] > none["usage"]["input_tokens"] + 5
    assert "ferrox" not in sealed
    # One that does not verify restores nothing, is noted, and is no 400.
    assert forged["usage"]["input_tokens"] == none["usage"]["input_tokens"]
    assert forged["ferrox"]["skipped_input_items"][0]["type"] == "reasoning"


# ---- options Codex sends ----

def test_codex_options_are_accepted_and_echoed(codex, oai):
    r = oai.responses.create(model=ID, input="think first: 2+2?", store=False, prompt_cache_key="codex-session-42",
                             parallel_tool_calls=False, text={"verbosity": "low"},
                             reasoning={"effort": "high", "summary": "detailed"},
                             include=["reasoning.encrypted_content"], tools=[FUNCTION])
    assert r.prompt_cache_key == "codex-session-42" and r.parallel_tool_calls is False
    assert r.text.verbosity == "low" and r.reasoning.summary == "detailed" and r.reasoning.effort == "high"
    rs = [o for o in r.output if o.type == "reasoning"][0]
    assert [s.text for s in rs.summary] == ["Two plus two is four."] and rs.encrypted_content
    without = oai.responses.create(model=ID, input="think first: 2+2?")
    assert [o for o in without.output if o.type == "reasoning"][0].summary == []
    assert without.prompt_cache_key is None and without.text.verbosity == "medium"
    with oai.responses.stream(model=ID, input="think first: 2+2?", reasoning={"summary": "auto"}) as s:
        types = [e.type for e in s]
    assert "response.reasoning_summary_text.delta" in types and "response.reasoning_summary_part.done" in types
    # The cache key reaches the access log as a routing hint.
    lines = [json.loads(l) for l in codex.access_log.read_text().splitlines() if l.strip()]
    assert any(l.get("cache_key") == "codex-session-42" for l in lines)
    bad = httpx.post(codex.base + "/v1/responses", json={"model": ID, "input": "x", "text": {"verbosity": "loud"}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "text.verbosity"


# ---- stateless replays hit the prefix cache like previous_response_id chains ----

def test_stateless_replay_hits_the_cache_like_a_previous_response_id_chain(codex, oai):
    tools = [FUNCTION, APPLY_PATCH, {"type": "local_shell"}]

    def turn1(tag, store):
        return post(codex, {"instructions": f"You are Codex ({tag}).", "store": store, "tools": tools,
                            "include": ["reasoning.encrypted_content"], "input": [user("run ls in the repo")]})
    # Stateless, as Codex does it: the whole history again, reasoning as its sealed blob only.
    a1 = turn1("session A", False)
    replayed = []
    for o in a1["output"]:
        if o["type"] == "reasoning":
            replayed.append({"type": "reasoning", "summary": o["summary"], "encrypted_content": o["encrypted_content"]})
        else:
            replayed.append({k: v for k, v in o.items() if k != "id"})
    shell = [o for o in a1["output"] if o["type"] == "local_shell_call"][0]
    a2 = post(codex, {"instructions": "You are Codex (session A).", "store": False, "tools": tools,
                      "input": [user("run ls in the repo")] + replayed +
                               [{"type": "function_call_output", "call_id": shell["call_id"], "output": "a.txt\nb.txt"}]})
    # The same conversation through the store.
    b1 = turn1("session B", True)
    b_shell = [o for o in b1["output"] if o["type"] == "local_shell_call"][0]
    b2 = post(codex, {"instructions": "You are Codex (session B).", "previous_response_id": b1["id"], "tools": tools,
                      "input": [{"type": "function_call_output", "call_id": b_shell["call_id"], "output": "a.txt\nb.txt"}]})
    assert a2["usage"]["input_tokens"] == b2["usage"]["input_tokens"]
    assert a2["usage"]["input_tokens_details"]["cached_tokens"] == b2["usage"]["input_tokens_details"]["cached_tokens"]
    # Turn 1's prompt and its output (reasoning and call, re-rendered token for token) are
    # cached, all but the end token (never fed back) and the last partial KV block (32 tokens).
    t1 = a1["usage"]["input_tokens"] + a1["usage"]["output_tokens"] - 1
    cached = a2["usage"]["input_tokens_details"]["cached_tokens"]
    assert t1 - 32 < cached <= t1 and cached > a1["usage"]["input_tokens"] + 16, (a1["usage"], a2["usage"])
    assert a2["output"][-1]["content"][0]["text"] == "Done."

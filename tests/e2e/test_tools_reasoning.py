"""Tool calls and reasoning through every protocol, end to end on the real server with the
scripted stand-in model (conftest.SCRIPT): the same parsed answer becomes OpenAI tool_calls,
Anthropic tool_use blocks and Responses function_call items; markup never leaks into text."""
import json

import anthropic
import httpx
import openai
import pytest

ID = "SmolLM2-135M-Instruct.Q4_1"
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Current weather",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"}, "unit": {"type": "string"}},
                                                "required": ["city"]}}}
ASK = "What is the weather in Paris?"
MARKUP = ("<tool_call>", "</tool_call>", "<think>", "</think>")


@pytest.fixture(scope="module")
def oai(scripted_server):
    return openai.OpenAI(base_url=scripted_server.base + "/v1", api_key="x", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def claude(scripted_server):
    return anthropic.Anthropic(base_url=scripted_server.base, api_key="x", max_retries=0, timeout=60)


def no_markup(text):
    return not any(m in (text or "") for m in MARKUP)


def test_chat_tool_round_trip(oai):
    msgs = [{"role": "user", "content": ASK}]
    r = oai.chat.completions.create(model=ID, messages=msgs, tools=[WEATHER])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls" and ch.message.content is None
    call = ch.message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris", "unit": "celsius"}
    assert ch.message.model_extra["reasoning_content"] == "The user wants the weather. I should call the tool."
    msgs += [ch.message.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": call.id, "content": "22 degrees, sunny"}]
    final = oai.chat.completions.create(model=ID, messages=msgs, tools=[WEATHER])
    assert final.choices[0].finish_reason == "stop"
    assert final.choices[0].message.content == "It is 22 degrees and sunny in Paris."


def test_chat_stream_tool_call_and_reasoning(oai):
    chunks = list(oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": ASK}],
                                              tools=[WEATHER], stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content", "") for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert content == "" and reasoning == "The user wants the weather. I should call the tool."
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"
    assert json.loads("".join(c.function.arguments for c in calls)) == {"city": "Paris", "unit": "celsius"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]


def test_parallel_calls_and_tool_choice_none(oai):
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "weather in two cities"}], tools=[WEATHER])
    cities = [json.loads(c.function.arguments)["city"] for c in r.choices[0].message.tool_calls]
    assert cities == ["Paris", "Rome"]
    assert len({c.id for c in r.choices[0].message.tool_calls}) == 2
    # tool_choice none: tools are not parsed, the markup is plain text.
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "weather in two cities"}],
                                    tools=[WEATHER], tool_choice="none")
    assert r.choices[0].finish_reason == "stop" and "<tool_call>" in r.choices[0].message.content


def test_malformed_call_ends_as_text_never_an_error(oai):
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "broken call"}], tools=[WEATHER])
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert r.choices[0].message.content == 'Let me try. <tool_call>{"name": "get_weather", "arguments": {"city": '
    chunks = list(oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "broken call"}],
                                              tools=[WEATHER], stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == r.choices[0].message.content


def test_reasoning_field_names_and_format_none(scripted_server, oai):
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "think first"}])
    m = r.choices[0].message
    assert m.content == "The answer is 4." and m.model_extra["reasoning"] == "Two plus two is four."
    assert r.usage.completion_tokens_details.reasoning_tokens > 0
    # Both names are accepted in history.
    r = httpx.post(scripted_server.base + "/v1/chat/completions", timeout=30, json={"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "reasoning": "r"},
        {"role": "user", "content": "hi"}]})
    assert r.status_code == 200


def test_malformed_tool_history_is_400(oai, scripted_server):
    base = scripted_server.base + "/v1/chat/completions"
    r = httpx.post(base, json={"messages": [{"role": "tool", "tool_call_id": "call_x", "content": "1"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].tool_call_id"
    r = httpx.post(base, json={"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[1].tool_calls[0].function.arguments"


def test_anthropic_tool_round_trip_and_stream(claude):
    tools = [{"name": "get_weather", "description": "Current weather", "input_schema": WEATHER["function"]["parameters"]}]
    m = claude.messages.create(model=ID, max_tokens=200, tools=tools, messages=[{"role": "user", "content": ASK}])
    assert m.stop_reason == "tool_use"
    assert [b.type for b in m.content] == ["thinking", "tool_use"]
    assert m.content[0].thinking == "The user wants the weather. I should call the tool." and m.content[0].signature
    use = m.content[1]
    assert use.id.startswith("toolu_") and use.name == "get_weather" and use.input == {"city": "Paris", "unit": "celsius"}
    history = [{"role": "user", "content": ASK}, {"role": "assistant", "content": [b.model_dump() for b in m.content]},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                             "content": [{"type": "text", "text": "22 degrees, sunny"}]},
                                            {"type": "text", "text": "Thanks."}]}]
    final = claude.messages.create(model=ID, max_tokens=200, tools=tools, messages=history)
    assert final.stop_reason == "end_turn" and final.content[0].text == "It is 22 degrees and sunny in Paris."
    with claude.messages.stream(model=ID, max_tokens=200, tools=tools, messages=[{"role": "user", "content": ASK}]) as s:
        events = list(s)
        streamed = s.get_final_message()
    starts = [e for e in events if e.type == "content_block_start"]
    assert [e.index for e in starts] == [0, 1] and [e.content_block.type for e in starts] == ["thinking", "tool_use"]
    kinds = [(e.index, e.delta.type) for e in events if e.type == "content_block_delta"]
    assert all(k == "thinking_delta" for i, k in kinds[:-2]) and kinds[-2:] == [(0, "signature_delta"), (1, "input_json_delta")] or \
        ((0, "signature_delta") in kinds and (1, "input_json_delta") in kinds)
    assert streamed.content[1].input == {"city": "Paris", "unit": "celsius"} and streamed.stop_reason == "tool_use"


def test_anthropic_tool_choice_shapes(claude, scripted_server):
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    for choice in ({"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"},
                   {"type": "none"}, {"type": "auto", "disable_parallel_tool_use": True}):
        r = httpx.post(scripted_server.base + "/v1/messages", timeout=30, json={
            "max_tokens": 100, "tools": tools, "tool_choice": choice, "messages": [{"role": "user", "content": ASK}]})
        assert r.status_code == 200, (choice, r.text)
        types = [b["type"] for b in r.json()["content"]]
        assert ("tool_use" in types) == (choice["type"] != "none")
    r = httpx.post(scripted_server.base + "/v1/messages", json={
        "max_tokens": 5, "tools": tools, "tool_choice": {"type": "tool", "name": "nope"}, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and r.json()["type"] == "error"


def test_responses_function_call_round_trip(oai):
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather",
              "parameters": WEATHER["function"]["parameters"]}]
    r = oai.responses.create(model=ID, input=ASK, tools=tools)
    assert [o.type for o in r.output] == ["reasoning", "function_call"]
    assert r.output[0].content[0].text == "The user wants the weather. I should call the tool."
    fc = r.output[1]
    assert fc.id.startswith("fc_") and fc.call_id.startswith("call_") and fc.name == "get_weather"
    assert json.loads(fc.arguments) == {"city": "Paris", "unit": "celsius"}
    final = oai.responses.create(model=ID, previous_response_id=r.id, tools=tools,
                                 input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "22 degrees, sunny"}])
    assert final.output_text == "It is 22 degrees and sunny in Paris."
    with oai.responses.stream(model=ID, input=ASK, tools=tools) as s:
        events = list(s)
        streamed = s.get_final_response()
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.type, i.id) for i in done] == [(o.type, o.id) for o in streamed.output]
    assert done[1].call_id == streamed.output[1].call_id
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris", "unit": "celsius"}


def test_streams_never_leak_markup_on_any_route(scripted_server):
    base = scripted_server.base
    bodies = [("/v1/chat/completions", {"stream": True, "tools": [WEATHER], "messages": [{"role": "user", "content": ASK}]}),
              ("/v1/messages", {"stream": True, "max_tokens": 100, "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
                                "messages": [{"role": "user", "content": ASK}]}),
              ("/v1/responses", {"stream": True, "input": ASK, "tools": [{"type": "function", "name": "get_weather", "parameters": {}}]}),
              ("/v1/chat/completions", {"stream": True, "messages": [{"role": "user", "content": "think first"}]})]
    for path, body in bodies:
        with httpx.stream("POST", base + path, json=body, timeout=30) as r:
            text = r.read().decode()
        for line in text.splitlines():
            if not line.startswith("data: {"):
                continue
            ev = json.loads(line[6:])
            pieces = []
            if "choices" in ev:
                for c in ev["choices"]:
                    pieces.append(c.get("delta", {}).get("content") or "")
            if ev.get("type") == "content_block_delta" and ev["delta"]["type"] == "text_delta":
                pieces.append(ev["delta"]["text"])
            if ev.get("type") == "response.output_text.delta":
                pieces.append(ev["delta"])
            assert all(no_markup(p) for p in pieces), (path, line)

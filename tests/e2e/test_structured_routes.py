"""Constrained decoding on every route, end to end on the default model through the official
SDKs: response_format / text.format / output_format / grammar / json_schema / guided_* /
structured_outputs, forced tool calls parsed back as tool calls, the 400s, constrained and free
requests in one batch, and a cut answer. Outputs are checked by independent parsers
(json, jsonschema, re)."""
import concurrent.futures
import json
import re

import anthropic
import httpx
import jsonschema
import openai
import pytest

ID = "SmolLM2-135M-Instruct.Q4_1"
PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 24},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
          "required": ["name", "age", "pets"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Current time in a time zone",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 20}},
                   "required": ["zone"]}}}
ASK = [{"role": "user", "content": "Tell me about a person."}]


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.base, api_key="x", max_retries=0, timeout=120)


def chat_json_schema(oai, schema, seed, max_tokens=120, **kw):
    return oai.chat.completions.create(
        model=ID, messages=ASK, temperature=1, seed=seed, max_tokens=max_tokens,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}, **kw)


def test_chat_json_schema_validates_for_several_seeds(oai):
    for seed in range(4):
        r = chat_json_schema(oai, PERSON, seed)
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


def test_chat_json_schema_streamed_equals_unstreamed(oai):
    full = chat_json_schema(oai, PERSON, 11).choices[0].message.content
    parts = [c.choices[0].delta.content or "" for c in chat_json_schema(oai, PERSON, 11, stream=True) if c.choices]
    assert "".join(parts) == full


def test_chat_json_object(oai):
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "Describe a cat."}],
                                    temperature=0.8, seed=3, max_tokens=150, response_format={"type": "json_object"})
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)


def test_unconstrained_answer_is_prose(oai):
    # The control: without a constraint this prompt does not give a JSON object.
    r = oai.chat.completions.create(model=ID, messages=ASK, temperature=0, max_tokens=40)
    with pytest.raises(ValueError):
        json.loads(r.choices[0].message.content)


def test_responses_text_format(oai):
    r = oai.responses.create(model=ID, input="Tell me about a person.", temperature=1, max_output_tokens=120,
                             store=False,
                             text={"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}})
    assert r.status == "completed"
    jsonschema.validate(json.loads(r.output_text), PERSON)


def test_anthropic_output_format(claude):
    m = claude.messages.create(model=ID, max_tokens=120, messages=ASK,
                               extra_body={"output_format": {"type": "json_schema", "schema": PERSON},
                                           "temperature": 1})
    assert m.stop_reason == "end_turn"
    jsonschema.validate(json.loads(m.content[0].text), PERSON)


def test_llamacpp_completion_grammar_and_json_schema(server):
    r = httpx.post(server.base + "/completion", timeout=60, json={
        "prompt": "Is the sky blue? Answer:", "n_predict": 8, "temperature": 1, "seed": 5,
        "grammar": 'root ::= " " ("yes" | "no") "."'})
    assert r.status_code == 200, r.text
    assert r.json()["content"] in (" yes.", " no.")
    assert r.json()["stop"] is True
    r = httpx.post(server.base + "/completion", timeout=60, json={
        "prompt": "A person as JSON:", "n_predict": 120, "temperature": 1, "seed": 2, "json_schema": PERSON})
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["content"]), PERSON)


def test_completions_guided_regex_and_choice(oai):
    r = oai.completions.create(model=ID, prompt="My phone number is", max_tokens=20, temperature=1, seed=1,
                               extra_body={"guided_regex": r" \(\d{3}\) \d{3}-\d{4}"})
    assert re.fullmatch(r" \(\d{3}\) \d{3}-\d{4}", r.choices[0].text), r.choices[0].text
    r = oai.chat.completions.create(model=ID, messages=[{"role": "user", "content": "Pick a colour."}],
                                    max_tokens=10, temperature=1, seed=4,
                                    extra_body={"structured_outputs": {"choice": ["red", "green", "blue"]}})
    assert r.choices[0].message.content in ("red", "green", "blue")


def test_forced_tool_calls_on_every_chat_protocol(oai, claude):
    say_hi = [{"role": "user", "content": "Hello! How are you today?"}]  # no reason to call a tool
    r = oai.chat.completions.create(model=ID, messages=say_hi, tools=[WEATHER, TIME], tool_choice="required",
                                    temperature=1, seed=1, max_tokens=100)
    assert r.choices[0].finish_reason == "tool_calls"
    call = r.choices[0].message.tool_calls[0].function
    assert call.name in ("get_weather", "get_time")
    params = {"get_weather": WEATHER, "get_time": TIME}[call.name]["function"]["parameters"]
    jsonschema.validate(json.loads(call.arguments), params)
    # A named function.
    r = oai.chat.completions.create(model=ID, messages=say_hi, tools=[WEATHER, TIME], temperature=1, seed=2,
                                    tool_choice={"type": "function", "function": {"name": "get_time"}},
                                    max_tokens=100)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_time"]
    jsonschema.validate(json.loads(r.choices[0].message.tool_calls[0].function.arguments),
                        TIME["function"]["parameters"])
    # Responses.
    tools = [{"type": "function", "name": "get_weather", "description": "Current weather in a city",
              "parameters": WEATHER["function"]["parameters"]}]
    r = oai.responses.create(model=ID, input="Hello!", tools=tools, tool_choice="required", temperature=1,
                             max_output_tokens=100, store=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    jsonschema.validate(json.loads(calls[0].arguments), WEATHER["function"]["parameters"])
    # Anthropic tool_choice any / tool.
    atools = [{"name": "get_weather", "description": "Current weather in a city",
               "input_schema": WEATHER["function"]["parameters"]}]
    for choice in ({"type": "any"}, {"type": "tool", "name": "get_weather"}):
        m = claude.messages.create(model=ID, max_tokens=100, messages=say_hi, tools=atools, tool_choice=choice)
        assert m.stop_reason == "tool_use"
        uses = [b for b in m.content if b.type == "tool_use"]
        assert [u.name for u in uses] == ["get_weather"]
        jsonschema.validate(uses[0].input, WEATHER["function"]["parameters"])


def test_constraint_errors_are_400s_naming_the_field(oai, server):
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=ID, messages=ASK, extra_body={"grammar": "root ::= undefined-rule"})
    assert "undefined-rule" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        chat_json_schema(oai, {"type": "array", "uniqueItems": True}, 0)
    assert "uniqueItems" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=ID, messages=ASK, response_format={"type": "json_object"},
                                    extra_body={"guided_regex": "a+"})
    assert "Only one output constraint" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=ID, messages=ASK, response_format={"type": "xml"})
    assert "response_format.type" in str(e.value)
    r = httpx.post(server.base + "/completion", json={"prompt": "x", "grammar": "root ::= (\"a\"?)*"})
    assert r.status_code == 400 and "left-recursive" in r.json()["error"]["message"]
    r = httpx.post(server.base + "/completion", json={"prompt": "x", "grammar": 7})
    assert r.status_code == 400 and "grammar" in r.json()["error"]["message"]


def test_cut_answer_ends_with_length_and_a_prefix(oai):
    r = chat_json_schema(oai, PERSON, 1, max_tokens=5)
    assert r.choices[0].finish_reason == "length"
    text = r.choices[0].message.content
    assert text.startswith("{")
    with pytest.raises(ValueError):
        json.loads(text)


def test_constrained_and_free_requests_share_batches(oai):
    # Greedy free answers must be the same alone and beside constrained requests.
    free = dict(model=ID, messages=[{"role": "user", "content": "Name three rivers."}], temperature=0, max_tokens=40)
    alone = oai.chat.completions.create(**free).choices[0].message.content
    with concurrent.futures.ThreadPoolExecutor(6) as ex:
        cons = [ex.submit(chat_json_schema, oai, PERSON, s) for s in range(3)]
        frees = [ex.submit(oai.chat.completions.create, **free) for _ in range(3)]
        for f in frees:
            assert f.result().choices[0].message.content == alone
        for f in cons:
            jsonschema.validate(json.loads(f.result().choices[0].message.content), PERSON)

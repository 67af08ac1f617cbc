#!/usr/bin/env python3
"""Golden outputs for ferrox's Jinja chat-template engine (tests/chat/golden/*.json).

Renders every template in ../shared/testdata/chat_templates (plus the SmolLM2 template read
from the default model's GGUF, written to tests/chat/golden/SmolLM2-135M-Instruct.jinja)
against a fixed set of conversations with Python jinja2, in the environment HF transformers
builds for chat templates (transformers/utils/chat_template_utils.py, _compile_jinja_template):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    filters["tojson"] = tojson(x, ensure_ascii=False, indent=None, separators=None,
                               sort_keys=False) -> json.dumps(...)
    globals["raise_exception"] raises TemplateError; globals["strftime_now"](fmt)

and called as apply_chat_template does: messages, tools (None when absent), documents=None,
add_generation_prompt, plus the special tokens and any extra keyword arguments. The
AssistantTracker's {% generation %} block renders its body unchanged. strftime_now reads a
fixed clock (FIXED_NOW, UTC) so the output is reproducible; the C++ test sets the same clock
through JinjaOptions::fixed_now_unix.

A case whose rendering raises records {"error": message} instead of {"expected": text}; the
C++ side must then fail too (and, for raise_exception, with the same message).

Usage: python3 scripts/golden/chat_templates.py   (needs jinja2>=3.1; gguf for SmolLM2)
"""
import calendar
import datetime as dt
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "testdata", "chat_templates"))
OUT_DIR = os.path.join(ROOT, "tests", "chat", "golden")
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

FIXED_NOW = dt.datetime(2025, 1, 15, 10, 30, 0)
FIXED_NOW_UNIX = calendar.timegm(FIXED_NOW.timetuple())


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %} tag, without the tracking."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {"type": "string", "description": "The city and country, e.g. Paris, France"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                             "description": "The temperature unit to use"},
                },
                "required": ["location"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search_web",
            "description": "Search the web and return the top results.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "The search query"},
                    "max_results": {"type": "integer", "description": "How many results to return",
                                    "default": 5, "minimum": 1, "maximum": 20},
                    "safe": {"type": "boolean", "description": "Filter explicit results"},
                },
                "required": ["query"],
            },
        },
    },
]

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Answer briefly."}
USER1 = {"role": "user", "content": "Hello! What can you do?"}
ASSIST1 = {"role": "assistant", "content": "I can answer questions and help with tasks."}
USER2 = {"role": "user", "content": "Tell me a joke about computers."}
TOOL_USER = {"role": "user", "content": "What's the weather like in Paris today?"}
TOOL_CALL_DICT = {  # as transformers' tool-use docs show: arguments as a dict, no content
    "role": "assistant",
    "tool_calls": [{"id": "call00001", "type": "function",
                    "function": {"name": "get_current_weather",
                                 "arguments": {"location": "Paris, France", "unit": "celsius"}}}],
}
TOOL_CALL_STR = {  # as an OpenAI client sends it: arguments as a JSON string, empty content
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "call00001", "type": "function",
                    "function": {"name": "get_current_weather",
                                 "arguments": "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}"}}],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call00001", "name": "get_current_weather",
               "content": "{\"temperature\": 22.5, \"condition\": \"sunny\"}"}
TOOL_ANSWER = {"role": "assistant", "content": "It is sunny and 22.5 °C in Paris."}

TWO_CALLS = {
    "role": "assistant",
    "content": "Let me check both.",
    "tool_calls": [
        {"id": "call00002", "type": "function",
         "function": {"name": "get_current_weather", "arguments": {"location": "Tokyo, Japan"}}},
        {"id": "call00003", "type": "function",
         "function": {"name": "search_web", "arguments": {"query": "Tokyo events", "max_results": 3,
                                                          "safe": True}}},
    ],
}
TWO_RESULTS = [
    {"role": "tool", "tool_call_id": "call00002", "name": "get_current_weather",
     "content": "{\"temperature\": 18, \"condition\": \"cloudy\"}"},
    {"role": "tool", "tool_call_id": "call00003", "name": "search_web", "content": "No events found."},
]

# Tool-call histories with nested schemas whose keys are deliberately not sorted (so any
# re-sorting of objects, in `tojson` or in loops over properties, shows in the output), calls
# whose arguments are objects (as HF passes them), results carrying tool_call_id and name, and
# a final user turn after the tool exchange.
NESTED_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "book_flight",
            "description": "Book a flight for one or more passengers.",
            "parameters": {
                "type": "object",
                "properties": {
                    "route": {"type": "object", "description": "Where and when to fly",
                              "properties": {"to": {"type": "string", "description": "Destination IATA code"},
                                             "from": {"type": "string", "description": "Origin IATA code"},
                                             "date": {"type": "string", "format": "date"}},
                              "required": ["to", "from"]},
                    "passengers": {"type": "array", "description": "Who is flying",
                                   "items": {"type": "object",
                                             "properties": {"name": {"type": "string"},
                                                            "age": {"type": "integer", "minimum": 0}},
                                             "required": ["name"]}},
                    "cabin": {"type": "string", "enum": ["economy", "business", "first"], "default": "economy"},
                    "max_price": {"type": "number", "description": "Upper bound in EUR", "exclusiveMinimum": 0},
                },
                "required": ["route", "passengers"],
                "additionalProperties": False,
            },
        },
    },
    TOOLS[0],
]
FLIGHT_USER = {"role": "user", "content": "Book Ada (36) on a business flight from Paris to Tokyo on 1 Feb."}
FLIGHT_CALL = {  # empty content, so templates that concatenate message.content render it
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "call10001", "type": "function",
                    "function": {"name": "book_flight",
                                 "arguments": {"route": {"to": "NRT", "from": "CDG", "date": "2025-02-01"},
                                               "passengers": [{"name": "Ada", "age": 36}],
                                               "cabin": "business"}}}],
}
FLIGHT_CALL_NULL = dict(FLIGHT_CALL, content=None)  # as OpenAI clients send a call-only turn
FLIGHT_RESULT = {"role": "tool", "tool_call_id": "call10001", "name": "book_flight",
                 "content": "{\"status\": \"confirmed\", \"booking\": {\"ref\": \"XK42\", \"price\": 1234.5}}"}
FLIGHT_ANSWER = {"role": "assistant", "content": "Booked: reference XK42, 1234.5 EUR."}
PARALLEL_USER = {"role": "user", "content": "Check the Tokyo weather and book her on to Osaka."}
FINAL_USER = {"role": "user", "content": "Thanks! Will it rain in Tokyo when she lands?"}
PARALLEL_CALLS = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "call10002", "type": "function",
         "function": {"name": "get_current_weather", "arguments": {"unit": "celsius", "location": "Tokyo, Japan"}}},
        {"id": "call10003", "type": "function",
         "function": {"name": "book_flight",
                      "arguments": {"route": {"to": "KIX", "from": "NRT"}, "passengers": [{"name": "Ada"}],
                                    "max_price": 150}}},
    ],
}
# The same calls with arguments as JSON strings (what an OpenAI client sends), for templates
# such as functionary's that only concatenate strings.
PARALLEL_CALLS_STR = dict(PARALLEL_CALLS, tool_calls=[
    {"id": c["id"], "type": c["type"],
     "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])}}
    for c in PARALLEL_CALLS["tool_calls"]])
PARALLEL_RESULTS = [
    {"role": "tool", "tool_call_id": "call10002", "name": "get_current_weather",
     "content": "{\"temperature\": 9, \"condition\": \"rain\"}"},
    {"role": "tool", "tool_call_id": "call10003", "name": "book_flight",
     "content": "{\"status\": \"confirmed\", \"booking\": {\"ref\": \"KX07\", \"price\": 99}}"},
]
PARALLEL_ANSWER = {"role": "assistant", "content": "Rain and 9 °C in Tokyo; the Osaka leg is booked (KX07)."}

CONVERSATIONS = {
    "system_user": ([SYSTEM, USER1], None),
    "user_only": ([USER1], None),
    "multi_turn": ([USER1, ASSIST1, USER2], None),
    "multi_turn_system": ([SYSTEM, USER1, ASSIST1, USER2], None),
    "multi_turn_assistant_last": ([SYSTEM, USER1, ASSIST1], None),
    "unicode": ([{"role": "user", "content": "Héllo wörld — 你好，世界! 🌍 \"quoted\" \\ back\\slash\ttab\nnew line </think>"},
                 {"role": "assistant", "content": "Привет! ¿Qué tal? ✓ 1/2 <b>&amp;</b>"},
                 {"role": "user", "content": "  padded with spaces  "}], None),
    "thinking": ([USER1,
                  {"role": "assistant", "content": "<think>\nThe user greets me.\n</think>\n\nHi there!"},
                  USER2], None),
    "tools_no_call": ([SYSTEM, TOOL_USER], TOOLS),
    "tools_no_system": ([TOOL_USER], TOOLS),
    "tool_call_dict": ([SYSTEM, TOOL_USER, TOOL_CALL_DICT, TOOL_RESULT, TOOL_ANSWER], TOOLS),
    "tool_call_dict_pending": ([TOOL_USER, TOOL_CALL_DICT, TOOL_RESULT], TOOLS),
    "tool_call_str": ([SYSTEM, TOOL_USER, TOOL_CALL_STR, TOOL_RESULT, TOOL_ANSWER], TOOLS),
    "two_tool_calls": ([{"role": "user", "content": "Weather and events in Tokyo?"}, TWO_CALLS] + TWO_RESULTS,
                       TOOLS),
    "reasoning_content": ([USER1, {"role": "assistant", "content": "Hi!", "reasoning_content": "Greet back."},
                           USER2], None),
    "content_parts": ([{"role": "user", "content": [{"type": "text", "text": "Describe this."}]}], None),
    "tool_history_nested": ([SYSTEM, FLIGHT_USER, FLIGHT_CALL, FLIGHT_RESULT, FLIGHT_ANSWER, FINAL_USER],
                            NESTED_TOOLS),
    "tool_history_then_user": ([FLIGHT_USER, FLIGHT_CALL_NULL, FLIGHT_RESULT, FINAL_USER], NESTED_TOOLS),
    "tool_history_parallel": ([SYSTEM, FLIGHT_USER, FLIGHT_CALL, FLIGHT_RESULT, FLIGHT_ANSWER, PARALLEL_USER,
                               PARALLEL_CALLS] + PARALLEL_RESULTS + [PARALLEL_ANSWER, FINAL_USER],
                              NESTED_TOOLS),
    "tool_history_parallel_str": ([PARALLEL_USER, PARALLEL_CALLS_STR] + PARALLEL_RESULTS + [PARALLEL_ANSWER, FINAL_USER],
                                  NESTED_TOOLS),
}

# Template-specific keyword arguments a caller must give (firefunction reads `functions` and
# `datetime` unconditionally); everything else gets only the common ones.
COMMON_EXTRA = {"date_string": "15 Jan 2025"}
TEMPLATE_EXTRA = {
    "fireworks-ai-llama-3-firefunction-v2": {"functions": json.dumps([t["function"] for t in TOOLS], indent=4),
                                             "datetime": "2025-01-15"},
}
TOKENS = [("<s>", "</s>")]
TOKEN_VARIANTS = [("", "<|endoftext|>"), ("<|begin_of_text|>", "<|eot_id|>")]


# Jinja semantics spot checks (template, context), rendered into tests/chat/jinja_semantics.json
# for jinja_semantics_test: Python values, whitespace control, scoping, filters, tests, methods,
# and errors (which the C++ side must also report).
KEY_ORDER_CTX = {"d": {"zeta": {"y": 1, "b": 2, "k": 0}, "alpha": [2, 1], "mid": {"q": None, "c": True}}}

SEMANTIC_CASES = [
 ("  {% if true %}\n  x\n  {% endif %}\n", {}),
 ("a\n  {#- c #}\n b {{- 1 }}  \n", {}),
 ("{% for i in [1,2] %}\n{{ i }}\n{% endfor %}\n", {}),
 ("x  {%- if true -%}  y  {%- endif -%}  z", {}),
 ("a {%+ if true %}b{% endif +%}\nc", {}),
 ("{# comment #}\nA{% raw %}{{ x }}{% endraw %}B", {}),
 ("line1\r\nline2\r\n", {}),
 ("{{ 'a\\tb\\n\\x41\\u00e9' }}|{{ \"it's\" }}|{{ 'x' 'y' }}", {}),
 ("{{ 1_000 }} {{ 0x1f }} {{ 1.5e3 }} {{ 2.50 }}", {}),
 ("{{ [1, 'a', none, true, 1.0, {'k': [2]}] }}|{{ (1,) }}|{{ () }}", {}),
 ("{{ 1.0 }} {{ 0.1 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.0001 }} {{ 123456789.125 }} {{ -0.0 }} {{ 1/3 }} {{ 2**0.5 }}", {}),
 ("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7 / 2 }} {{ 4 / 2 }}", {}),
 ("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ -3|abs }} {{ 2 ** 3 ** 2 }}", {}),
 ("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ none == none }} {{ {'a': 1} == {'a': 1} }}", {}),
 ("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 1 in u }}", {}),
 ("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not [] }} {{ 'a' if 0 else 'b' }} {{ 'a' if 1 }}|{{ 'a' if 0 }}|", {}),
 ("{{ 'x' ~ 1 ~ none ~ u ~ 2.0 }}", {}),
 ("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[::2] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4,5][1:-1] }} {{ [1,2,3,4,5][::-2] }} {{ [1,2,3][5:] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }}", {}),
 ("{{ m[-1].content }} {{ m[0]['role'] }} {{ m|length }} {{ m[5] is defined }} {{ 'héllo'|length }} {{ 'héllo'[1] }}", {"m": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
 ("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
 ("{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", {}),
 ("{% for x in [1,2,3,4,5,6] if x is odd %}{{ x }}{{ loop.last }} {% else %}none{% endfor %}", {}),
 ("{% for x in [] %}a{% else %}empty{% endfor %}{% for x in [2] if x > 5 %}a{% else %}filtered{% endfor %}", {}),
 ("{% for k, v in {'a': 1, 'b': 2}|items %}{{ k }}={{ v }},{% endfor %}{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", {}),
 ("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }} {% endfor %}", {}),
 ("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
 ("{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}", {}),
 ("{{ range(5)|list }} {{ range(2, 10, 3)|list }} {{ range(5, 0, -2)|list }}", {}),
 ("{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
 ("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }}{% endfor %}|{{ x }}", {}),
 ("{% for i in range(3) %}{% if i == 0 %}{% set y = 5 %}{% endif %}{{ y }}{% endfor %}|", {}),
 ("{% set ns = namespace(n=0, items=[]) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.n }} {{ ns.items }} {{ ns }}", {}),
 ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", {}),
 ("{% set x %}  block {{ 1 + 1 }} {% endset %}[{{ x }}]{% set y | upper %}abc{% endset %}{{ y }}", {}),
 ("{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
 ("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }} {{ greet() }}", {}),
 ("{% macro m() %}{{ x }}{% endmacro %}{% set x = 1 %}{{ m() }}", {}),
 ("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
 ("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}inside{% endcall %}", {}),
 ("{% macro m(a) %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", {}),
 ("{{ '  x  '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'Hello World'|lower }}|{{ 'hello world-foo (bar)'|title }}|{{ 'hELLO'|capitalize }}|{{ 'abc'|upper }}", {}),
 ("{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ m|sort(attribute='n')|map(attribute='n')|list }}", {"m": [{"n": 2}, {"n": 1}]}),
 ("{{ [1, 2, 2, 'a', 'A']|unique|list }} {{ [1, 2]|first }} {{ [1, 2]|last }} {{ []|first }}| {{ 'abc'|first }} {{ [1, 2, 3]|reverse|list }} {{ 'abc'|reverse }}", {}),
 ("{{ [1, 2, 3]|join('-') }} {{ m|join(', ', attribute='n') }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ ['a', 'B']|map('upper')|list }}", {"m": [{"n": 2}, {"n": 1}]}),
 ("{{ m|selectattr('role', 'equalto', 'user')|list|length }} {{ m|rejectattr('role', 'equalto', 'user')|map(attribute='role')|list }} {{ m|selectattr('x', 'defined')|list }} {{ m|selectattr('tool')|list|length }}", {"m": [{"role": "user"}, {"role": "assistant", "tool": 1}]}),
 ("{{ u|default('d') }} {{ none|default('d') }} {{ ''|default('d', true) }} {{ u|d('x') }} {{ 0|default(5, boolean=true) }}", {}),
 ("{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|items|list }} {{ {'a': 1}|length }} {{ u|length }} {{ u|list }} {{ 'ab'|list }}", {}),
 ("{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '2.5'|float }} {{ 3|float }} {{ 2.567|round(2) }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.1|round(method='ceil') }} {{ -2|abs }}", {}),
 ("{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'x'|center(7) }}|{{ 'a b  c'|wordcount }}", {}),
 ("{{ 'a<b>&\"\\''|e }} {{ 'x'|safe }} {{ 42|string ~ 'x' }} {{ [1, 2, 3]|sum }} {{ [3, 1]|min }} {{ [3, 1]|max }} {{ [1, 2, 3]|batch(2)|list }}", {}),
 ("{{ 'aXbXc'|replace('X', '-') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ '%s=%d'|format('a', 3) }} {{ [1,2,3]|count }}", {}),
 ("{{ {'a': [1, 2.5, 'é\"\\\\\\n/\\t\\u0001'], 'b': none, 'c': true}|tojson }}", {}),
 ("{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}", {}),
 ("{{ {'b': 1, 'a': {'d': 1, 'c': 2}}|tojson(sort_keys=true) }} {{ [1, 2]|tojson(separators=(',', ':')) }} {{ 'é'|tojson(ensure_ascii=true) }} {{ '😀'|tojson(true) }}", {}),
 ("{{ x|tojson }}", {"x": {"unicode": "héllo 世界 🌍", "nested": [{"k": 1.0}, [0.1, 1e20, -3]]}}),
 ("{{ x|tojson(indent='\\t') }}", {"x": {"a": [1]}}),
 ("{{ 1 is odd }} {{ 2 is even }} {{ 6 is divisibleby 3 }} {{ 'a' is string }} {{ 1 is number }} {{ true is number }} {{ 1.5 is integer }} {{ 1 is integer }} {{ 1.5 is float }} {{ none is none }} {{ u is defined }} {{ u is undefined }}", {}),
 ("{{ {} is mapping }} {{ [] is mapping }} {{ 'x' is iterable }} {{ 1 is iterable }} {{ [] is sequence }} {{ true is boolean }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 'abc' is lower }} {{ 'ABC' is upper }}", {}),
 ("{{ 1 is equalto 1 }} {{ 1 is eq 2 }} {{ 2 is in [1, 2] }} {{ 3 is gt 2 }} {{ 'a' is ne 'b' }} {{ range is callable }} {{ x is not none }} {{ x is sameas none }}", {"x": None}),
 ("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }} {{ '  a b  c '.split(none, 1) }}", {}),
 ("{{ '  x \\n'.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x '.lstrip() }}|{{ '  x '.rstrip() }}|{{ '\\n\\nx'.lstrip('\\n') }}", {}),
 ("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }} {{ 'héllo'.find('l') }}", {}),
 ("{{ 'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ \"hello world's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ ', '.join(['a', 'b']) }}", {}),
 ("{{ '{} and {}'.format('a', 1) }} {{ '{1}{0}'.format('a', 'b') }} {{ '{x}!'.format(x=2) }} {{ '{{}}'.format() }} {{ '123'.isdigit() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }}", {}),
 ("{{ 'a</think>b'.split('</think>')[-1] }} {{ '<think>\\nx\\n</think>\\n\\ny'.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {}),
 ("{% for k, v in d.items() %}{{ k }}:{{ v }} {% endfor %}{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 9) }} {{ d['a'] }} {{ d.a }} {{ d.zz }}|", {"d": {"a": 1, "b": [2]}}),
 ("{{ m.content }}|{{ m.tool_calls is defined }} {{ 'tool_calls' in m }} {{ m['content'] is none }}", {"m": {"role": "assistant", "content": None}}),
 ("{{ u }}|{{ u.x is defined if u is defined else 'nope' }}|{{ u|trim }}|{{ u|upper }}|{% if u %}t{% else %}f{% endif %}|{% for x in u %}{{ x }}{% endfor %}|{{ u is none }} {{ u == none }}", {}),
 ("{{ d.a.b }}|{{ d['missing'] }}|", {"d": {"a": {}}}),
 ("{{ none }} {{ true }} {{ false }} {{ [true, none] }}", {}),
 ("{{ strftime_now('%Y-%m-%d %H:%M') }} {{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %d, %Y') }}", {}),
 ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),

 # Key order: dicts keep insertion order everywhere, as tool schemas need (the context's
 # `d` has unsorted keys and a nested unsorted object).
 ("{% for k in d %}{{ k }},{% endfor %}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for k, v in d|items %}{{ k }},{% endfor %}|{{ d.keys()|list }} {{ d.values()|list }} {{ d.items()|list }} {{ d|list }} {{ d|first }} {{ d|length }} {{ d|join(',') }}", KEY_ORDER_CTX),
 ("{{ d }}|{{ d|string }}|{{ d|tojson }}|{{ d|tojson(sort_keys=true) }}|{{ d.zeta|dictsort }} {{ d|dictsort|map('first')|list }} {{ d|dictsort(reverse=true)|map('first')|list }} {{ d.zeta|dictsort(by='value') }} {{ d|sort }} {{ d|reverse|list }} {{ d|map('upper')|list }}", KEY_ORDER_CTX),
 ("{{ d|tojson(indent=2) }}\n{{ d|tojson(indent=2, sort_keys=true) }}\n{{ d.zeta|tojson(separators=(',', ':')) }}", KEY_ORDER_CTX),
 ("{% for name, p in t.parameters.properties.items() %}{{ name }}:{{ p.type }}:{{ p|tojson }}\n{% endfor %}{% for k in t.parameters %}{{ k }} {% endfor %}{{ t.parameters.properties.keys()|join(',') }}", {"t": {"parameters": {"type": "object", "required": ["z"], "properties": {"z": {"type": "string", "enum": ["b", "a"]}, "a": {"type": "object", "properties": {"y": {"type": "integer", "minimum": 1}, "b": {"description": "B", "type": "boolean"}}}, "m": {"type": "array", "items": {"type": "number"}}}}}}),
 ("{% set x = {'b': 1, 'a': 2, 'c': {'z': 1, 'y': 2}} %}{{ x }} {{ x|tojson }} {{ x.keys()|list }} {% for k, v in x.items() %}{{ k }}{% endfor %} {{ dict(z=1, a=2, m=3)|tojson }} {{ {'b': 1, 'a': 2, 'b': 3} }} {{ {'é': 1, 'z': 2, 'A': 3, 'a': 4}|tojson(sort_keys=true) }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort }} {{ {'b': 1, 'A': 2, 'a': 3}|dictsort(true) }}", {}),
 ("{{ dict(d.zeta, y=5, a=6)|tojson }} {{ dict(d.zeta) }} {{ dict(b=1, a=2) }} {{ dict() }}", KEY_ORDER_CTX),
 ("{{ d.mid|tojson }} {{ (d.mid|items|list)[0] }} {{ d.mid.items()|map('last')|list }}", KEY_ORDER_CTX),
 # printf-style formatting, the `format` filter and `%`: flags, width, precision, conversions
 ("{{ '%s: %d'|format('a', 3) }}|{{ '%-10s|%05.2f'|format('ab', 3.14159) }}|{{ '%+d % d %+.3e'|format(5, 7, 12345.678) }}|{{ '%#x %#o %X %#X %x %o'|format(255, 8, 255, 255, -255, -8) }}|{{ '%5.1f%%'|format(99.44) }}|{{ '%r %r %r %r'|format('a', 1, none, [1, 'b']) }}", {}),
 ("{{ '%c%c%c'|format(65, 'z', 233) }}|{{ '%g %g %g %g %G %g'|format(0.0001, 1e-5, 123456789, 1.5, 1e20, 100000) }}|{{ '%#g|%#.3g|%.3g|%.0g|%#x'|format(1.0, 3, 1234567, 0.5, 0) }}|{{ '%i|%5i|%-5i|%u'|format(3, 4, 5, -6) }}", {}),
 ("{{ '%*d|%-*d|%.*f|%*s|%.*s'|format(5, 1, 4, 2, 3, 3.14159, -4, 'x', 2, 'abc') }}|{{ '%e %E %.0e %#.0e %.2e %10.3E'|format(0, 1e100, 15, 15, 12345.678, -0.000123) }}|{{ '%.0f %.0f %.0f %#.0f %f %F'|format(0.5, 1.5, 2.5, 3, 1e20, 1.25) }}", {}),
 ("{{ '%d|%d|%d|%d|%s|%s|%s'|format(3.99, -3.99, true, 1e20, true, none, 1.0) }}|{{ '%.2s|%5s|%-5s|%5.1s|'|format('abcdef', 'é', 'é', 'héllo') }}|{{ '%010.3f|%+05d|%-05d|% 05d|%-+6.3d|%.3d|%#.5x|%#06x'|format(-3.14159, 42, 42, 42, 5, 5, 255, 255) }}", {}),
 ("{% set inf, ninf, nan = fl[0]|float, fl[1]|float, fl[2]|float %}{{ '%05f|%-6F|%+f|%5.1e|%g'|format(inf, inf, nan, ninf, nan) }}|{{ '%hd %ld %Lf'|format(1, 2, 3) }}|{{ '%a %a'|format('é😀', 'x') }}|{{ '%(name)s is %(age)03d|%(name)r'|format(name='Bo', age=7) }}|{{ '%-5c|%05s|%05c|%5r|'|format('x', 'ab', 'y', 1) }}|{{ '%s'|format(u) }}|{{ '100%%'|format() }}", {"fl": ["inf", "-inf", "nan"]}),
 ("{{ '%s' % 'x' }}|{{ '%s' % (1,) }}|{{ '%s-%s' % (1, 'b') }}|{{ '%s' % [1, 2] }}|{{ '%s' % {'a': 1} }}|{{ '%d%%' % 50 }}|{{ '%-10s|%05.2f' % ('x', 2.345) }}|{{ '%(name)s=%(v)5.1f' % {'name': 'n', 'v': 2.25} }}|{{ 'abc' % () }}|{{ 'abc' % [] }}|{{ 'abc' % {'a': 1} }}|{{ '%s' % u }}|{{ '%x %X %o %c %r %i' % (255, 255, 8, 97, 'q', 7) }}|{{ '%(a)s %(a)r %%' % d }}", {"d": {"a": "é"}}),
 ("{{ [u, 1] }}|{{ {'a': u} }}|{{ '%r|%10a|%s|' % (u, u, u) }}", {}),
 ("{{ '%.3g|%10.4f|%-10.2e|%+.1f' % (x, x, x, x) }}|{{ '%s|%r' % (s, s) }}", {"x": 2.0 / 3.0, "s": "it's \"q\"\n"}),
 # errors
 ("{{ 'a' + 1 }}", {}), ("{{ u + 'a' }}", {}), ("{{ u.x }}", {}), ("{{ [1].append(2) }}", {}),
 ("{{ 1 // 0 }}", {}), ("{{ none|tojson }}{{ u|tojson }}", {}), ("{{ 1 < 'a' }}", {}),
 ("{{ raise_exception('boom') }}", {}), ("{% set x = 1 %}{% set x.y = 2 %}", {}), ("{{ 5|items|list }}", {}),
 ("{% for x in 5 %}{% endfor %}", {}), ("{{ {'a':1}.update({}) }}", {}),
 ("{{ '%d' % 'x' }}", {}), ("{{ '%x' % 3.5 }}", {}), ("{{ '%f' % 'x' }}", {}), ("{{ '%c' % 'ab' }}", {}),
 ("{{ '%c' % 1114112 }}", {}), ("{{ '%s %s' % (1,) }}", {}), ("{{ '%s' % (1, 2) }}", {}), ("{{ '%z' % 1 }}", {}),
 ("{{ '%' % () }}", {}), ("{{ '%(a)s' % {} }}", {}), ("{{ '%(a)s' % (1,) }}", {}), ("{{ 'abc' % 5 }}", {}),
 ("{{ '%%' % 5 }}", {}), ("{{ '%d' % none }}", {}), ("{{ '%d' % u }}", {}), ("{{ '%*d' % ('a', 1) }}", {}),
 ("{{ '%(a' % {} }}", {}), ("{{ '%5%' % (1,) }}", {}), ("{{ '%s %s' % [1, 2] }}", {}), ("{{ '%s'|format(1, k=2) }}", {}),
 ("{{ '%s'|format() }}", {}), ("{{ '%d'|format('3') }}", {}),
]


def write_semantics(env):
    out = []
    for src, ctx in SEMANTIC_CASES:
        case = {"template": src, "context": ctx}
        try:
            case["expected"] = env.from_string(src).render(**ctx)
        except Exception as e:
            case["error"] = f"{type(e).__name__}: {e}"
        out.append(case)
    doc = {"generated_by": "scripts/golden/chat_templates.py", "jinja2_version": jinja2.__version__,
           "fixed_now_unix": FIXED_NOW_UNIX, "cases": out}
    with open(os.path.join(ROOT, "tests", "chat", "jinja_semantics.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"semantics: {len(out)} cases")


def smollm2_template():
    dst = os.path.join(OUT_DIR, "SmolLM2-135M-Instruct.jinja")
    try:
        import gguf
        reader = gguf.GGUFReader(MODEL)
        text = reader.fields["tokenizer.chat_template"].contents()
        with open(dst, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except Exception as e:  # the committed copy stays valid without the model
        print(f"note: could not read the SmolLM2 template from {MODEL}: {e}", file=sys.stderr)
    with open(dst, encoding="utf-8", newline="") as f:
        return f.read()


def render(env, source, messages, tools, add_generation_prompt, bos, eos, extra):
    try:
        tmpl = env.from_string(source)
        out = tmpl.render(messages=messages, tools=tools, documents=None,
                          add_generation_prompt=add_generation_prompt,
                          bos_token=bos, eos_token=eos, **extra)
        return {"expected": out}
    except jinja2.exceptions.TemplateError as e:
        kind = "raise_exception" if type(e) is jinja2.exceptions.TemplateError else type(e).__name__
        return {"error": str(e), "error_kind": kind}
    except Exception as e:  # TypeError etc. from the template's Python operations
        return {"error": f"{type(e).__name__}: {e}", "error_kind": type(e).__name__}


def cases_for(name, source, env):
    cases = []
    extra_base = dict(COMMON_EXTRA, **TEMPLATE_EXTRA.get(name, {}))

    def add(case_name, messages, tools, agp, bos, eos, extra):
        case = {"name": case_name, "messages": messages, "tools": tools, "add_generation_prompt": agp,
                "bos_token": bos, "eos_token": eos, "extra_context": extra}
        case.update(render(env, source, messages, tools, agp, bos, eos, extra))
        cases.append(case)

    for conv, (messages, tools) in CONVERSATIONS.items():
        for agp in (True, False):
            for bos, eos in TOKENS:
                add(f"{conv}/{'gen' if agp else 'nogen'}", messages, tools, agp, bos, eos, extra_base)
    for bos, eos in TOKEN_VARIANTS:
        add(f"multi_turn_system/tokens[{bos}|{eos}]", CONVERSATIONS["multi_turn_system"][0], None, True, bos, eos,
            extra_base)
    add("user_only/no_thinking", [USER1], None, True, "<s>", "</s>", dict(extra_base, enable_thinking=False))
    add("user_only/thinking", [USER1], None, True, "<s>", "</s>", dict(extra_base, enable_thinking=True))
    return cases


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    env = make_env()
    templates = []
    for fn in sorted(os.listdir(TEMPLATE_DIR)):
        if fn.endswith(".jinja"):
            with open(os.path.join(TEMPLATE_DIR, fn), encoding="utf-8", newline="") as f:
                templates.append((fn[:-len(".jinja")], "testdata:chat_templates/" + fn, f.read()))
    templates.append(("SmolLM2-135M-Instruct", "source:tests/chat/golden/SmolLM2-135M-Instruct.jinja",
                      smollm2_template()))
    write_semantics(env)
    for name, where, source in templates:
        cases = cases_for(name, source, env)
        doc = {
            "generated_by": "scripts/golden/chat_templates.py",
            "jinja2_version": jinja2.__version__,
            "template": where,
            "fixed_now_unix": FIXED_NOW_UNIX,
            "cases": cases,
        }
        with open(os.path.join(OUT_DIR, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1)
            f.write("\n")
        n_err = sum(1 for c in cases if "error" in c)
        print(f"{name}: {len(cases)} cases ({n_err} expected errors)")


if __name__ == "__main__":
    main()

"""Structured outputs end to end: the default model, at temperature 1, answers every schema of the
corpus (tests/grammar/schemas, made by tests/grammar/make_corpus.py) under
`response_format: json_schema` with strict on, through the official `openai` SDK; PyPI
`jsonschema` (with its format checker) validates each answer that finished with "stop". An
answer cut by max_tokens ("length") must still be a prefix of a JSON text, and most answers must
finish. A small model writes odd but valid JSON: that is the point.

Runtime: one seed per schema plus three more on a subset, four requests in flight (the server
fixture runs -np 4), modest max_tokens: tens of seconds on two cores.
"""
import glob
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import jsonschema
import openai
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = [json.load(open(p)) for p in sorted(glob.glob(os.path.join(ROOT, "tests/grammar/schemas/*.json")))]
ID = "SmolLM2-135M-Instruct.Q4_1"
# Schemas asked with several seeds: one of each family (flat, formats, patterns, ranges,
# composition, recursion, arrays).
SEEDED = {"flat_two_fields", "format_date", "pattern_anchored", "negative_range", "one_of_shapes",
          "recursive_tree", "int_array_bounds", "tool_arguments"}
EXTRA_SEEDS = (2, 3, 4)


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="unused", max_retries=0, timeout=120)


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


_STR = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"')
_STR_PART = re.compile(r'"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*(?:\\(?:u[0-9a-fA-F]{0,3})?)?')
_NUM = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_NUM_PART = re.compile(r"-?(?:0|[1-9][0-9]*)?(?:\.[0-9]*)?(?:[eE][-+]?[0-9]*)?")
_CLOSE = {"}": "{", "]": "["}


def is_json_prefix(text):
    """Whether `text` can be continued into a JSON text (the answer cut by max_tokens)."""
    stack, expect, i = [], "value", 0  # expect: value, value_or_close, key, key_or_close, colon, after, done

    def after_value():
        return "after" if stack else "done"

    while i < len(text):
        c = text[i]
        if c in " \t\r\n":
            i += 1
            continue
        if expect == "done":
            return False
        if c == '"':
            if expect not in ("value", "value_or_close", "key", "key_or_close"):
                return False
            m = _STR.match(text, i)
            if not m:
                return _STR_PART.fullmatch(text, i) is not None
            i = m.end()
            expect = "colon" if expect.startswith("key") else after_value()
        elif c in "{[":
            if expect not in ("value", "value_or_close"):
                return False
            stack.append(c)
            i += 1
            expect = "key_or_close" if c == "{" else "value_or_close"
        elif c in "}]":
            closable = ("after", "key_or_close") if c == "}" else ("after", "value_or_close")
            if not stack or stack[-1] != _CLOSE[c] or expect not in closable:
                return False
            stack.pop()
            i += 1
            expect = after_value()
        elif c == ":":
            if expect != "colon":
                return False
            i += 1
            expect = "value"
        elif c == ",":
            if expect != "after":
                return False
            i += 1
            expect = "key" if stack[-1] == "{" else "value"
        else:
            if expect not in ("value", "value_or_close"):
                return False
            word = next((w for w in ("true", "false", "null") if text.startswith(w, i)), None)
            if word:
                i += len(word)
                expect = after_value()
                continue
            if any(w.startswith(text[i:]) for w in ("true", "false", "null")):
                return True
            tok = re.match(r"[-+0-9.eE]*", text[i:]).group(0)
            if i + len(tok) == len(text):
                return _NUM_PART.fullmatch(tok) is not None
            if not tok or not _NUM.fullmatch(tok):
                return False
            i += len(tok)
            expect = after_value()
    return True


def ask(client, case, seed):
    r = client.chat.completions.create(
        model=ID,
        messages=[{"role": "system", "content": "You answer with JSON only."},
                  {"role": "user", "content": case["prompt"]}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True}},
        temperature=1, seed=seed, max_tokens=case["max_tokens"])
    return case, seed, r.choices[0].message.content, r.choices[0].finish_reason, r.usage.completion_tokens


def test_prefix_checker():
    assert is_json_prefix('{"a": [1, 2') and is_json_prefix('{"a": "unfin') and is_json_prefix('{"a": tr')
    assert is_json_prefix('') and is_json_prefix('{"a": -') and is_json_prefix('[{"k": 1}, {')
    assert not is_json_prefix('{"a" 1') and not is_json_prefix('{"a": 1}}') and not is_json_prefix('[1,,')
    assert not is_json_prefix('{"a": 1} x') and not is_json_prefix('{"a": nope')
    assert is_json_prefix('{"a": [true, -1.5e') and not is_json_prefix('[1.5e, 2]') and not is_json_prefix('{"a": 1,}')


def test_corpus_answers_validate(client):
    assert len(CORPUS) >= 40
    jobs = [(c, 1) for c in CORPUS] + [(c, s) for c in CORPUS if c["name"] in SEEDED for s in EXTRA_SEEDS]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda j: ask(client, *j), jobs))
    failures, n_stop, n_length = [], 0, 0
    for case, seed, text, finish, n_tokens in results:
        tag = f"{case['name']} seed={seed} finish={finish}: {text!r}"
        assert n_tokens <= case["max_tokens"], tag
        if finish == "stop":
            n_stop += 1
            try:
                errors = [e.message for e in validator(case["schema"]).iter_errors(json.loads(text))]
            except json.JSONDecodeError as e:
                errors = [f"not JSON: {e}"]
            if errors:
                failures.append(f"{tag} -> {errors[:3]}")
        elif finish == "length":
            n_length += 1
            if not is_json_prefix(text):
                failures.append(f"{tag} -> cut by max_tokens but not a JSON prefix")
        else:
            failures.append(f"{tag} -> unexpected finish_reason")
    assert not failures, "\n".join(failures)
    # Most answers finish within their budget (a runaway string or list is the model's right, not
    # a grammar bug, but it should be rare).
    assert n_stop >= 0.8 * len(results), f"only {n_stop} of {len(results)} finished ({n_length} cut)"


def test_json_object_response_format(client):
    r = client.chat.completions.create(
        model=ID, messages=[{"role": "user", "content": "Describe a cat as JSON."}],
        response_format={"type": "json_object"}, temperature=1, seed=7, max_tokens=96)
    c = r.choices[0]
    if c.finish_reason == "stop":
        assert isinstance(json.loads(c.message.content), dict)
    else:
        assert c.finish_reason == "length" and is_json_prefix(c.message.content)
        assert c.message.content.startswith("{")


def test_unenforceable_keyword_is_a_400_naming_it(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}, "required": ["n"]}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=ID, messages=[{"role": "user", "content": "A multiple of three as JSON."}],
            response_format={"type": "json_schema", "json_schema": {"name": "m3", "schema": schema, "strict": True}},
            max_tokens=16)
    assert "multipleOf" in str(e.value)
    # Not strict: the keyword is ignored and the rest still holds.
    r = client.chat.completions.create(
        model=ID, messages=[{"role": "user", "content": "A multiple of three as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "m3", "schema": schema, "strict": False}},
        temperature=1, seed=1, max_tokens=32)
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content)["n"], int)


def test_regex_and_choice(client, server):
    r = client.chat.completions.create(
        model=ID, messages=[{"role": "user", "content": "Give a date."}], temperature=1, seed=3, max_tokens=24,
        extra_body={"guided_regex": "[0-9]{4}-[0-9]{2}-[0-9]{2}"})
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", r.choices[0].message.content), r.choices[0].message.content
    r = client.chat.completions.create(
        model=ID, messages=[{"role": "user", "content": "Is water wet?"}], temperature=1, seed=3, max_tokens=8,
        extra_body={"structured_outputs": {"choice": ["yes", "no", "it depends"]}})
    assert r.choices[0].message.content in ("yes", "no", "it depends")
    assert r.choices[0].finish_reason == "stop"


def test_completion_json_schema(server):
    case = next(c for c in CORPUS if c["name"] == "nested_object")
    r = httpx.post(server.base + "/completion", timeout=120, json={
        "prompt": "A person with an address, as JSON: ", "json_schema": case["schema"],
        "n_predict": case["max_tokens"], "temperature": 1, "seed": 5}).json()
    if r["stop_type"] == "limit":
        assert is_json_prefix(r["content"])
    else:
        validator(case["schema"]).validate(json.loads(r["content"]))

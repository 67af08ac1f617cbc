#!/usr/bin/env python3
"""Writes tests/grammar/schema_cases.json: JSON Schemas with candidate JSON texts, each labelled
by PyPI `jsonschema` (Draft 2020-12, with its FormatChecker) as valid or not.

json_schema_test.cc compiles every schema to a grammar and checks that the grammar accepts a
text exactly when `accept` says so. `accept` is `valid`, except for the few valid texts listed in
`valid_but_refused` below: texts the grammar leaves out on purpose (header of
src/grammar/json_schema.h: property order, whitespace, canonical forms), each with its reason.
A text the grammar accepts must always be valid: this script fails if an entry says otherwise.

Run: python3 tests/grammar/make_schema_cases.py   (writes the file next to this script)
"""
import json
import os

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))

# (name, schema, texts that should be judged, valid texts the grammar refuses {text: reason})
CASES = []


def case(name, schema, texts, refused=None):
    CASES.append((name, schema, texts, refused or {}))


# ---- types ----
case("type-string", {"type": "string"},
     ['"hello"', '""', '"a\\"b"', '"\\u00e9t\\u00E9"', '"caf\u00e9 \u65e5\u672c"', '"\\ud83d\\ude00"',
      '"tab\\there"', '"\\/"', '5', 'null', '"unterminated', '"bad\\q"', '"raw\nnewline"'])
case("type-integer", {"type": "integer"},
     ['0', '-7', '42', '1234567890123456', '12345678901234567', '01', '1.5', '"1"', '-', '1e3', 'true'],
     refused={'12345678901234567': "integers have at most 16 digits",
              '1e3': "integers are written without an exponent"})
case("type-number", {"type": "number"},
     ['0', '-0.5', '3.14159', '1e10', '2.5E-3', '-1.0e+2', '.5', '1.', '01.5', '"1"', 'NaN', '1e1234'],
     refused={'1e1234': "exponents have at most 3 digits"})
case("type-boolean", {"type": "boolean"}, ['true', 'false', 'True', '0', 'null'])
case("type-null", {"type": "null"}, ['null', 'nul', '"null"', 'false'])
case("type-list", {"type": ["string", "integer"]}, ['"x"', '5', '5.5', 'null', 'true'])
case("nullable-type-list", {"type": ["string", "null"], "maxLength": 2},
     ['"ab"', 'null', '"abc"', '0'])
case("openapi-nullable", {"type": "integer", "nullable": True}, ['3', 'null', '"3"'])
case("type-array-any", {"type": "array"}, ['[]', '[1, "a", null, [true], {"k": 2}]', '[1,]', '{}'])
case("type-object-any", {"type": "object"},
     ['{}', '{"a": 1, "b": [1, 2], "c": {"d": null}}', '{"a" 1}', '[]', '{"a":1,}'])
case("empty-schema", {}, ['1', '"s"', 'null', '[1, {"a": [true]}]', '{"x": -2.5e3}', 'nope', '[1'])
case("true-schema", True, ['1', '{"a": null}', 'tru'])

# ---- objects ----
case("properties-required", {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"}},
    "required": ["name", "age"],
    "additionalProperties": False},
    ['{"name": "Ann", "age": 30}',
     '{"name":"Ann","age":30,"email":"a@b.c"}',
     '{"name": "Ann"}',
     '{"age": 30}',
     '{"name": "Ann", "age": "30"}',
     '{"name": "Ann", "age": 30, "extra": 1}',
     '{"age": 30, "name": "Ann"}',
     '{"name": "Ann", "age": 30, "name": "Bob"}',
     '{}'],
    refused={'{"age": 30, "name": "Ann"}': "properties come in the schema's order",
             '{"name": "Ann", "age": 30, "name": "Bob"}': "each property at most once"})
case("all-optional", {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
    "additionalProperties": False},
    ['{}', '{"a": 1}', '{"b": 2}', '{"c": 3}', '{"a": 1, "c": 3}', '{"b": 2, "c": 3}',
     '{"a": 1, "b": 2, "c": 3}', '{"a": 1,}', '{, "a": 1}', '{"d": 4}', '{"a": 1 "b": 2}'])
case("additional-true", {
    "type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    ['{"id": 1}', '{"id": 1, "note": "x", "more": [1]}', '{"id": 1, "id": "dup"}',
     '{"note": "x"}', '{"id": 1, "ids": 2}', '{"id": 1, "i": 2}'])
case("additional-schema", {
    "type": "object", "properties": {"id": {"type": "integer"}},
    "additionalProperties": {"type": "string"}},
    ['{}', '{"id": 1}', '{"id": 1, "x": "y"}', '{"x": "y", "z": "w"}', '{"x": 1}', '{"id": "one"}',
     '{"id": 1, "id": "dup"}'])
case("additional-only", {"type": "object", "additionalProperties": {"type": "boolean"}},
     ['{}', '{"a": true}', '{"a": true, "b": false}', '{"a": 1}'])
case("required-not-in-properties", {
    "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]},
    ['{"a": 1, "b": null}', '{"a": 1}', '{"b": 2, "a": 1}'],
    refused={'{"b": 2, "a": 1}': "required names without a schema come after the named properties"})
case("nested-objects", {
    "type": "object",
    "properties": {"user": {"type": "object",
                            "properties": {"first": {"type": "string"},
                                           "address": {"type": "object",
                                                       "properties": {"zip": {"type": "string", "minLength": 5,
                                                                              "maxLength": 5}},
                                                       "required": ["zip"], "additionalProperties": False}},
                            "required": ["first", "address"], "additionalProperties": False}},
    "required": ["user"], "additionalProperties": False},
    ['{"user": {"first": "A", "address": {"zip": "12345"}}}',
     '{\n  "user": {\n    "first": "A",\n    "address": {\n      "zip": "12345"\n    }\n  }\n}',
     '{"user": {"first": "A", "address": {"zip": "1234"}}}',
     '{"user": {"first": "A"}}',
     '{"user": {"first": "A", "address": {"zip": "12345", "city": "X"}}}'])
case("false-property", {
    "type": "object", "properties": {"a": {"type": "integer"}, "secret": False}},
    ['{"a": 1}', '{"a": 1, "secret": 2}', '{"a": 1, "other": 2}'])
case("escaped-keys", {
    "type": "object", "properties": {"say \"hi\"": {"type": "integer"}, "caf\u00e9": {"type": "integer"}},
    "required": ["say \"hi\"", "caf\u00e9"], "additionalProperties": False},
    ['{"say \\"hi\\"": 1, "caf\u00e9": 2}', '{"say "hi"": 1, "caf\u00e9": 2}'])
case("unevaluated-false", {
    "type": "object", "properties": {"a": {"type": "integer"}}, "unevaluatedProperties": False},
    ['{"a": 1}', '{"a": 1, "b": 2}'])

# ---- whitespace ----
case("whitespace", {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}},
                    "additionalProperties": False},
     ['{"a":[1,2]}', '{ "a" : [ 1 , 2 ] }', '{\n\t"a": [\n\t\t1,\n\t\t2\n\t]\n}',
      '{  "a": [1]}', '{"a": [1]}\n', ' {"a": [1]}', '{"a":\n                      [1]}'],
     refused={'{  "a": [1]}': "at most one space between tokens",
              '{"a": [1]}\n': "no whitespace after the value",
              ' {"a": [1]}': "no whitespace before the value",
              '{"a":\n                      [1]}': "at most 20 spaces after a newline"})

# ---- enum / const ----
case("enum-strings", {"enum": ["red", "green", "blue"]},
     ['"red"', '"blue"', '"Red"', '"redd"', '"re"', 'red'])
case("enum-mixed", {"enum": ["a", 1, None, True, [1, 2], {"k": "v"}]},
     ['"a"', '1', 'null', 'true', '[1,2]', '{"k":"v"}', 'false', '2', '[1, 2]'],
     refused={'[1, 2]': "enum values are written compactly"})
case("enum-with-type", {"type": "string", "enum": ["a", 1]}, ['"a"', '1'])
case("const", {"const": "fixed"}, ['"fixed"', '"fixe"', '"fixed2"'])
case("const-object", {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}},
                      "required": ["kind", "r"], "additionalProperties": False},
     ['{"kind": "circle", "r": 1.5}', '{"kind": "square", "r": 1}'])

# ---- anyOf / oneOf / allOf ----
case("anyOf", {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "integer", "minimum": 10}]},
     ['"abc"', '"abcd"', '10', '9', 'null'])
case("oneOf-discriminated", {"oneOf": [
    {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
     "required": ["kind", "x"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
     "required": ["kind", "y"], "additionalProperties": False}]},
    ['{"kind": "a", "x": 1}', '{"kind": "b", "y": "s"}', '{"kind": "a", "y": "s"}', '{"kind": "c", "x": 1}'])
case("anyOf-with-siblings", {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "additionalProperties": False, "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    ['{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}', '{}'])
case("allOf-merge", {"allOf": [
    {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
    {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}]},
    ['{"a": "x", "b": 1}', '{"a": "x"}', '{"b": 1}', '{"a": "x", "b": "y"}', '{"a": "x", "b": 1, "c": 2}'])
case("allOf-closed-branch", {"allOf": [
    {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
     "additionalProperties": False},
    {"properties": {"a": {"maxLength": 2}, "c": {"type": "integer"}}}]},
    ['{"a": "xy"}', '{"a": "xyz"}', '{"a": "x", "b": 1}', '{"c": 1}'])
case("allOf-ref", {
    "$defs": {"base": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}},
    "allOf": [{"$ref": "#/$defs/base"},
              {"properties": {"name": {"type": "string"}}, "required": ["name"]}],
    "unevaluatedProperties": False},
    ['{"id": 1, "name": "n"}', '{"id": 1}', '{"name": "n"}', '{"id": 1, "name": "n", "x": 0}'])

# ---- $ref ----
case("ref-defs", {
    "$defs": {"point": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                        "required": ["x", "y"], "additionalProperties": False}},
    "type": "object", "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
    "required": ["from", "to"], "additionalProperties": False},
    ['{"from": {"x": 1, "y": 2}, "to": {"x": 3, "y": 4}}', '{"from": {"x": 1}, "to": {"x": 3, "y": 4}}'])
case("ref-definitions", {
    "definitions": {"name": {"type": "string", "minLength": 1}},
    "type": "array", "items": {"$ref": "#/definitions/name"}},
    ['[]', '["a", "b"]', '[""]', '[1]'])
case("ref-recursive-tree", {
    "$defs": {"node": {"type": "object",
                       "properties": {"value": {"type": "integer"},
                                      "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "required": ["value"], "additionalProperties": False}},
    "$ref": "#/$defs/node"},
    ['{"value": 1}', '{"value": 1, "children": []}',
     '{"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]}',
     '{"value": 1, "children": [{"children": []}]}', '{"value": 1, "children": [{"value": "x"}]}'])
case("ref-root-recursion", {
    "type": "object", "properties": {"name": {"type": "string"}, "next": {"$ref": "#"}},
    "required": ["name"], "additionalProperties": False},
    ['{"name": "a"}', '{"name": "a", "next": {"name": "b", "next": {"name": "c"}}}',
     '{"name": "a", "next": {}}', '{"name": "a", "next": null}'])
case("ref-with-siblings", {
    "$defs": {"s": {"type": "string"}},
    "type": "object", "properties": {"a": {"$ref": "#/$defs/s", "maxLength": 2}},
    "additionalProperties": False},
    ['{"a": "xy"}', '{"a": "xyz"}', '{"a": 1}'])

# ---- arrays ----
case("items-min-max", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
     ['[1, 2]', '[1,2,3,4]', '[1]', '[1, 2, 3, 4, 5]', '[]', '[1, "2"]'])
case("min-items-only", {"type": "array", "items": {"type": "boolean"}, "minItems": 1},
     ['[true]', '[true, false, true]', '[]'])
case("max-items-zero", {"type": "array", "maxItems": 0}, ['[]', '[1]'])
case("prefix-items", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                      "items": False},
     ['[]', '["a"]', '["a", 1]', '["a", 1, 2]', '[1, "a"]'])
case("prefix-items-min", {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                          "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
     ['["a", 1]', '["a", 1, true]', '["a"]', '["a", 1, true, false]', '["a", 1, 2]'])
case("tuple-draft4-style", {"type": "array", "items": [{"type": "integer"}, {"type": "integer"}],
                            "additionalItems": False, "minItems": 2},
     ['[1, 2]', '[1]', '[1, 2, 3]'])

# ---- strings ----
case("min-max-length", {"type": "string", "minLength": 2, "maxLength": 3},
     ['"ab"', '"abc"', '"a"', '"abcd"', '"\u00e9\u00e9"', '"\\n\\t"', '"\\ud83d\\ude00\\ud83d\\ude00"',
      '"\U0001F600"', '"\u65e5\u672c\u8a9e"'])
case("pattern-anchored", {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"},
     ['"AB-123"', '"AB-1234"', '"ab-123"', '"xAB-123"', '"AB-12"'])
case("pattern-unanchored", {"type": "string", "pattern": "[0-9]{3}"},
     ['"123"', '"ab123cd"', '"12"', '"a1b2c3"'])
case("pattern-alternation", {"type": "string", "pattern": "^(cat|dog)s?$"},
     ['"cat"', '"dogs"', '"cats!"', '"bird"'])
case("pattern-escapes", {"type": "string", "pattern": "^\\d+(\\.\\d{1,2})?\\s?[a-z]*$"},
     ['"12.50 usd"', '"7"', '"7.123"', '"12.5eur"'])
case("pattern-quote", {"type": "string", "pattern": "^a\"b\\\\c$"},
     ['"a\\"b\\\\c"', '"a\\u0022b\\\\c"', '"ab"'],
     refused={'"a\\u0022b\\\\c"': "pattern strings use the short escapes"})
case("format-date", {"type": "string", "format": "date"},
     ['"2024-02-29"', '"2023-02-29"', '"2023-12-31"', '"2023-13-01"', '"2023-04-31"', '"2023-4-01"',
      '"1900-02-29"', '"2000-02-29"', '"0000-01-01"'])
case("format-time", {"type": "string", "format": "time"},
     ['"12:30:00Z"', '"23:59:59.123+02:00"', '"24:00:00Z"', '"12:30:00"', '"12:60:00Z"'])
case("format-date-time", {"type": "string", "format": "date-time"},
     ['"2024-05-01T08:00:00Z"', '"2024-05-01T08:00:00.5-05:30"', '"2024-05-01 08:00:00Z"',
      '"2024-05-01T08:00Z"'])
case("format-uuid", {"type": "string", "format": "uuid"},
     ['"123e4567-e89b-12d3-a456-426614174000"', '"123E4567-E89B-12D3-A456-426614174000"',
      '"123e4567e89b12d3a456426614174000"', '"123e4567-e89b-12d3-a456-42661417400"'],
     )
case("format-email", {"type": "string", "format": "email"},
     ['"ann@example.com"', '"a.b+c@mail.example.org"', '"nobody"', '"@example.com"'],
     refused={'"@example.com"': "an address needs a local part (jsonschema only looks for '@')"})
case("format-ipv4", {"type": "string", "format": "ipv4"},
     ['"192.168.0.1"', '"255.255.255.255"', '"256.1.1.1"', '"01.2.3.4"', '"1.2.3"'])

# ---- integer and number bounds ----
case("int-range", {"type": "integer", "minimum": -15, "maximum": 215},
     ['-15', '-16', '0', '-0', '9', '99', '100', '199', '200', '215', '216', '1000', '-1', '-10'],
     refused={'-0': "-0 is written 0"})
case("int-exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
     ['0', '1', '9', '10', '-1'])
case("int-min-only", {"type": "integer", "minimum": 18},
     ['17', '18', '19', '99', '100', '123456', '0', '-18'])
case("int-max-only", {"type": "integer", "maximum": -3},
     ['-3', '-4', '-1000', '-2', '0', '5'])
case("int-fraction-bounds", {"type": "integer", "minimum": 1.5, "maximum": 3.5},
     ['1', '2', '3', '4'])
case("int-draft4-exclusive", {"type": "integer", "minimum": 5, "exclusiveMinimum": True, "maximum": 7},
     ['5', '6', '7', '8'])
case("number-range", {"type": "number", "minimum": 0, "maximum": 100},
     ['0', '0.5', '100', '100.0', '100.5', '-0.1', '99.999', '42', '101', '-1'])
case("number-exclusive", {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1},
     ['-1', '-0.5', '0', '0.99', '1', '-1.0', '1.0', '-0.000', '0.000001'],
     refused={'-0.000': "zero is written without a sign"})
case("number-negative-range", {"type": "number", "minimum": -10, "maximum": -2},
     ['-10', '-10.5', '-2', '-2.0', '-1.99', '-5.25', '0', '-3'])
case("multipleOf-one", {"type": "number", "multipleOf": 1}, ['3', '-2', '2.5'])


def reject_constant(name):
    raise ValueError(name + " is not JSON")


def oracle_schema(s):
    """jsonschema does not know OpenAPI's `nullable`: spell it as a type list for the oracle."""
    if isinstance(s, list):
        return [oracle_schema(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: oracle_schema(v) for k, v in s.items() if k != "nullable"}
    if s.get("nullable") is True and "type" in s:
        t = s["type"] if isinstance(s["type"], list) else [s["type"]]
        out["type"] = t + ["null"]
    return out


def main():
    out = []
    for name, schema, texts, refused in CASES:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        if isinstance(schema, dict) and isinstance(schema.get("items"), list):
            cls = jsonschema.Draft7Validator
        if isinstance(schema, dict) and isinstance(schema.get("exclusiveMinimum"), bool):
            cls = jsonschema.Draft4Validator
        cls.check_schema(schema)
        v = cls(oracle_schema(schema), format_checker=cls.FORMAT_CHECKER)
        entries = []
        for t in texts:
            try:
                inst = json.loads(t, parse_constant=reject_constant)
                valid = v.is_valid(inst)
            except (json.JSONDecodeError, ValueError):
                valid = False
            accept = valid and t not in refused
            if t in refused and not valid:
                raise SystemExit(f"{name}: {t!r} is listed as refused but is not valid")
            entries.append({"text": t, "valid": valid, "accept": accept})
        out.append({"name": name, "schema": schema, "cases": entries})
    path = os.path.join(HERE, "schema_cases.json")
    from importlib.metadata import version
    doc = {"produced_by": "tests/grammar/make_schema_cases.py (do not edit by hand)",
           "jsonschema": version("jsonschema"), "schemas": out}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    n = sum(len(c["cases"]) for c in out)
    print(f"wrote {path}: {len(out)} schemas, {n} texts, "
          f"{sum(e['valid'] for c in out for e in c['cases'])} valid")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes tests/grammar/schemas/NN_name.json: a corpus of JSON Schemas of increasing difficulty,
each with a prompt for the model, a max_tokens budget, and example texts that PyPI `jsonschema`
(with its FormatChecker) judges valid / invalid. json_schema_test.cc checks that every schema
compiles (strict) and that the grammar agrees on the examples; tests/e2e/test_structured.py asks
the default model for each schema and validates its answers with `jsonschema`.

Run: python3 tests/grammar/make_corpus.py
"""
import json
import os

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "schemas")

CORPUS = []


def add(name, prompt, schema, valid, invalid, max_tokens=96):
    CORPUS.append(dict(name=name, prompt=prompt, max_tokens=max_tokens, schema=schema,
                       valid=valid, invalid=invalid))


def obj(props, required=None, **kw):
    s = {"type": "object", "properties": props,
         "required": list(props) if required is None else required, "additionalProperties": False}
    s.update(kw)
    return s


S = lambda n=24, **kw: dict({"type": "string", "maxLength": n}, **kw)  # noqa: E731
I = lambda lo=None, hi=None: dict({"type": "integer"}, **({"minimum": lo} if lo is not None else {}),  # noqa: E731
                                  **({"maximum": hi} if hi is not None else {}))

add("flat_two_fields", "Give a person's name and age as JSON.",
    obj({"name": S(20), "age": I(0, 120)}),
    ['{"name": "Ann", "age": 31}', '{"name":"Bo","age":0}'],
    ['{"name": "Ann"}', '{"name": "Ann", "age": 121}'])
add("bool_and_string", "Is the sky blue? Answer as JSON with a short reason.",
    obj({"answer": {"type": "boolean"}, "reason": S(40)}),
    ['{"answer": true, "reason": "Rayleigh scattering"}'], ['{"answer": "yes", "reason": ""}'])
add("single_enum", "Pick a primary color as JSON.",
    obj({"color": {"enum": ["red", "yellow", "blue"]}}),
    ['{"color": "blue"}'], ['{"color": "green"}'])
add("bounded_number", "Give the price of a coffee in dollars as JSON.",
    obj({"price": {"type": "number", "minimum": 0, "maximum": 1000}}),
    ['{"price": 3.5}', '{"price": 1000}'], ['{"price": -1}', '{"price": 1000.5}'])
add("optional_field", "Describe a book as JSON (title, optional year, pages).",
    obj({"title": S(30), "year": I(1450, 2030), "pages": I(1, 5000)}, required=["title", "pages"]),
    ['{"title": "Dune", "pages": 412}', '{"title": "Dune", "year": 1965, "pages": 412}'],
    ['{"title": "Dune", "year": 1965}'])
add("nullable_type_list", "Give a user's nickname as JSON (null if none).",
    obj({"user": S(16), "nickname": {"type": ["string", "null"], "maxLength": 16}}),
    ['{"user": "ann", "nickname": null}', '{"user": "ann", "nickname": "A"}'],
    ['{"user": "ann", "nickname": 3}'])
add("const_discriminator", "Describe a circle as JSON.",
    obj({"shape": {"const": "circle"}, "radius": {"type": "number", "minimum": 0, "maximum": 100}}),
    ['{"shape": "circle", "radius": 2.5}'], ['{"shape": "square", "radius": 2}'])
add("string_array", "List up to three fruits as JSON.",
    obj({"fruits": {"type": "array", "items": S(16), "maxItems": 3}}),
    ['{"fruits": ["apple", "pear"]}', '{"fruits": []}'], ['{"fruits": ["a", "b", "c", "d"]}'])
add("int_array_bounds", "Give between one and four lucky numbers from 1 to 10 as JSON.",
    obj({"numbers": {"type": "array", "items": I(1, 10), "minItems": 1, "maxItems": 4}}),
    ['{"numbers": [7]}', '{"numbers": [1, 2, 3, 10]}'], ['{"numbers": []}', '{"numbers": [11]}'])
add("nested_object", "Give a person with an address as JSON.",
    obj({"name": S(20), "address": obj({"street": S(30), "city": S(20), "zip": S(10)})}),
    ['{"name": "Ann", "address": {"street": "1 Main St", "city": "Springfield", "zip": "12345"}}'],
    ['{"name": "Ann", "address": {"street": "1 Main St", "city": "Springfield"}}'])
add("format_date", "When was the Eiffel Tower opened? Answer as JSON.",
    obj({"event": S(30), "date": {"type": "string", "format": "date"}}),
    ['{"event": "opening", "date": "1889-03-31"}'], ['{"event": "x", "date": "1889-02-30"}'])
add("format_uuid", "Create a record with a random id as JSON.",
    obj({"id": {"type": "string", "format": "uuid"}, "label": S(20)}),
    ['{"id": "123e4567-e89b-12d3-a456-426614174000", "label": "a"}'], ['{"id": "123", "label": "a"}'])
add("format_email", "Give a contact with an email address as JSON.",
    obj({"name": S(20), "email": {"type": "string", "format": "email"}}),
    ['{"name": "Ann", "email": "ann@example.com"}'], ['{"name": "Ann", "email": "ann"}'], max_tokens=128)
add("format_date_time", "When does the meeting start? Answer as JSON.",
    obj({"title": S(24), "start": {"type": "string", "format": "date-time"}}),
    ['{"title": "Sync", "start": "2024-06-01T09:30:00Z"}'], ['{"title": "Sync", "start": "2024-06-01"}'])
add("format_time", "At what time does the shop open? Answer as JSON.",
    obj({"opens": {"type": "string", "format": "time"}}),
    ['{"opens": "09:00:00+01:00"}'], ['{"opens": "9am"}'])
add("format_ipv4", "Give the address of a local server as JSON.",
    obj({"host": S(20), "ip": {"type": "string", "format": "ipv4"}}),
    ['{"host": "nas", "ip": "192.168.1.20"}'], ['{"host": "nas", "ip": "300.1.1.1"}'])
add("pattern_anchored", "Give a product code like ABC-1234 as JSON.",
    obj({"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}}),
    ['{"code": "XYZ-0042"}'], ['{"code": "xyz-0042"}', '{"code": "XYZ-42"}'])
add("pattern_phone", "Give a phone number as JSON.",
    obj({"phone": {"type": "string", "pattern": "^\\+?[0-9]{7,12}$"}}),
    ['{"phone": "+4930123456"}'], ['{"phone": "030-123"}'])
add("integer_enum", "Pick a dice face as JSON.",
    obj({"face": {"type": "integer", "enum": [1, 2, 3, 4, 5, 6]}}),
    ['{"face": 4}'], ['{"face": 7}'])
add("negative_range", "Give today's temperature in Celsius as JSON.",
    obj({"city": S(20), "celsius": I(-50, 60)}),
    ['{"city": "Oslo", "celsius": -12}'], ['{"city": "Oslo", "celsius": -51}'])
add("exclusive_bounds", "Rate the movie strictly between 0 and 10 as JSON.",
    obj({"movie": S(24), "rating": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}),
    ['{"movie": "Up", "rating": 9}'], ['{"movie": "Up", "rating": 10}'])
add("any_of_scalar", "Give an identifier (a name or a number) as JSON.",
    obj({"id": {"anyOf": [S(12), I(0, 99999)]}}),
    ['{"id": "abc"}', '{"id": 42}'], ['{"id": true}'])
add("one_of_shapes", "Describe one geometric shape as JSON.",
    {"oneOf": [obj({"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 0, "maximum": 50}}),
               obj({"kind": {"const": "rect"}, "w": I(0, 50), "h": I(0, 50)})]},
    ['{"kind": "circle", "r": 1.5}', '{"kind": "rect", "w": 2, "h": 3}'], ['{"kind": "rect", "r": 1}'])
add("all_of_merge", "Describe an employee as JSON.",
    {"allOf": [{"type": "object", "properties": {"name": S(20)}, "required": ["name"]},
               {"type": "object", "properties": {"salary": I(0, 500000)}, "required": ["salary"]}],
     "unevaluatedProperties": False},
    ['{"name": "Ann", "salary": 50000}'], ['{"name": "Ann"}', '{"name": "Ann", "salary": 1, "x": 1}'])
add("defs_reuse", "Give a trip between two cities as JSON.",
    {"$defs": {"place": obj({"city": S(20), "country": S(20)})},
     "type": "object", "properties": {"from": {"$ref": "#/$defs/place"}, "to": {"$ref": "#/$defs/place"}},
     "required": ["from", "to"], "additionalProperties": False},
    ['{"from": {"city": "Paris", "country": "France"}, "to": {"city": "Rome", "country": "Italy"}}'],
    ['{"from": {"city": "Paris"}, "to": {"city": "Rome", "country": "Italy"}}'], max_tokens=128)
add("array_of_objects", "List up to three students and their grades as JSON.",
    obj({"students": {"type": "array", "maxItems": 3,
                      "items": obj({"name": S(16), "grade": {"enum": ["A", "B", "C", "D", "F"]}})}}),
    ['{"students": [{"name": "Ann", "grade": "A"}]}'], ['{"students": [{"name": "Ann", "grade": "E"}]}'],
    max_tokens=128)
add("prefix_items_tuple", "Give a name, an age and whether they vote, as a JSON array.",
    {"type": "array", "prefixItems": [S(16), I(0, 120), {"type": "boolean"}], "items": False, "minItems": 3},
    ['["Ann", 31, true]'], ['["Ann", 31]', '["Ann", 31, true, 1]'])
add("string_lengths", "Give a username of 3 to 12 characters and a PIN of 4 characters as JSON.",
    obj({"username": {"type": "string", "minLength": 3, "maxLength": 12},
         "pin": {"type": "string", "minLength": 4, "maxLength": 4}}),
    ['{"username": "ann", "pin": "1234"}'], ['{"username": "an", "pin": "1234"}'])
add("matrix_2x2", "Give a 2 by 2 matrix of small integers as JSON.",
    obj({"matrix": {"type": "array", "minItems": 2, "maxItems": 2,
                    "items": {"type": "array", "minItems": 2, "maxItems": 2, "items": I(-9, 9)}}}),
    ['{"matrix": [[1, 0], [0, 1]]}'], ['{"matrix": [[1, 0]]}', '{"matrix": [[1, 0, 0], [0, 1]]}'])
add("additional_properties_schema", "Give the stock count of a few items as a JSON object.",
    {"type": "object", "additionalProperties": I(0, 999)},
    ['{"apples": 3, "pears": 0}', '{}'], ['{"apples": -1}'], max_tokens=64)
add("recursive_tree", "Describe a small family tree as JSON.",
    {"$defs": {"node": obj({"name": S(12), "children": {"type": "array", "maxItems": 2,
                                                          "items": {"$ref": "#/$defs/node"}}},
                           required=["name"])},
     "$ref": "#/$defs/node"},
    ['{"name": "Ann", "children": [{"name": "Bo"}]}'], ['{"children": []}'], max_tokens=160)
add("linked_list_root_ref", "Give a short chain of steps as nested JSON.",
    obj({"step": S(20), "next": {"$ref": "#"}}, required=["step"]),
    ['{"step": "mix", "next": {"step": "bake"}}'], ['{"step": "mix", "next": {}}'], max_tokens=160)
add("type_list_scalar", "Give the height of a mountain (a number or a description) as JSON.",
    obj({"mountain": S(20), "height": {"type": ["number", "string"], "maxLength": 20,
                                       "minimum": 0, "maximum": 9000}}),
    ['{"mountain": "K2", "height": 8611}', '{"mountain": "K2", "height": "very high"}'],
    ['{"mountain": "K2", "height": null}'])
add("int_or_null", "How many moons does Mars have? Answer as JSON.",
    obj({"planet": S(12), "moons": {"type": ["integer", "null"], "minimum": 0, "maximum": 200}}),
    ['{"planet": "Mars", "moons": 2}', '{"planet": "Mars", "moons": null}'], ['{"planet": "Mars", "moons": -2}'])
add("mixed_enum", "Pick a setting value as JSON.",
    obj({"value": {"enum": ["auto", 0, 1, True, None]}}),
    ['{"value": "auto"}', '{"value": null}'], ['{"value": "manual"}'])
add("const_object_field", "Give the version header as JSON.",
    obj({"header": {"const": {"v": 1, "fmt": "json"}}, "body": S(20)}),
    ['{"header": {"v":1,"fmt":"json"}, "body": "hi"}'], ['{"header": {"v": 2}, "body": "hi"}'])
add("ten_fields", "Describe a car as JSON.",
    obj({"make": S(12), "model": S(12), "year": I(1900, 2030), "color": S(10), "doors": I(1, 6),
         "electric": {"type": "boolean"}, "price": {"type": "number", "minimum": 0, "maximum": 1000000},
         "km": I(0, 2000000), "owner": S(16), "plate": {"type": "string", "pattern": "^[A-Z0-9]{2,8}$"}}),
    ['{"make": "VW", "model": "Golf", "year": 2019, "color": "red", "doors": 5, "electric": false, '
     '"price": 15000, "km": 42000, "owner": "Ann", "plate": "B1234"}'],
    ['{"make": "VW"}'], max_tokens=160)
add("draft7_definitions", "Give a list of tags as JSON.",
    {"$schema": "http://json-schema.org/draft-07/schema#",
     "definitions": {"tag": {"type": "string", "minLength": 1, "maxLength": 12}},
     "type": "object", "properties": {"tags": {"type": "array", "items": {"$ref": "#/definitions/tag"},
                                               "maxItems": 4}},
     "required": ["tags"], "additionalProperties": False},
    ['{"tags": ["a", "b"]}'], ['{"tags": [""]}'])
add("optional_nested", "Describe a user with optional settings as JSON.",
    obj({"user": S(16), "settings": obj({"theme": {"enum": ["light", "dark"]}, "font": I(8, 32)},
                                        required=["theme"]),
         "active": {"type": "boolean"}}, required=["user", "active"]),
    ['{"user": "ann", "active": true}', '{"user": "ann", "settings": {"theme": "dark"}, "active": false}'],
    ['{"user": "ann", "settings": {}, "active": true}'])
add("deep_nesting", "Give a nested configuration as JSON.",
    obj({"a": obj({"b": obj({"c": obj({"d": S(10), "n": I(0, 9)})})})}),
    ['{"a": {"b": {"c": {"d": "x", "n": 1}}}}'], ['{"a": {"b": {"c": {"d": "x"}}}}'])
add("any_of_refs", "Give a payment method as JSON.",
    {"$defs": {"card": obj({"type": {"const": "card"}, "last4": {"type": "string", "pattern": "^[0-9]{4}$"}}),
               "cash": obj({"type": {"const": "cash"}, "currency": {"enum": ["EUR", "USD", "GBP"]}})},
     "anyOf": [{"$ref": "#/$defs/card"}, {"$ref": "#/$defs/cash"}]},
    ['{"type": "card", "last4": "4242"}', '{"type": "cash", "currency": "EUR"}'],
    ['{"type": "card", "last4": "42"}'])
add("enum_array", "Pick at least two weekdays as JSON.",
    obj({"days": {"type": "array", "minItems": 2, "maxItems": 5,
                  "items": {"enum": ["mon", "tue", "wed", "thu", "fri"]}}}),
    ['{"days": ["mon", "fri"]}'], ['{"days": ["mon"]}', '{"days": ["mon", "sun"]}'])
add("pattern_unanchored", "Give a sentence that mentions a year as JSON.",
    obj({"text": {"type": "string", "pattern": "(19|20)[0-9]{2}"}}),
    ['{"text": "It happened in 1999."}'], ['{"text": "long ago"}'], max_tokens=128)
add("numbers_mixed", "Give measurements of a room as JSON.",
    obj({"width_m": {"type": "number", "exclusiveMinimum": 0, "maximum": 100},
         "height_m": {"type": "number", "minimum": 1, "maximum": 10},
         "windows": I(0, 20)}),
    ['{"width_m": 4.25, "height_m": 2.5, "windows": 2}'], ['{"width_m": 0, "height_m": 2.5, "windows": 2}'])
add("invoice", "Write a small invoice as JSON.",
    obj({"number": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
         "date": {"type": "string", "format": "date"},
         "lines": {"type": "array", "minItems": 1, "maxItems": 3,
                   "items": obj({"item": S(16), "qty": I(1, 99),
                                 "unit_price": {"type": "number", "minimum": 0, "maximum": 10000}})},
         "paid": {"type": "boolean"}}),
    ['{"number": "INV-0001", "date": "2024-01-31", "lines": [{"item": "pen", "qty": 2, "unit_price": 1.5}], '
     '"paid": false}'],
    ['{"number": "INV-1", "date": "2024-01-31", "lines": [], "paid": false}'], max_tokens=192)
add("calendar_event", "Create a calendar event as JSON.",
    obj({"id": {"type": "string", "format": "uuid"}, "title": S(24),
         "start": {"type": "string", "format": "date-time"},
         "duration_min": I(5, 480), "visibility": {"enum": ["public", "private"]},
         "attendees": {"type": "array", "maxItems": 3, "items": {"type": "string", "format": "email"}}},
        required=["id", "title", "start", "duration_min", "visibility"]),
    ['{"id": "123e4567-e89b-12d3-a456-426614174000", "title": "Sync", "start": "2024-06-01T09:30:00Z", '
     '"duration_min": 30, "visibility": "private"}'],
    ['{"id": "x", "title": "Sync", "start": "2024-06-01T09:30:00Z", "duration_min": 30, "visibility": "private"}'],
    max_tokens=192)
add("all_of_refs_unevaluated", "Describe an admin user as JSON.",
    {"$defs": {"base": {"type": "object", "properties": {"id": I(1, 10**6), "name": S(16)},
                        "required": ["id", "name"]}},
     "allOf": [{"$ref": "#/$defs/base"},
               {"properties": {"role": {"const": "admin"}, "level": I(1, 5)}, "required": ["role"]}],
     "unevaluatedProperties": False},
    ['{"id": 1, "name": "root", "role": "admin"}'], ['{"id": 1, "name": "root", "role": "user"}'])
add("tool_arguments", "Call a weather tool for Paris: give its arguments as JSON.",
    obj({"location": obj({"city": S(20), "country_code": {"type": "string", "pattern": "^[A-Z]{2}$"}}),
         "unit": {"enum": ["celsius", "fahrenheit"]},
         "days": I(1, 7),
         "include": {"type": "array", "maxItems": 3, "items": {"enum": ["wind", "rain", "uv"]}}},
        required=["location", "unit"]),
    ['{"location": {"city": "Paris", "country_code": "FR"}, "unit": "celsius"}'],
    ['{"location": {"city": "Paris", "country_code": "France"}, "unit": "celsius"}'], max_tokens=128)
add("expression_tree", "Write the arithmetic expression 1 + 2 as a JSON tree.",
    {"$defs": {"expr": {"oneOf": [
        obj({"num": I(-99, 99)}),
        obj({"op": {"enum": ["+", "-", "*"]}, "left": {"$ref": "#/$defs/expr"},
             "right": {"$ref": "#/$defs/expr"}})]}},
     "$ref": "#/$defs/expr"},
    ['{"op": "+", "left": {"num": 1}, "right": {"num": 2}}', '{"num": 3}'],
    ['{"op": "+", "left": {"num": 1}}'], max_tokens=160)


def large_nested():
    """50 properties in all: 20 scalars at the top, 3 nested objects of 10 each."""
    kinds = [S(8), I(0, 100), {"type": "boolean"}, {"enum": ["a", "b", "c"]},
             {"type": "number", "minimum": 0, "maximum": 10}]
    top = {f"field_{i:02d}": kinds[i % 5] for i in range(20)}
    for g in range(3):
        top[f"group_{g}"] = obj({f"g{g}_item_{i}": kinds[(i + g) % 5] for i in range(10)},
                                required=[f"g{g}_item_{i}" for i in range(0, 10, 2)])
    return obj(top, required=[k for i, k in enumerate(top) if i % 3 == 0])


add("large_nested", "Fill in the form as JSON.", large_nested(), [], ['{}'], max_tokens=400)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith(".json"):
            os.remove(os.path.join(OUT, f))
    for i, c in enumerate(CORPUS, 1):
        cls = jsonschema.validators.validator_for(c["schema"], default=jsonschema.Draft202012Validator)
        cls.check_schema(c["schema"])
        v = cls(c["schema"], format_checker=cls.FORMAT_CHECKER)
        for t in c["valid"]:
            assert v.is_valid(json.loads(t)), (c["name"], t)
        for t in c["invalid"]:
            try:
                ok = v.is_valid(json.loads(t))
            except json.JSONDecodeError:
                ok = False
            assert not ok, (c["name"], t)
        path = os.path.join(OUT, f"{i:02d}_{c['name']}.json")
        with open(path, "w") as f:
            json.dump(c, f, indent=1, ensure_ascii=False)
            f.write("\n")
    print(f"wrote {len(CORPUS)} schemas to {OUT}")


if __name__ == "__main__":
    main()

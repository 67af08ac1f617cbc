#!/usr/bin/env python3
"""Writes the seed corpus of safetensors_fuzzer (tests/loader/safetensors_corpus/): small
valid files (several dtypes, metadata, a scalar, an empty tensor) and a few corrupt ones.
Run from anywhere; it rewrites only the files it names."""
import json, os, struct

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "safetensors_corpus")
os.makedirs(here, exist_ok=True)

def image(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data

def put(name, b):
    with open(os.path.join(here, name), "wb") as f:
        f.write(b)

put("valid_f32.st", image({"__metadata__": {"format": "pt"},
                           "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}},
                          struct.pack("<6f", *range(6))))
put("valid_mixed.st", image({"a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]},
                             "b": {"dtype": "BF16", "shape": [1, 1, 2], "data_offsets": [4, 8]},
                             "c": {"dtype": "I64", "shape": [1], "data_offsets": [8, 16]},
                             "s": {"dtype": "F32", "shape": [], "data_offsets": [16, 20]},
                             "e": {"dtype": "F32", "shape": [0, 4], "data_offsets": [20, 20]}},
                            bytes(20)))
put("empty.st", b"")
put("header_only.st", image({}))
put("truncated.st", image({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(7)))
put("overlap.st", image({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                         "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))

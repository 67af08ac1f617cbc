#!/usr/bin/env python3
"""The default model with its quantized matrices widened to F16 (or Q8_0): a target for
draft-model speculation that the default model itself can draft for.

No smaller model shares SmolLM2-135M's vocabulary here, so the only draft/target pair that
exists is the same network at two widths: the Q4_1 file drafts (fast: 0.56 bytes a weight) for
the F16 one (2 bytes a weight, bound by memory bandwidth at about a third of the speed), whose
greedy answers are nearly the Q4_1 ones (the F16 weights are the Q4_1 values, rounded to F16;
the activations are no longer quantized to 8 bits). A pair of this kind (a low-bit quant drafting
for a high-precision one) is a real use of `--model-draft`, and it measures what the draft path
costs and returns.

Every tensor of the input is dequantized with the `gguf` package (its reference dequantizers)
and written as F16 (norms and other F32 tensors stay F32); every metadata key is copied
(general.file_type set to 1, "mostly F16", or 7 for Q8_0, which the `gguf` package quantizes).

Usage: python3 scripts/make_wide_model.py [-i models/SmolLM2-135M-Instruct.Q4_1.gguf]
       [-o models/SmolLM2-135M-Instruct.F16.gguf] [--type F16|Q8_0]
"""
import argparse
import os
import sys

import numpy as np

import gguf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FILE_TYPE = {"F16": 1, "Q8_0": 7}


def copy_field(w, f):
    """One metadata key of a GGUFReader field into a GGUFWriter."""
    vtype = f.types[0]
    value = f.contents()
    if vtype == gguf.GGUFValueType.ARRAY:
        w.add_key_value(f.name, value, vtype, sub_type=f.types[-1])
    else:
        w.add_key_value(f.name, value, vtype)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-i", "--input", default=os.path.join(ROOT, "models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("-o", "--output", help="default: the input's name with F16 (or Q8_0) for its type")
    ap.add_argument("--type", default="F16", choices=sorted(FILE_TYPE))
    a = ap.parse_args()
    r = gguf.GGUFReader(a.input)
    out = a.output
    if not out:
        base = os.path.basename(a.input)
        stem = base[: -len(".gguf")] if base.endswith(".gguf") else base
        stem = stem.rsplit(".", 1)[0] if "." in stem else stem
        out = os.path.join(os.path.dirname(a.input), f"{stem}.{a.type}.gguf")
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(out + ".part", arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == "general.file_type":
            w.add_file_type(FILE_TYPE[a.type])
            continue
        copy_field(w, f)
    n_wide = 0
    for t in r.tensors:
        qtype = gguf.GGMLQuantizationType(t.tensor_type)
        if qtype in (gguf.GGMLQuantizationType.F32,):
            w.add_tensor(t.name, np.asarray(t.data))
            continue
        x = gguf.quants.dequantize(np.asarray(t.data), qtype).astype(np.float32)
        if a.type == "F16":
            w.add_tensor(t.name, x.astype(np.float16))
        else:
            q = gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(t.name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        n_wide += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(out + ".part", out)
    print(f"{out}: {n_wide} tensors widened to {a.type}, {os.path.getsize(out) / 2**20:.0f} MiB")


if __name__ == "__main__":
    sys.exit(main())

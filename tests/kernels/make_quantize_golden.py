#!/usr/bin/env python3
"""Writes quantize_ggml_golden.inc: llama.cpp's own quantizer bytes for Q2_K, Q3_K, IQ4_NL,
IQ4_XS and MXFP4, the oracle of ferrox's quantize_row_ggml (src/kernels/quantize_ggml.cc).

  python3 tests/kernels/make_quantize_golden.py > tests/kernels/quantize_ggml_golden.inc

Calls ggml_quantize_chunk(type, src, dst, 0, 1, 512, NULL) (no importance matrix: what
llama-quantize without --imatrix runs) through ctypes on the libggml-base that
llama-cpp-python ships, on rows made by a small generator that quantize_ggml_test.cc
reproduces exactly: splitmix64 integers turned into floats by exact conversions and single
float32 products (no library maths), so both sides see the same bits without storing them.
17 kinds of rows x 8 seeds, 512 floats each (2 super-blocks, 16 blocks of 32): bell-shaped
values at random scales, outliers, all zeros, constants, values below ggml's "all zero"
threshold 1e-15, denormals, uniform values, zeroed sub-blocks, one nonzero per block, powers of
two and the floats just below them (MXFP4's log2 boundary), small integers (rounding ties),
all-positive and all-negative rows, huge values (~1e32, where ggml's sums overflow to inf),
sub-blocks of very different scales, heavy tails. Stored: for every row the FNV-1a 64 of its
input floats (the generators agree) and of each type's bytes (tens of KB in all). Then a bulk of
1024 more rows of the ordinary kinds (BULK_KINDS, seeds from 100), one FNV-1a 64 over all their
inputs and one per type over all their bytes: the rare cases where two float orders of the same
formula differ by an ulp that survives the fp16 rounding show up there.
"""
import ctypes
import glob
import os
import sys

import numpy as np

ROW = 512
N_KINDS = 17
N_SEEDS = 8
BULK_KINDS = [0, 1, 7, 8, 12, 13, 15, 16]
N_BULK = 1024
MASK = (1 << 64) - 1
MULTS = [1.0, 0.7310586, 1.3333334, 0.9100000262260437]  # float32 values
f32 = np.float32

# ggml type ids (ggml.h) and ferrox's DType names
TYPES = [(10, "kQ2_K", 84), (11, "kQ3_K", 110), (20, "kIQ4_NL", 18 * 8), (23, "kIQ4_XS", 136),
         (39, "kMXFP4", 17 * 8)]  # bytes per 256 elements


class SplitMix:
    def __init__(self, seed):
        self.s = seed & MASK

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def pow2(e):
    return f32(2.0 ** e)  # exact for -149 <= e <= 127


def make_row(kind, seed):
    r = SplitMix(seed * 1000003 + kind)

    def bell():  # sum of 3 uniform 16-bit ints, centred: an exact int in [-98304, 98301]
        return (r.next() >> 48) + (r.next() >> 48) + (r.next() >> 48) - 98304

    def uni():  # uniform 24-bit signed int
        return (r.next() >> 40) - (1 << 23)

    e = -int(r.next() % 16) - 8
    s = f32(MULTS[r.next() % 4]) * pow2(e - 8)
    x = np.zeros(ROW, dtype=np.float32)
    if kind == 0:  # bell-shaped at a random scale
        for i in range(ROW):
            x[i] = f32(bell()) * s
    elif kind == 1:  # outliers: one in 64 times 40
        for i in range(ROW):
            v = f32(bell()) * s
            if r.next() % 64 == 0:
                v = v * f32(40.0)
            x[i] = v
    elif kind == 2:  # zeros
        pass
    elif kind == 3:  # a positive constant
        x[:] = f32(abs(bell()) + 1) * s
    elif kind == 4:  # a negative constant
        x[:] = -(f32(abs(bell()) + 1) * s)
    elif kind == 5:  # tiny: |x| up to ~1.3e-15, around ggml's GROUP_MAX_EPS (1e-15)
        for i in range(ROW):
            x[i] = f32(bell()) * pow2(-66)
    elif kind == 6:  # denormals
        for i in range(ROW):
            x[i] = f32(uni()) * pow2(-149)
    elif kind == 7:  # uniform in [-1, 1)
        for i in range(ROW):
            x[i] = f32(uni()) * pow2(-23)
    elif kind == 8:  # half the sub-blocks of 16 zero
        for g in range(ROW // 16):
            z = r.next() % 2
            for i in range(16):
                v = f32(bell()) * s
                x[16 * g + i] = f32(0.0) if z else v
    elif kind == 9:  # one nonzero per block of 32
        for b in range(ROW // 32):
            pos = r.next() % 32
            x[32 * b + pos] = f32(bell()) * s
    elif kind == 10:  # powers of two, the floats just below them, 1.5 times them
        below = f32(1.0) - pow2(-24)
        for i in range(ROW):
            k = int(r.next() % 8)
            neg = r.next() % 2
            c = r.next() % 3
            base = pow2(k - 4)
            v = base if c == 0 else (base * below if c == 1 else base * f32(1.5))
            x[i] = -v if neg else v
    elif kind == 11:  # small multiples of 0.5: rounding ties
        for i in range(ROW):
            x[i] = f32(int(r.next() % 17) - 8) * f32(0.5)
    elif kind == 12:  # all positive
        for i in range(ROW):
            x[i] = f32(abs(bell()) + 1000) * s
    elif kind == 13:  # all negative
        for i in range(ROW):
            x[i] = -(f32(abs(bell()) + 1000) * s)
    elif kind == 14:  # huge
        for i in range(ROW):
            x[i] = f32(bell()) * pow2(90)
    elif kind == 15:  # every sub-block of 16 at its own scale, 2^-5 .. 2^-44
        for g in range(ROW // 16):
            gs = pow2(-int(r.next() % 40) - 5)
            for i in range(16):
                x[16 * g + i] = f32(bell()) * gs
    elif kind == 16:  # heavy tails: a product of two bell values
        for i in range(ROW):
            a = f32(bell())
            b = f32(abs(bell()))
            x[i] = (a * b) * (s * pow2(-12))
    return x


def fnv1a64(data, h=0xCBF29CE484222325):
    for c in bytes(data):
        h = ((h ^ c) * 0x100000001B3) & MASK
    return h


def load_ggml():
    import llama_cpp
    libdir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    lib = ctypes.CDLL(sorted(glob.glob(os.path.join(libdir, "libggml-base.so*")))[0])
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib, llama_cpp.__version__


def main():
    lib, version = load_ggml()
    out = sys.stdout
    out.write("// Generated by tests/kernels/make_quantize_golden.py (ggml_quantize_chunk of "
              f"llama-cpp-python {version}'s libggml-base).\n// Do not edit; rerun the script.\n\n")
    out.write(f"constexpr int kGgmlGoldenRow = {ROW};\nconstexpr int kGgmlGoldenKinds = {N_KINDS};\n"
              f"constexpr int kGgmlGoldenSeeds = {N_SEEDS};\n\n")
    rows = [[make_row(k, s) for s in range(N_SEEDS)] for k in range(N_KINDS)]
    out.write("// FNV-1a 64 of each input row's floats, [kind][seed].\n")
    out.write(f"static const uint64_t kGgmlGoldenInputFnv[{N_KINDS}][{N_SEEDS}] = {{\n")
    for k in range(N_KINDS):
        out.write("    {" + ", ".join(f"0x{fnv1a64(rows[k][s].tobytes()):016x}ull" for s in range(N_SEEDS)) + "},\n")
    out.write("};\n\n")
    out.write("struct GgmlGoldenType {\n    DType type;\n    uint64_t fnv[kGgmlGoldenKinds][kGgmlGoldenSeeds];\n};\n")
    out.write("// FNV-1a 64 of each row's quantized bytes, per type, [kind][seed].\n")
    out.write("static const GgmlGoldenType kGgmlGolden[] = {\n")
    for tid, name, bytes_per_256 in TYPES:
        out.write(f"    {{DType::{name},\n     {{\n")
        for k in range(N_KINDS):
            hs = []
            for s in range(N_SEEDS):
                x = np.ascontiguousarray(rows[k][s])
                dst = np.zeros(ROW // 256 * bytes_per_256, dtype=np.uint8)
                n = lib.ggml_quantize_chunk(tid, x.ctypes.data, dst.ctypes.data, 0, 1, ROW, None)
                assert n == dst.size, (name, n, dst.size)
                hs.append(f"0x{fnv1a64(dst.tobytes()):016x}ull")
            out.write("         {" + ", ".join(hs) + "},\n")
        out.write("     }},\n")
    out.write("};\n\n")
    bulk = [make_row(BULK_KINDS[i % len(BULK_KINDS)], 100 + i) for i in range(N_BULK)]
    h = 0xCBF29CE484222325
    for x in bulk:
        h = fnv1a64(x.tobytes(), h)
    out.write(f"// The bulk: row i is kind kGgmlBulkKinds[i % {len(BULK_KINDS)}], seed 100 + i; one FNV-1a 64 chained\n"
              "// over all rows' inputs, and per type (kGgmlGolden's order) over all rows' bytes.\n")
    out.write(f"constexpr int kGgmlBulkRows = {N_BULK};\n")
    out.write("static const int kGgmlBulkKinds[] = {" + ", ".join(map(str, BULK_KINDS)) + "};\n")
    out.write(f"constexpr uint64_t kGgmlBulkInputFnv = 0x{h:016x}ull;\n")
    hs = []
    for tid, name, bytes_per_256 in TYPES:
        h = 0xCBF29CE484222325
        for x in bulk:
            dst = np.zeros(ROW // 256 * bytes_per_256, dtype=np.uint8)
            lib.ggml_quantize_chunk(tid, np.ascontiguousarray(x).ctypes.data, dst.ctypes.data, 0, 1, ROW, None)
            h = fnv1a64(dst.tobytes(), h)
        hs.append(f"0x{h:016x}ull")
    out.write("static const uint64_t kGgmlBulkFnv[] = {" + ", ".join(hs) + "};\n")


if __name__ == "__main__":
    main()

#pragma once
// Quantized row formats (GGUF/ggml layouts, see quant_blocks.h) and their dot products.
//
// A weight matrix row of type W is multiplied with an activation row that was first quantized
// to vec_dot_type(W), exactly as ggml does it (Q4_0 x Q8_0, Q4_1 x Q8_1, Q4_K x Q8_K, F16 x F16,
// ...), so ferrox's numerics track llama.cpp's.
//
// Two families of entry points:
//  - *_ref: scalar reference implementations. Always available, slow, the test oracle.
//  - quant_kernels(W): the table of the fastest kernels for W on this CPU, chosen once at
//    start-up from CPUID (AVX-512 F/BW/DQ/VL/VNNI, else AVX2+FMA+F16C, else scalar). An ISA's
//    table starts as the scalar one and overrides the kernels it speeds up; every level gives
//    the same bits (the summation orders are fixed, see gemm_packed8).
//
// Preconditions everywhere: n is a multiple of the block size of the types involved (32 or
// 256; any n >= 0 for F32/F16/BF16); buffers hold whole rows and do not overlap.
// Threading: all kernels are pure functions, callable from any thread at the same time.
// kernels_force_isa() is for tests only and must not race with kernel calls.
// No kernel allocates.

#include <cstdint>

#include "tensor/dtype.h"

namespace ferrox {

// ---- scalar references -----------------------------------------------------------------

// Any type of DType (weights, activation types, F32/F16/BF16).
void dequantize_row_ref(DType type, const void* src, float* dst, int64_t n);

// Any type of DType. The 32-element formats and Q8_K round exactly as ggml's reference
// quantizers (quantize_row_*_ref in ggml-quants.c), so activation rows are byte-identical to
// llama.cpp's scalar path. Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/IQ4_NL/IQ4_XS/MXFP4 use a plain min/max
// (or abs-max) fit, each documented with its error bound in quants_ref.cc: valid blocks, but
// not llama-quantize's error-searching fit (nor its importance matrix), so their bytes differ
// from a GGUF file's; they exist for tests and tools, not to write model files (quantize_row_ggml
// below writes those five types as llama.cpp does). The grid formats IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S, IQ1_S, IQ1_M have no quantizer here (CHECK-fails): llama.cpp writes them only
// with its importance-matrix search (its CPU backend has no from_float for them either).
void quantize_row_ref(DType type, const float* src, void* dst, int64_t n);

// llama.cpp's own quantizers for Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4, byte for byte: what
// ggml_quantize_chunk(type, ...) writes without an importance matrix (llama-quantize without
// --imatrix; ggml's quantize_row_q2_K_ref, quantize_row_q3_K_ref, quantize_iq4_nl,
// quantize_iq4_xs, quantize_row_mxfp4_ref), the error-searching fits included. For writing model
// files that are llama.cpp's, and for tests; slow (IQ4_* try 15 scales per block of 32). n is a
// multiple of the type's block size (CHECKed). Tested against libggml's bytes in
// tests/kernels/quantize_ggml_test.cc.
bool has_ggml_quantizer(DType type);
void quantize_row_ggml(DType type, const float* src, void* dst, int64_t n);

// Dot product of one weight row of weight_type with one activation row of
// vec_dot_type(weight_type). F32/F16/BF16 accumulate in double; quantized types sum integer
// products per block and scale in float, as ggml's generic C code does (IQ4_XS: one integer sum
// per super-block, its 6-bit scales applied as integers, where ggml scales each 32 in float; the
// IQ1/IQ2/IQ3 grid formats exactly as ggml's generic code: one integer sum per super-block,
// (dx * dy) * sum added in float, ggml's constant 1/8 (IQ2) or 1/4 (IQ3_XXS) on the row's sum).
float vec_dot_ref(DType weight_type, int64_t n, const void* w, const void* a);

// The activation type a weight type is multiplied with:
// Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4 -> Q8_0; Q4_1, Q5_1 -> Q8_1; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M -> Q8_K; F32/F16/BF16 -> same.
// CHECK-fails for types that are not weight types (Q8_1, Q8_K).
DType vec_dot_type(DType weight_type);

// True for the types quant_kernels() accepts (all weight types above).
bool is_weight_type(DType type);

// ---- dispatched kernels --------------------------------------------------------------------

struct QuantKernels {
    DType type;      // weight type
    DType act_type;  // == vec_dot_type(type)
    // Weight row (n elements) -> floats.
    void (*dequantize_row)(const void* src, float* dst, int64_t n);
    // Float activations -> act_type. On AVX2, Q8_0/Q8_1 round as ggml's x86 code does
    // (id = 127/amax, round half to even), which can differ from quantize_row_ref by one step
    // on exact ties; that is what llama.cpp runs on the same machine.
    void (*quantize_act_row)(const float* src, void* dst, int64_t n);
    // One weight row . one activation row (already in act_type).
    float (*vec_dot)(int64_t n, const void* w, const void* a);
    // out[r] = dot(weight row r, a) for r in [0, n_rows); row r starts at w + r * w_row_bytes.
    // For now a loop over vec_dot on every ISA (a multi-row kernel sharing the activation
    // loads can replace it per type without changing callers).
    void (*vec_dot_rows)(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows,
                         const void* a, float* out);
    // Several rows against several activation rows (prompt processing):
    // out[c * out_stride + r] = dot(weight row r, activation row c) for r < n_rows, c < n_cols;
    // activation row c starts at a + c * a_row_bytes. Each result is bit-identical to vec_dot
    // (the same per-output summation order); only the loads are shared. Null for types without
    // one: callers loop over vec_dot_rows.
    void (*vec_dot_tile)(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                         int64_t a_row_bytes, int64_t n_cols, float* out, int64_t out_stride) = nullptr;
    // Weights repacked at load (null where a type has no packed layout). repack8 interleaves
    // every 8 rows (n_rows a multiple of 8) so that one pass over a group serves 8 rows; the
    // packed matrix takes exactly n_rows * row bytes, and the group holding rows r..r+7 starts
    // at r * row bytes, so a caller can split rows at any multiple of 8.
    // gemm_packed8 computes out[c * out_stride + r] = dot(weight row r, activation row c) for
    // r < n_rows (a multiple of 8) and c < n_cols, activation row c at a + c * a_row_bytes,
    // from `w`, the packed group holding row 0. Every output is summed in one fixed order
    // whatever n_rows and n_cols are (decode with one column, a batch or a prompt with many
    // give the same bits for the same row and activation): for the quantized types that order
    // is vec_dot_ref's (one integer sum per block, scaled and added in float, block by block),
    // so the scalar reference is the oracle bit for bit; for F16 it is a single float
    // multiply-add chain over the elements in order. Exception: Q4_1, the default model's type,
    // whose gemm_packed8 keeps vec_dot's order (ggml's, which llama.cpp runs for Q4_1 in prompts
    // and decode: that model's logits bit-identical to llama.cpp's), and whose
    // gemm_packed8_ref_order below has the block order. Needs n / block size <= 1024.
    void (*repack8)(const void* src, int64_t n, int64_t n_rows, void* dst) = nullptr;
    void (*gemm_packed8)(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                         int64_t n_cols, float* out, int64_t out_stride) = nullptr;
    // Q4_1 only (null for other types and on the scalar ISA): gemm_packed8 on the same packed
    // layout in vec_dot_ref's order, one integer sum per block scaled in float, as every other
    // quantized type's gemm_packed8: the same bits on every ISA (the scalar ISA's vec_dot), and
    // about twice the batched throughput of ggml's order (one conversion and one multiply-add
    // per block instead of per 4 products), but not llama.cpp's x86 bits. The model chooses
    // (ModelOptions::ggml_order).
    void (*gemm_packed8_ref_order)(int64_t n, const void* w, int64_t n_rows, const void* a, int64_t a_row_bytes,
                                   int64_t n_cols, float* out, int64_t out_stride) = nullptr;
    // llama.cpp's x86 order (ModelOptions::ggml_order), on unpacked rows, for the types whose
    // llama.cpp kernels sum in another order than gemm_packed8. AVX2 and AVX-512 only (null on the
    // scalar ISA and for other types; Q4_1 has gemm_packed8 in that order instead). llama.cpp picks
    // a kernel by the batch: in a batch of at least x86_batch_from rows, its first
    // n - n % x86_batch_group rows go through vec_dot_rows_x86_batch, the others (and decode)
    // through vec_dot_rows_x86. Q5_0, Q8_0: ggml's vec_dot order, which its prompt kernel
    // (tinyBLAS) keeps per output; Q6_K: vec_dot, and from 8 rows its tiled kernel's order
    // (whole block sums); Q4_K: its repacked gemv (scaled per super-block) and, from 4 rows in
    // groups of 4, its repacked gemm (scaled per 64 elements). The batch kernels' activations
    // are quantized as every row's: llama.cpp's 4-row Q8_K quantizer picks the scale's sign
    // differently only for a block holding both +max and -max.
    void (*vec_dot_rows_x86)(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                             float* out) = nullptr;
    void (*vec_dot_rows_x86_batch)(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows,
                                   const void* a, float* out) = nullptr;
    int x86_batch_from = 0;   // with vec_dot_rows_x86_batch
    int x86_batch_group = 1;
    // The activation rows gemm_packed8 takes: packed_act_type, made by quantize_packed_act_row.
    // act_type and quantize_act_row for every type but F16, whose packed kernel takes F32 rows
    // holding the values rounded to F16 (the same numbers as act_type's, kept in the form the
    // kernel multiplies, so a prompt's activations are not converted again for every weight tile).
    DType packed_act_type = DType::kF32;
    void (*quantize_packed_act_row)(const float* src, void* dst, int64_t n) = nullptr;
};

// The kernels for a weight type on the selected ISA. CHECK-fails for unsupported types.
// A lookup (a few compares): take it once per matmul, not per row.
const QuantKernels& quant_kernels(DType weight_type);

// "avx512", "avx2" or "scalar": the ISA whose kernels quant_kernels() and the ops return.
// Chosen on first use from CPUID; the environment variable FERROX_KERNELS_ISA=scalar|avx2|avx512
// overrides the choice (an unsupported value is ignored with a warning).
const char* kernels_isa_name();

// For tests: selects an ISA by name (CHECK-fails if the CPU lacks it or the name is unknown).
void kernels_force_isa(const char* name);

// Whether kernels_force_isa(name) would succeed.
bool kernels_isa_available(const char* name);

// AVX2 + FMA + F16C, with OS support for the AVX state.
bool cpu_has_avx2();

// AVX2 as above plus AVX-512 F, BW, DQ, VL and VNNI, with OS support for the ZMM state.
bool cpu_has_avx512();

}  // namespace ferrox

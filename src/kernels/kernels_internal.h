#pragma once
// Private to src/kernels: the per-ISA kernel tables and the helpers the ISA files share.
// Not included by anything outside this folder (tests may, to reach the scalar tables).

#include <cstdint>

#include "kernels/ops.h"
#include "kernels/quants.h"

namespace ferrox::detail {

// Weight types in table order. kernel_index() maps a DType into [0, kNumWeightTypes) or -1.
constexpr int kNumWeightTypes = 23;
int kernel_index(DType type);
DType kernel_type_at(int index);

// The f32 ops of ops.h, one table per ISA, selected together with the quant kernels.
struct OpsKernels {
    // ops.h's rms_norm_rows (rms_norm is one row of it).
    void (*rms_norm)(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride, int64_t n_rows,
                     int64_t n, float eps);
    void (*softmax_inplace)(float* x, int64_t n);
    void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);
    void (*vec_add)(const float* a, const float* b, float* out, int64_t n);
    void (*vec_scale)(const float* x, float s, float* out, int64_t n);
    float (*dot_f32)(const float* a, const float* b, int64_t n);
    void (*axpy)(float a, const float* x, float* y, int64_t n);
    void (*gemm_f32)(const float* a, int64_t lda, const float* w, int64_t ldw, float* c, int64_t ldc,
                     int64_t m, int64_t n, int64_t k);
    void (*gelu_erf)(const float* x, float* y, int64_t n);
    // ops.h's gemm_f32_packed over the panels [p0, p1) of w (the caller checked the range).
    void (*gemm_f32_packed)(const float* a, int64_t lda, const PackedMatrix& w, int64_t p0, int64_t p1, float* c,
                            int64_t ldc, int64_t m, const GemmEpilogue& epi);
    int64_t (*argmax_first)(const float* x, int64_t n);
    void (*rope_rotate)(float* x, const float* cs, const float* sn, int64_t n_rot, bool neox);
    float (*max_finite)(const float* x, int64_t n);
    double (*exp_shifted)(const float* x, float m, float s, float* w, int64_t n);
    void (*chunk_max)(const float* x, int64_t n, int64_t chunk, float* out);
    int64_t (*ids_at_or_above)(const float* x, int64_t n, float th, int32_t* idx);
    void (*f16_table_mul)(const uint16_t* table, const float* gate, const float* up, float* out, int64_t n);
};

// Every ISA's table starts as the scalar one; the SIMD levels then override what they speed up.
void fill_scalar_quant_kernels(QuantKernels* table);  // kNumWeightTypes entries
void fill_scalar_ops(OpsKernels* ops);
// The SIMD table fillers, one namespace per ISA variant (isa_variant.h): the *_avx2.cc files are
// compiled once per variant, and each compilation defines its variant's functions. Only called
// after the CPU said it has the ISA (the emulated variant runs anywhere AVX2 does).
#define FERROX_DECLARE_SIMD_OVERRIDES(ns)                                                   \
    namespace ns {                                                                          \
    void override_quant_kernels(QuantKernels* table); /* quants_avx2.cc: dots, tiles, Q4_1 */ \
    void override_ops(OpsKernels* ops);               /* ops_avx2.cc */                      \
    void override_packed(QuantKernels* table);        /* packed_avx2.cc: Q4_0, Q8_0 */       \
    void override_packed_kquants(QuantKernels* table); /* Q4_K, Q5_K, Q6_K */                \
    void override_packed_f16(QuantKernels* table);    /* F16 */                              \
    void override_packed_lowbit(QuantKernels* table); /* Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4 */ \
    void override_packed_iq(QuantKernels* table);     /* IQ2_*, IQ3_*, IQ1_* (the grid formats) */ \
    /* static: no out-of-line copy shared between differently compiled objects */          \
    static inline void override_all(QuantKernels* table, OpsKernels* ops) {                \
        override_quant_kernels(table);                                                      \
        override_packed(table);                                                             \
        override_packed_kquants(table);                                                     \
        override_packed_f16(table);                                                         \
        override_packed_lowbit(table); /* after override_quant_kernels: takes its quantizers */ \
        override_packed_iq(table);     /* likewise */                                       \
        override_ops(ops);                                                                  \
    }                                                                                       \
    }
FERROX_DECLARE_SIMD_OVERRIDES(avx2)
FERROX_DECLARE_SIMD_OVERRIDES(avx512)
FERROX_DECLARE_SIMD_OVERRIDES(avx512emu)  // defined only in the kernel tests' build
#undef FERROX_DECLARE_SIMD_OVERRIDES

// For tests: adds an ISA called `name` whose tables are the scalar ones overridden by `fill`,
// selectable with kernels_force_isa(name). Idempotent per name; must not race with kernel calls.
void add_test_isa(const char* name, void (*fill)(QuantKernels* table, OpsKernels* ops));

// The ops table of the selected ISA.
const OpsKernels& ops_kernels();

// Scalar activation quantizers shared by the ISA files (Q8_K has no SIMD version: ggml's x86
// code runs the reference too, so bytes match llama.cpp's).
void quantize_row_q8_k_ref(const float* x, void* y, int64_t n);

// Round to nearest, ties to even (current FP rounding mode, which ferrox never changes), via
// the 1.5 * 2^23 trick, as ggml's nearest_int. Valid for |f| <= 2^22.
inline int nearest_int(float f) {
    float v = f + 12582912.f;
    int32_t i;
    __builtin_memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

// A vec_dot_rows that loops over a vec_dot (direct calls: the function is a template argument).
template <float (*Dot)(int64_t, const void*, const void*)>
void vec_dot_rows_loop(int64_t n, const void* w, int64_t w_row_bytes, int64_t n_rows, const void* a,
                       float* out) {
    const auto* p = static_cast<const uint8_t*>(w);
    for (int64_t r = 0; r < n_rows; ++r) out[r] = Dot(n, p + r * w_row_bytes, a);
}

}  // namespace ferrox::detail

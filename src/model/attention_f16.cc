#include "model/attention_f16.h"

#include "tensor/fp16.h"

namespace ferrox {

namespace {
float dot_scalar(const float* q, const uint16_t* k, int n) {
    float s = 0;
    for (int i = 0; i < n; ++i) s += q[i] * fp16_to_fp32(k[i]);
    return s;
}
void axpy_scalar(float p, const uint16_t* v, float* out, int n) {
    for (int i = 0; i < n; ++i) out[i] += p * fp16_to_fp32(v[i]);
}
void to_f16_scalar(const float* x, uint16_t* y, int n) {
    for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}
}  // namespace

// attention_f16_avx2.cc
const AttnF16Kernels* attn_f16_kernels_avx2();

const AttnF16Kernels& attn_f16_kernels_scalar() {
    static const AttnF16Kernels k{dot_scalar, axpy_scalar, to_f16_scalar};
    return k;
}

const AttnF16Kernels& attn_f16_kernels() {
    static const AttnF16Kernels* k = [] {
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
            __builtin_cpu_supports("f16c")) {
            return attn_f16_kernels_avx2();
        }
        return &attn_f16_kernels_scalar();
    }();
    return *k;
}

}  // namespace ferrox

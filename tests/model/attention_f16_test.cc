// The attention kernels over an F16 cache: the grouped-query prefill dots give, bit for bit,
// what the one-query prefill dot gives for every head and row, on the AVX2 table and the
// scalar one, for the head size with a register path (64) and others.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/attention_f16.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

void check_group_dots(const AttnF16Kernels& fk, const char* name) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int n : {64, 32, 128}) {
        for (int n_q : {1, 3, 8}) {
            const int count = 37, stride = n * 4 + 8;  // rows interleaved with other heads' data
            std::vector<uint16_t> k(static_cast<size_t>(count) * stride);
            for (uint16_t& v : k) v = fp32_to_fp16(nd(rng));
            std::vector<float> q(static_cast<size_t>(n_q) * n);
            for (float& v : q) v = fp16_to_fp32(fp32_to_fp16(nd(rng)));
            const int out_stride = count + 5;
            std::vector<float> got(static_cast<size_t>(n_q) * out_stride, -7.0f);
            const float scale = 0.125f;
            fk.dots_prefill_group(q.data(), n_q, k.data(), stride, count, n, scale, got.data(), out_stride);
            for (int g = 0; g < n_q; ++g) {
                for (int j = 0; j < out_stride; ++j) {
                    const float v = got[static_cast<size_t>(g) * out_stride + j];
                    if (j >= count) {
                        ASSERT_EQ(v, -7.0f) << name << ": wrote past the run";
                        continue;
                    }
                    const float want = fk.dot_prefill(q.data() + g * n, k.data() + static_cast<size_t>(j) * stride, n) * scale;
                    ASSERT_EQ(std::memcmp(&v, &want, 4), 0)
                        << name << " n " << n << " heads " << n_q << " head " << g << " row " << j << ": " << v
                        << " vs " << want;
                }
            }
        }
    }
}

TEST(AttentionF16, GroupedPrefillDotsAreTheOneQueryDots) {
    check_group_dots(attn_f16_kernels_scalar(), "scalar");
    check_group_dots(attn_f16_kernels(), "selected");
}

// The AVX2 and scalar tables follow the same orders, so they agree bit for bit.
TEST(AttentionF16, SelectedKernelsMatchTheScalarOnes) {
    const AttnF16Kernels& a = attn_f16_kernels();
    const AttnF16Kernels& s = attn_f16_kernels_scalar();
    std::mt19937 rng(9);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int n = 64, n_q = 3, count = 19;
    std::vector<uint16_t> k(static_cast<size_t>(count) * n);
    for (uint16_t& v : k) v = fp32_to_fp16(nd(rng));
    std::vector<float> q(static_cast<size_t>(n_q) * n);
    for (float& v : q) v = fp16_to_fp32(fp32_to_fp16(nd(rng)));
    std::vector<float> x(static_cast<size_t>(n_q) * count), y(x.size());
    a.dots_prefill_group(q.data(), n_q, k.data(), n, count, n, 0.5f, x.data(), count);
    s.dots_prefill_group(q.data(), n_q, k.data(), n, count, n, 0.5f, y.data(), count);
    ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
    for (int j = 0; j < count; ++j) {
        const float d0 = a.dot_decode(q.data(), k.data() + j * n, n), d1 = s.dot_decode(q.data(), k.data() + j * n, n);
        ASSERT_EQ(std::memcmp(&d0, &d1, 4), 0) << "decode order, row " << j;
    }
}

}  // namespace
}  // namespace ferrox

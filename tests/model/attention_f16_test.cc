// The attention kernels over an F16 cache: the grouped-query prefill and decode kernels give,
// bit for bit, what the one-query functions give for every head and row, on the AVX2 table
// and the scalar one, for the head size with a register path (64) and others; the selected
// table is the AVX-512 one where the CPU has it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "model/attention_f16.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

// The grouped dots (prefill or decode order) against the one-query dot of that order.
void check_group_dots(const AttnF16Kernels& fk, const char* name, bool decode) {
    std::mt19937 rng(decode ? 11 : 3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const auto group = decode ? fk.dots_decode_group : fk.dots_prefill_group;
    const auto one = decode ? fk.dot_decode : fk.dot_prefill;
    for (int n : {64, 32, 128}) {
        for (int n_q : {1, 3, 8, 32, 33}) {  // 32: the AVX-512 kernels' most; 33 falls back
            const int count = 37, stride = n * 4 + 8;  // rows interleaved with other heads' data
            std::vector<uint16_t> k(static_cast<size_t>(count) * stride);
            for (uint16_t& v : k) v = fp32_to_fp16(nd(rng));
            std::vector<float> q(static_cast<size_t>(n_q) * n);
            for (float& v : q) v = fp16_to_fp32(fp32_to_fp16(nd(rng)));
            const int out_stride = count + 5;
            std::vector<float> got(static_cast<size_t>(n_q) * out_stride, -7.0f);
            const float scale = 0.125f;
            group(q.data(), n_q, k.data(), stride, count, n, scale, got.data(), out_stride);
            for (int g = 0; g < n_q; ++g) {
                for (int j = 0; j < out_stride; ++j) {
                    const float v = got[static_cast<size_t>(g) * out_stride + j];
                    if (j >= count) {
                        ASSERT_EQ(v, -7.0f) << name << ": wrote past the run";
                        continue;
                    }
                    const float want = one(q.data() + g * n, k.data() + static_cast<size_t>(j) * stride, n) * scale;
                    ASSERT_EQ(std::memcmp(&v, &want, 4), 0)
                        << name << (decode ? " decode" : " prefill") << " n " << n << " heads " << n_q << " head "
                        << g << " row " << j << ": " << v << " vs " << want;
                }
            }
        }
    }
}

TEST(AttentionF16, GroupedPrefillDotsAreTheOneQueryDots) {
    check_group_dots(attn_f16_kernels_scalar(), "scalar", false);
    check_group_dots(attn_f16_kernels(), "selected", false);
}

// The grouped decode P·V gives every head accumulate's multiply-adds in accumulate_run's order
// per partial row: from a start position that is not a multiple of the rows (so the rows
// wrap), through a row pointer per position (here in reverse memory order), over more
// positions than partial rows, so some rows get two.
void check_group_accumulate(const AttnF16Kernels& fk, const char* name) {
    std::mt19937 rng(13);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    // 5 and 8 heads: the AVX-512 kernel's groups of 4 heads and a remainder; 130 positions: past
    // its 128-position buffer (it hands the call to the AVX2 kernel).
    for (int n : {64, 32, 128}) {
        for (auto [n_q, count] : {std::pair{1, 37}, {3, 37}, {5, 37}, {8, 37}, {3, 130}, {3, 16}}) {
            const int stride = n * 4 + 8, rows = 32, p0 = 21, p_stride = count + 5;
            std::vector<uint16_t> v(static_cast<size_t>(count) * stride);
            for (uint16_t& x : v) x = fp32_to_fp16(nd(rng));
            std::vector<const uint16_t*> ptrs(count);
            for (int j = 0; j < count; ++j) ptrs[j] = v.data() + static_cast<size_t>(count - 1 - j) * stride;
            // Weights per head at p + g * p_stride; partial rows per head at acc + g * acc_stride.
            std::vector<float> p(static_cast<size_t>(n_q) * p_stride);
            for (float& x : p) x = ud(rng);
            const int acc_stride = rows * n + 16;
            std::vector<float> want(static_cast<size_t>(n_q) * acc_stride);
            for (float& x : want) x = nd(rng);
            std::vector<float> got = want;
            fk.accumulate_rows_group(p.data(), p_stride, n_q, ptrs.data(), count, p0, rows, got.data(), acc_stride, n);
            for (int g = 0; g < n_q; ++g) {
                int r = p0 % rows;
                for (int j = 0; j < count; ++j) {
                    fk.accumulate(fp16_to_fp32(fp32_to_fp16(p[g * p_stride + j])), ptrs[j],
                                  want.data() + static_cast<size_t>(g) * acc_stride + static_cast<size_t>(r) * n, n);
                    if (++r == rows) r = 0;
                }
            }
            ASSERT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
                << name << " accumulate by row pointers, n " << n << " heads " << n_q;
        }
    }
}

TEST(AttentionF16, GroupedDecodeKernelsAreTheOneHeadOnes) {
    check_group_dots(attn_f16_kernels_scalar(), "scalar", true);
    check_group_dots(attn_f16_kernels(), "selected", true);
    check_group_accumulate(attn_f16_kernels_scalar(), "scalar");
    check_group_accumulate(attn_f16_kernels(), "selected");
}

// The transposed P·V of a prompt chunk (the chunk starts at a multiple of 8) and its reduction
// give the bits of accumulate_run and reduce_prefill, including a last partial group of 8
// whose transposed columns past the count hold garbage.
void check_accumulate_t(const AttnF16Kernels& fk, const char* name) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    constexpr int kLd = 64;
    for (int n : {64, 40, 128}) {
        for (int count : {1, 5, 8, 37, 64}) {
            for (int p0 : {0, 64, 128}) {
                const int stride = n * 3 + 8;
                std::vector<uint16_t> v(static_cast<size_t>(count) * stride);
                for (uint16_t& x : v) x = fp32_to_fp16(nd(rng));
                std::vector<const uint16_t*> rows(count);
                for (int j = 0; j < count; ++j) rows[j] = v.data() + static_cast<size_t>(j) * stride;
                std::vector<float> vt(static_cast<size_t>(n) * kLd, std::nanf(""));
                fk.transpose_rows(rows.data(), count, n, vt.data(), kLd);
                for (int d = 0; d < n; ++d) {
                    for (int j = 0; j < (count + 7) / 8 * 8; ++j) {
                        const float want = j < count ? fp16_to_fp32(rows[j][d]) : 0.0f;
                        ASSERT_EQ(vt[static_cast<size_t>(d) * kLd + j], want) << name << " d " << d << " j " << j;
                    }
                }
                for (int d = 0; d < n; ++d)  // garbage past the count, in the last group of 8 too
                    for (int j = count; j < kLd; ++j) vt[static_cast<size_t>(d) * kLd + j] = std::nanf("");
                std::vector<float> p(count);
                for (float& x : p) x = ud(rng);
                std::vector<float> want(static_cast<size_t>(8) * n), got_t(want.size());
                for (int r = 0; r < 8; ++r)
                    for (int d = 0; d < n; ++d) want[r * n + d] = got_t[d * 8 + r] = nd(rng);
                fk.accumulate_run(p.data(), v.data(), stride, count, p0, 8, want.data(), n);
                fk.accumulate_t(p.data(), vt.data(), kLd, count, got_t.data(), n);
                for (int r = 0; r < 8; ++r) {
                    for (int d = 0; d < n; ++d) {
                        ASSERT_EQ(std::memcmp(&want[r * n + d], &got_t[d * 8 + r], 4), 0)
                            << name << " n " << n << " count " << count << " row " << r << " dim " << d;
                    }
                }
                std::vector<float> out(n), out_t(n);
                fk.reduce_prefill(want.data(), out.data(), n);
                fk.reduce_prefill_t(got_t.data(), out_t.data(), n);
                ASSERT_EQ(std::memcmp(out.data(), out_t.data(), n * sizeof(float)), 0) << name << " reduce, n " << n;
            }
        }
    }
}

TEST(AttentionF16, TransposedPrefillAccumulateIsAccumulateRun) {
    check_accumulate_t(attn_f16_kernels_scalar(), "scalar");
    check_accumulate_t(attn_f16_kernels(), "selected");
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
    // Queries rounded to F16: ties to even, overflow to infinity, subnormal halves, NaN kept;
    // 8-wide and the tail.
    std::vector<float> r = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, -65519.0f, 0x1p-25f, 3 * 0x1p-26f,
                            -0.0f, std::nanf(""), 1e-8f, 2.5f, -1.0009765625f, 0.33333334f, 70000.0f};
    for (int i = 0; i < 40; ++i) r.push_back(nd(rng) * 100.0f);
    std::vector<float> ra(r.size()), rs(r.size());
    a.round_f16_row(r.data(), ra.data(), static_cast<int>(r.size()));
    s.round_f16_row(r.data(), rs.data(), static_cast<int>(r.size()));
    for (size_t i = 0; i < r.size(); ++i) {
        ASSERT_EQ(std::memcmp(&ra[i], &rs[i], 4), 0) << r[i] << ": " << ra[i] << " vs " << rs[i];
        if (!std::isnan(r[i])) {
            EXPECT_EQ(rs[i], fp16_to_fp32(fp32_to_fp16(r[i])));
        }
    }
    EXPECT_EQ(rs[0], 1.0f);                 // a tie goes to the even neighbour
    EXPECT_EQ(rs[1], 1.0f + 0x1p-9f);
    EXPECT_TRUE(std::isinf(rs[2]));         // above the largest half
}

}  // namespace
}  // namespace ferrox

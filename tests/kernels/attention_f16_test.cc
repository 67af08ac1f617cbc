// The attention kernels over an F16 cache: the grouped-query prefill and decode kernels give,
// bit for bit, what the one-query functions give for every head and row, on the AVX2 table
// and the scalar one, for the head size with a register path (64) and others; the selected
// table is the AVX-512 one where the CPU has it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/attention_f16.h"
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

// Decode P·V over the transposed V blocks gives every head accumulate's multiply-adds per
// partial row (position i to row i % 32, in increasing i) and reduce_decode's sum: for block
// sizes that are and are not multiples of 8 and 32, a start at a block that is not a multiple
// of 32, ends inside a vector and inside a block (the slots past the end and the weights past
// it hold NaN, which must not reach the sums), head sizes with and without the register path,
// and head counts around the kernels' groups of 3.
void check_pv_decode_t(const AttnF16Kernels& fk, const char* name) {
    const AttnF16Kernels& ref = attn_f16_kernels_scalar();
    std::mt19937 rng(13);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    const uint16_t kNanF16 = 0x7e00;
    for (int n : {64, 32, 128, 40, 36}) {
        for (int bs : {32, 16, 8, 64, 4, 12}) {
            for (auto [n_q, p_begin_blocks, p_end] :
                 {std::tuple{1, 0, 37}, {3, 0, 37}, {3, 1, 130}, {2, 0, 5}, {4, 2, 200}, {5, 0, 64}, {8, 1, 71}, {3, 0, 1}}) {
                const int p_begin = p_begin_blocks * bs;
                if (p_begin >= p_end) continue;
                const int n_blocks = (p_end - p_begin + bs - 1) / bs;
                // Blocks in reverse memory order, V in the cache's tiles; unwritten slots NaN.
                std::vector<uint16_t> mem(static_cast<size_t>(n_blocks) * bs * n + 8, kNanF16);
                std::vector<const uint16_t*> blocks(n_blocks);
                for (int b = 0; b < n_blocks; ++b) blocks[b] = mem.data() + static_cast<size_t>(n_blocks - 1 - b) * bs * n;
                std::vector<uint16_t> rows(static_cast<size_t>(p_end) * n);  // the same values, position-major
                for (int i = p_begin; i < p_end; ++i) {
                    for (int d = 0; d < n; ++d) {
                        const uint16_t h = fp32_to_fp16(nd(rng));
                        rows[static_cast<size_t>(i) * n + d] = h;
                        const_cast<uint16_t*>(blocks[(i - p_begin) / bs])[kv_v_offset(bs, n, i % bs, d)] = h;
                    }
                }
                const int p_stride = p_end + 11;
                std::vector<float> p(static_cast<size_t>(n_q) * p_stride, std::nanf(""));
                for (int g = 0; g < n_q; ++g) {
                    for (int i = p_begin; i < p_end; ++i) {
                        // Rounded to F16 as the caller does; some zero (outside a window).
                        p[static_cast<size_t>(g) * p_stride + i] = i % 7 == 3 ? 0.0f : fp16_to_fp32(fp32_to_fp16(ud(rng)));
                    }
                }
                const int out_stride = n + 3;
                std::vector<float> got(static_cast<size_t>(n_q) * out_stride, -7.0f);
                std::vector<float*> outs(n_q);
                for (int g = 0; g < n_q; ++g) outs[g] = got.data() + static_cast<size_t>(g) * out_stride;
                fk.pv_decode_t(p.data(), p_stride, n_q, blocks.data(), bs, p_begin, p_end, outs.data(), n);
                for (int g = 0; g < n_q; ++g) {
                    std::vector<float> acc(static_cast<size_t>(32) * n, 0.0f), want(n);
                    for (int i = p_begin; i < p_end; ++i) {
                        ref.accumulate(p[static_cast<size_t>(g) * p_stride + i], rows.data() + static_cast<size_t>(i) * n,
                                       acc.data() + static_cast<size_t>(i % 32) * n, n);
                    }
                    ref.reduce_decode(acc.data(), want.data(), n);
                    ASSERT_EQ(std::memcmp(outs[g], want.data(), n * sizeof(float)), 0)
                        << name << " n " << n << " bs " << bs << " heads " << n_q << " [" << p_begin << ", " << p_end
                        << ") head " << g << ": " << outs[g][0] << " vs " << want[0];
                    ASSERT_EQ(outs[g][n], -7.0f) << name << ": wrote past the head";
                }
            }
        }
    }
}

TEST(AttentionF16, GroupedDecodeKernelsAreTheOneHeadOnes) {
    check_group_dots(attn_f16_kernels_scalar(), "scalar", true);
    check_group_dots(attn_f16_kernels(), "selected", true);
    check_pv_decode_t(attn_f16_kernels_scalar(), "scalar");
    check_pv_decode_t(attn_f16_kernels(), "selected");
    if (const AttnF16Kernels* avx2 = attn_f16_kernels_avx2_if_supported()) {
        check_group_dots(*avx2, "avx2", true);
        check_pv_decode_t(*avx2, "avx2");
    }
}

// The V of a prompt chunk gathered from the transposed cache blocks into floats, its P·V (the
// chunk starts at a multiple of 8) and its reduction give the bits of accumulate_run and
// reduce_prefill, including a last partial group of 8 whose columns past the count hold garbage.
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
                // The same values in the cache's V tiles (kv_v_offset) of blocks of bs slots, the
                // chunk starting at slot `off` of its first block: runs of 8 in one tile and runs
                // that cross a tile, a block, or have tiles of 4 (bs = 12).
                const int bs = p0 == 64 ? 12 : 16, off = p0 == 128 ? 3 : 0;
                const int n_blocks = (off + count + bs - 1) / bs;
                std::vector<uint16_t> tmem(static_cast<size_t>(n_blocks) * bs * n + 8, 0x7e00);
                std::vector<const uint16_t*> cols(count);
                for (int j = 0; j < count; ++j) {
                    uint16_t* col = tmem.data() + static_cast<size_t>((off + j) / bs) * bs * n + kv_v_offset(bs, n, (off + j) % bs, 0);
                    for (int d = 0; d < n; ++d) col[static_cast<size_t>(d) * kv_v_tile(bs)] = rows[j][d];
                    cols[j] = col;
                }
                std::vector<float> vt(static_cast<size_t>(n) * kLd, std::nanf(""));
                fk.gather_vt(cols.data(), kv_v_tile(bs), count, n, vt.data(), kLd);
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
    if (const AttnF16Kernels* avx2 = attn_f16_kernels_avx2_if_supported()) check_accumulate_t(*avx2, "avx2");
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

// vec_dot_rows must give, bit for bit, what vec_dot gives row by row: the multi-row kernels
// only interleave independent rows, and the forward pass relies on that to stay identical to
// llama.cpp whatever tiling a matmul uses.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/quants.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

class RowsExact : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (!kernel_test::isa_available(GetParam())) GTEST_SKIP() << GetParam() << " not on this CPU";
        kernels_force_isa(GetParam().c_str());
    }
    void TearDown() override { kernels_force_isa(kernel_test::best_isa()); }
};

TEST_P(RowsExact, EveryWeightTypeEveryRowCount) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,   DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0, DType::kQ4_K,   DType::kQ5_K,
                           DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS,
                           DType::kMXFP4, DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                           DType::kIQ3_S, DType::kIQ1_S, DType::kIQ1_M};
    for (DType t : types) {
        const QuantKernels& k = quant_kernels(t);
        const int64_t n = 512;
        const int64_t row = dtype_row_bytes(t, n) + 16;  // padded stride
        for (int64_t n_rows : {1, 3, 4, 5, 9, 17}) {
            std::vector<uint8_t> w(static_cast<size_t>(row * n_rows), 0);
            std::vector<float> x(n);
            for (int64_t r = 0; r < n_rows; ++r) {
                if (kernel_test::is_grid_type(t)) {  // no quantizer: random blocks
                    kernel_test::random_blocks(t, w.data() + r * row, n, rng);
                    continue;
                }
                for (float& v : x) v = nd(rng);
                quantize_row_ref(t, x.data(), w.data() + r * row, n);
            }
            for (float& v : x) v = nd(rng);
            std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(k.act_type, n)));
            k.quantize_act_row(x.data(), a.data(), n);
            std::vector<float> got(n_rows + 1, 12345.0f);
            k.vec_dot_rows(n, w.data(), row, n_rows, a.data(), got.data());
            for (int64_t r = 0; r < n_rows; ++r) {
                const float one = k.vec_dot(n, w.data() + r * row, a.data());
                ASSERT_EQ(std::memcmp(&got[r], &one, 4), 0)
                    << dtype_name(t) << " rows " << n_rows << " row " << r << ": " << got[r] << " vs " << one;
            }
            ASSERT_EQ(got[n_rows], 12345.0f) << "wrote past the last row";
        }
    }
}

// The tile kernels (rows x activation rows, for prompts) give vec_dot's bits for every output,
// over odd shapes: rows and columns not multiples of the tile, one row, one column.
TEST_P(RowsExact, TilesMatchOneRowDots) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int n_types_with_tiles = 0;
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                    DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
        const QuantKernels& k = quant_kernels(t);
        if (!k.vec_dot_tile) continue;
        ++n_types_with_tiles;
        const int64_t n = 256;
        const int64_t row = dtype_row_bytes(t, n) + 8;
        const int64_t arow = dtype_row_bytes(k.act_type, n) + 24;
        for (int64_t n_rows : {1, 2, 3, 16, 17}) {
            for (int64_t n_cols : {1, 3, 4, 5, 9}) {
                std::vector<uint8_t> w(static_cast<size_t>(row * n_rows), 0);
                std::vector<uint8_t> a(static_cast<size_t>(arow * n_cols), 0);
                std::vector<float> x(n);
                for (int64_t r = 0; r < n_rows; ++r) {
                    for (float& v : x) v = nd(rng);
                    quantize_row_ref(t, x.data(), w.data() + r * row, n);
                }
                for (int64_t c = 0; c < n_cols; ++c) {
                    for (float& v : x) v = nd(rng);
                    k.quantize_act_row(x.data(), a.data() + c * arow, n);
                }
                const int64_t stride = n_rows + 3;
                std::vector<float> got(static_cast<size_t>(stride * n_cols), 12345.0f);
                k.vec_dot_tile(n, w.data(), row, n_rows, a.data(), arow, n_cols, got.data(), stride);
                for (int64_t c = 0; c < n_cols; ++c) {
                    for (int64_t r = 0; r < stride; ++r) {
                        const float g = got[c * stride + r];
                        if (r >= n_rows) {
                            ASSERT_EQ(g, 12345.0f) << "wrote outside the tile";
                            continue;
                        }
                        const float one = k.vec_dot(n, w.data() + r * row, a.data() + c * arow);
                        ASSERT_EQ(std::memcmp(&g, &one, 4), 0) << dtype_name(t) << " " << n_rows << "x" << n_cols
                                                                << " at " << r << "," << c << ": " << g << " vs " << one;
                    }
                }
            }
        }
    }
    if (GetParam() != "scalar") {
        EXPECT_GE(n_types_with_tiles, 3);  // Q4_0, Q4_1, Q8_0
    }
}

// The scalar oracle of gemm_packed8's order: vec_dot_ref for the quantized types (one integer
// sum per block, scaled and added in float, block by block) but Q4_1, which keeps vec_dot's
// (ggml's) order; for F16 a single float
// multiply-add chain over the elements in order (vec_dot_ref sums F16 in double).
// a: an activation row in packed_act_type (F32 holding F16 values for F16).
float packed_oracle(DType t, int64_t n, const void* w, const void* a) {
    if (t == DType::kF16) {
        const auto* x = static_cast<const uint16_t*>(w);
        const auto* y = static_cast<const float*>(a);
        float acc = 0.0f;
        for (int64_t i = 0; i < n; ++i) acc = std::fma(fp16_to_fp32(x[i]), y[i], acc);
        return acc;
    }
    if (t == DType::kQ4_1) return quant_kernels(t).vec_dot(n, w, a);  // ggml's order (quants.h)
    return vec_dot_ref(t, n, w, a);
}

bool lowbit(DType t) {
    return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kIQ4_NL || t == DType::kIQ4_XS || t == DType::kMXFP4;
}

// Weights repacked in groups of 8 rows give the oracle's bits for every output, for every
// number of rows and activation rows (decode, batches and prompts share one order), and write
// nothing outside the outputs asked for.
TEST_P(RowsExact, Packed8GemmMatchesTheScalarOrder) {
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    int n_packed = 0, n_ref_order = 0;
    for (DType t : {DType::kF16, DType::kQ4_0, DType::kQ4_1, DType::kQ8_0, DType::kQ4_K, DType::kQ5_K,
                    DType::kQ6_K, DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4,
                    DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS, DType::kIQ3_S, DType::kIQ1_S,
                    DType::kIQ1_M}) {
        const QuantKernels& k = quant_kernels(t);
        if (!k.repack8) continue;
        ASSERT_NE(k.gemm_packed8, nullptr);
        ++n_packed;
        const int64_t blk = dtype_info(t).block_elems;
        // 4160 = 130 blocks of 32: more than two of the 64-block chunks of Q4_1's AVX2 kernel.
        for (int64_t n : {int64_t{256}, int64_t{576}, int64_t{2048}, int64_t{4160}}) {
            if (n % blk != 0) continue;
            if (n == 4160 && lowbit(t)) continue;  // that length is for Q4_1's chunks: keep the test short
            // 24 and 72 rows end on an odd group; 48 and 72 fill the 2-pair register blocks of the
            // AVX-512 kernels (a pair of groups per register) and leave a pair over.
            for (int64_t n_rows : {8, 24, 48, 72}) {
                // The grid formats' kernel has no 16-row register blocks: 8 blocks of 8 and 24 rows suffice.
                if (kernel_test::is_grid_type(t) && n == 2048 && n_rows > 24) continue;
                const int64_t row = dtype_row_bytes(t, n);
                std::vector<uint8_t> w(static_cast<size_t>(row * n_rows)), packed(w.size() + 1, 0xAB);
                std::vector<float> x(n);
                for (int64_t r = 0; r < n_rows; ++r) {
                    // The low-bit formats: every other row random blocks (the quantizers leave
                    // levels and scale signs unused).
                    // The grid formats (no quantizer): every row random blocks.
                    if ((r % 2 == 1 && lowbit(t)) || kernel_test::is_grid_type(t)) {
                        kernel_test::random_blocks(t, w.data() + r * row, n, rng);
                        continue;
                    }
                    for (float& v : x) v = nd(rng) * (r % 3 == 0 ? 100.0f : 1.0f);
                    quantize_row_ref(t, x.data(), w.data() + r * row, n);
                }
                k.repack8(w.data(), n, n_rows, packed.data());
                ASSERT_EQ(packed.back(), 0xAB) << "wrote past the packed size";
                // 70 columns: more than one 64-column tile of the prompt kernels. 1 to 9: every
                // split of Q4_1's AVX2 kernel (blocks of 4 columns, then 3, or 1 at a time).
                for (int64_t n_cols : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33, 70}) {
                    const int64_t arow = dtype_row_bytes(k.packed_act_type, n) + 8;
                    std::vector<uint8_t> a(static_cast<size_t>(arow * n_cols), 0);
                    std::vector<uint8_t> plain(static_cast<size_t>(dtype_row_bytes(k.act_type, n)));
                    for (int64_t c = 0; c < n_cols; ++c) {
                        for (float& v : x) v = nd(rng);
                        k.quantize_packed_act_row(x.data(), a.data() + c * arow, n);
                        // The packed rows hold act_type's numbers: the same bytes, or for F16 the
                        // same values as floats.
                        k.quantize_act_row(x.data(), plain.data(), n);
                        if (k.packed_act_type == k.act_type) {
                            ASSERT_EQ(std::memcmp(plain.data(), a.data() + c * arow, plain.size()), 0);
                        } else {
                            ASSERT_EQ(t, DType::kF16);
                            ASSERT_EQ(k.packed_act_type, DType::kF32);
                            for (int64_t i = 0; i < n; ++i) {
                                float v;
                                std::memcpy(&v, a.data() + c * arow + 4 * i, 4);
                                uint16_t h;
                                std::memcpy(&h, plain.data() + 2 * i, 2);
                                ASSERT_EQ(v, fp16_to_fp32(h)) << "element " << i;
                            }
                        }
                    }
                    const int64_t stride = n_rows + 5;
                    // Each packed product of the type against its oracle: gemm_packed8 against
                    // packed_oracle, Q4_1's gemm_packed8_ref_order against vec_dot_ref.
                    const auto check = [&](auto gemm, bool ref_order) {
                        std::vector<float> got(static_cast<size_t>(stride * n_cols), 12345.0f);
                        gemm(n, packed.data(), n_rows, a.data(), arow, n_cols, got.data(), stride);
                        for (int64_t c = 0; c < n_cols; ++c) {
                            for (int64_t r = 0; r < stride; ++r) {
                                const float g = got[c * stride + r];
                                if (r >= n_rows) {
                                    ASSERT_EQ(g, 12345.0f) << "wrote outside the outputs";
                                    continue;
                                }
                                const void* wr = w.data() + r * row;
                                const void* ac = a.data() + c * arow;
                                const float want = ref_order ? vec_dot_ref(t, n, wr, ac) : packed_oracle(t, n, wr, ac);
                                ASSERT_EQ(std::memcmp(&g, &want, 4), 0)
                                    << dtype_name(t) << (ref_order ? " (ref order)" : "") << " n " << n << " "
                                    << n_rows << "x" << n_cols << " at row " << r << " col " << c << ": " << g
                                    << " vs " << want;
                            }
                        }
                    };
                    check(k.gemm_packed8, false);
                    if (k.gemm_packed8_ref_order) {
                        ASSERT_EQ(t, DType::kQ4_1);
                        check(k.gemm_packed8_ref_order, true);
                        ++n_ref_order;
                    }
                    if (HasFatalFailure()) return;
                }
            }
        }
    }
    if (GetParam() != "scalar") {
        EXPECT_EQ(n_packed, 19);  // every type listed above
        EXPECT_GT(n_ref_order, 0);  // Q4_1's block order
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, RowsExact, ::testing::ValuesIn(kernel_test::all_isas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ferrox

// gemm_f32_packed against a double-precision reference on awkward shapes, on every ISA and for
// F32, F16 and BF16 panels, and its determinism: a row's result does not depend on m, on the
// panel range, on the ISA, or on whether F16/BF16 values are stored as such or widened to F32.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ops.h"
#include "kernels/quants.h"
#include "kernels/test_util.h"

namespace ferrox {
namespace {

using kernel_test::random_row;

class GemmPackedTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (!kernel_test::isa_available(GetParam())) GTEST_SKIP() << GetParam() << " not on this CPU";
        kernels_force_isa(GetParam().c_str());
    }
    void TearDown() override { kernels_force_isa(kernel_test::best_isa()); }
};

struct Problem {
    int64_t m, n, k, lda, ldw, ldc;
    std::vector<float> a, w, bias, res;
    PackedMatrix packed;
};

// W's values are rounded to `type` first (so the double reference uses what the panels hold).
Problem make_problem(int64_t m, int64_t n, int64_t k, uint32_t seed, DType type = DType::kF32) {
    Problem p{m, n, k, k + 3, k + 1, n + 5, {}, {}, {}, {}, {}};
    p.a = random_row(m * p.lda, seed);
    p.w = random_row(n * p.ldw, seed + 1, 0.2f);
    if (type != DType::kF32) {
        std::vector<uint16_t> h(p.w.size());
        quantize_row_ref(type, p.w.data(), h.data(), static_cast<int64_t>(p.w.size()));
        dequantize_row_ref(type, h.data(), p.w.data(), static_cast<int64_t>(p.w.size()));
    }
    p.bias = random_row(n, seed + 2);
    p.res = random_row(m * p.ldc, seed + 3);
    p.packed = pack_matrix(p.w.data(), p.ldw, n, k, type);
    return p;
}

std::vector<float> run(const Problem& p, int64_t m, int64_t p0, int64_t p1, const GemmEpilogue& e,
                       const float* a = nullptr) {
    std::vector<float> c(static_cast<size_t>(m * p.ldc), -7.0f);
    gemm_f32_packed(a ? a : p.a.data(), p.lda, p.packed, p0, p1, c.data(), p.ldc, m, e);
    return c;
}

TEST(PackMatrix, Layout) {
    const int64_t n = 37, k = 5, ldw = 6;
    const auto w = random_row(n * ldw, 1);
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(type));
        const PackedMatrix p = pack_matrix(w.data(), ldw, n, k, type);
        ASSERT_EQ(p.n_panels(), 2);
        ASSERT_EQ(p.type, type);
        ASSERT_EQ(p.bytes(), 2 * k * kPackedWidth * (type == DType::kF32 ? 4 : 2));
        EXPECT_EQ(reinterpret_cast<uintptr_t>(p.data.get()) % 64, 0u);
        for (int64_t j = 0; j < 2 * kPackedWidth; ++j) {
            for (int64_t t = 0; t < k; ++t) {
                float want = 0.0f;
                if (j < n) {  // the value rounded to the type, as quantize_row_ref rounds it
                    uint32_t raw = 0;
                    quantize_row_ref(type, &w[j * ldw + t], &raw, 1);
                    dequantize_row_ref(type, &raw, &want, 1);
                }
                const uint8_t* e = p.panel(j / kPackedWidth) + (t * kPackedWidth + j % kPackedWidth) * p.elem_bytes();
                float got;
                dequantize_row_ref(type, e, &got, 1);
                EXPECT_EQ(got, want) << j << "," << t;
            }
        }
    }
}

// F16 and BF16 panels widen exactly: the product of F16/BF16-valued weights is the same bits
// whether they are packed in their type or as F32, at half the bytes.
TEST_P(GemmPackedTest, HalfPanelsEqualTheirF32Copy) {
    for (DType type : {DType::kF16, DType::kBF16}) {
        for (int64_t m : {1, 5, 14, 30}) {
            SCOPED_TRACE(testing::Message() << dtype_name(type) << " m " << m);
            Problem p = make_problem(m, 70, 300, 31, type);
            GemmEpilogue e;
            e.bias = p.bias.data();
            e.gelu = true;
            const auto half = run(p, m, 0, p.packed.n_panels(), e);
            const int64_t half_bytes = p.packed.bytes();
            p.packed = pack_matrix(p.w.data(), p.ldw, p.n, p.k, DType::kF32);
            ASSERT_EQ(p.packed.bytes(), 2 * half_bytes);
            const auto full = run(p, m, 0, p.packed.n_panels(), e);
            ASSERT_EQ(0, std::memcmp(half.data(), full.data(), half.size() * sizeof(float)));
        }
    }
}

TEST_P(GemmPackedTest, OddShapesAgainstDouble) {
    // n not a multiple of the 32-wide panel nor of the 16/8-lane halves, k not a multiple of
    // the 256 k-chunk, every m from 1 to 13 (all row-tile heights and splits) and two more.
    const int64_t nks[][2] = {{1, 1}, {70, 300}, {33, 7}, {31, 513}, {96, 256}, {17, 257}};
    int n_case = 0;
    for (int64_t m = 1; m <= 15; ++m) {
        for (const auto& nk : nks) {
            const int64_t n = nk[0], k = nk[1];
            const bool gelu = n_case % 3 == 1, with_res = n_case % 2 == 1, with_bias = n_case % 4 != 3;
            ++n_case;
            const DType type = n_case % 3 == 0 ? DType::kF32 : n_case % 3 == 1 ? DType::kF16 : DType::kBF16;
            SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k << " " << dtype_name(type) << " gelu " << gelu
                                            << " res " << with_res << " bias " << with_bias);
            const Problem p = make_problem(m, n, k, static_cast<uint32_t>(n_case * 10), type);
            GemmEpilogue e;
            if (with_bias) e.bias = p.bias.data();
            if (with_res) e.res = p.res.data(), e.ld_res = p.ldc;
            e.gelu = gelu;
            const auto c = run(p, m, 0, p.packed.n_panels(), e);
            for (int64_t i = 0; i < m; ++i) {
                for (int64_t j = 0; j < n; ++j) {
                    double s = 0, mag = 0;
                    for (int64_t t = 0; t < k; ++t) {
                        const double prod = static_cast<double>(p.a[i * p.lda + t]) * p.w[j * p.ldw + t];
                        s += prod;
                        mag += std::fabs(prod);
                    }
                    double tol = 4e-7 * std::sqrt(static_cast<double>(k)) * mag + 1e-7;
                    if (with_bias) s += p.bias[j], tol += 1e-7 * std::fabs(p.bias[j]);
                    if (with_res) s += p.res[i * p.ldc + j], tol += 1e-7 * std::fabs(p.res[i * p.ldc + j]);
                    if (gelu) {
                        s = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
                        tol = 1.2 * tol + 3e-7 * std::max(1.0, std::fabs(s));
                    }
                    ASSERT_NEAR(c[i * p.ldc + j], s, tol) << i << "," << j;
                }
                for (int64_t j = n; j < p.ldc; ++j) ASSERT_EQ(c[i * p.ldc + j], -7.0f) << "padding written";
            }
        }
    }
}

TEST_P(GemmPackedTest, RowsDoNotDependOnTheBatchOrThePanelRange) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t m = 29, n = 100, k = 700;
    const Problem p = make_problem(m, n, k, 77, type);
    GemmEpilogue e;
    e.bias = p.bias.data();
    e.res = p.res.data();
    e.ld_res = p.ldc;
    const auto all = run(p, m, 0, p.packed.n_panels(), e);
    // Computed in two panel ranges.
    std::vector<float> split(all.size(), -7.0f);
    gemm_f32_packed(p.a.data(), p.lda, p.packed, 0, 1, split.data(), p.ldc, m, e);
    gemm_f32_packed(p.a.data(), p.lda, p.packed, 1, p.packed.n_panels(), split.data(), p.ldc, m, e);
    ASSERT_EQ(0, std::memcmp(all.data(), split.data(), all.size() * sizeof(float)));
    for (int64_t i = 0; i < m; ++i) {
        // Row i alone (m = 1), and as the first row of a batch of every smaller size.
        GemmEpilogue ei = e;
        ei.res = p.res.data() + i * p.ldc;
        const auto one = run(p, 1, 0, p.packed.n_panels(), ei, p.a.data() + i * p.lda);
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + i * p.ldc, static_cast<size_t>(n) * sizeof(float))) << i;
        const int64_t mi = m - i;
        const auto tail = run(p, mi, 0, p.packed.n_panels(), ei, p.a.data() + i * p.lda);
        ASSERT_EQ(0, std::memcmp(tail.data(), all.data() + i * p.ldc, static_cast<size_t>(n) * sizeof(float))) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmPackedTest, ::testing::ValuesIn(kernel_test::all_isas()),
                         [](const auto& info) { return info.param; });

// The AVX2 and AVX-512 tiles run the same FMA chains and the same epilogue: equal bits.
TEST(GemmPackedIsas, Avx2AndAvx512Agree) {
    const std::string other = kernel_test::isa_available("avx512") ? "avx512" : "avx512_emulated";
    if (!kernel_test::isa_available("avx2") || !kernel_test::isa_available(other)) GTEST_SKIP() << "no AVX2/AVX-512";
    for (int64_t m : {1, 7, 14, 25}) {
      for (DType type : {DType::kF32, DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(dtype_name(type));
        const Problem p = make_problem(m, 77, 400, 5, type);
        GemmEpilogue e;
        e.bias = p.bias.data();
        e.gelu = true;
        kernels_force_isa("avx2");
        const auto c2 = run(p, m, 0, p.packed.n_panels(), e);
        kernels_force_isa(other.c_str());
        const auto c5 = run(p, m, 0, p.packed.n_panels(), e);
        kernels_force_isa(kernel_test::best_isa());
        ASSERT_EQ(0, std::memcmp(c2.data(), c5.data(), c2.size() * sizeof(float))) << m;
      }
    }
}

}  // namespace
}  // namespace ferrox

// vec_dot_rows must give, bit for bit, what vec_dot gives row by row: the multi-row kernels
// only interleave independent rows, and the forward pass relies on that to stay identical to
// llama.cpp whatever tiling a matmul uses.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kernels/quants.h"

namespace ferrox {
namespace {

class RowsExact : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        if (GetParam() == "avx2" && !cpu_has_avx2()) GTEST_SKIP() << "no AVX2 here";
        kernels_force_isa(GetParam().c_str());
    }
    void TearDown() override { kernels_force_isa(cpu_has_avx2() ? "avx2" : "scalar"); }
};

TEST_P(RowsExact, EveryWeightTypeEveryRowCount) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const DType types[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                           DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                           DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
    for (DType t : types) {
        const QuantKernels& k = quant_kernels(t);
        const int64_t n = 512;
        const int64_t row = dtype_row_bytes(t, n) + 16;  // padded stride
        for (int64_t n_rows : {1, 3, 4, 5, 9, 17}) {
            std::vector<uint8_t> w(static_cast<size_t>(row * n_rows), 0);
            std::vector<float> x(n);
            for (int64_t r = 0; r < n_rows; ++r) {
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

INSTANTIATE_TEST_SUITE_P(Isa, RowsExact, ::testing::Values("scalar", "avx2"));

}  // namespace
}  // namespace ferrox

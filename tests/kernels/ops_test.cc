// The f32 ops against naive double-precision loops, on odd lengths, on every ISA.

#include "kernels/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/quants.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

using kernel_test::random_row;

const int64_t kLengths[] = {1, 7, 8, 9, 31, 64, 100, 1000, 4097};

class OpsTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (!kernel_test::isa_available(GetParam()))
            GTEST_SKIP() << GetParam() << " not on this CPU";
        kernels_force_isa(GetParam().c_str());
    }
    void TearDown() override { kernels_force_isa(kernel_test::best_isa()); }
};

TEST_P(OpsTest, RmsNorm) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        const auto x = random_row(n, 1, 3.0f, 0.5f);
        const auto w = random_row(n, 2);
        std::vector<float> y(static_cast<size_t>(n));
        rms_norm(x.data(), w.data(), y.data(), n, 1e-5f);
        double ss = 0;
        for (float v : x) ss += static_cast<double>(v) * v;
        const double scale = 1.0 / std::sqrt(ss / static_cast<double>(n) + 1e-5);
        for (int64_t i = 0; i < n; ++i) {
            const double want = x[i] * scale * w[i];
            ASSERT_NEAR(y[i], want, 1e-6 * std::fabs(want) + 1e-7) << i;
        }
        // In place.
        std::vector<float> z = x;
        rms_norm(z.data(), w.data(), z.data(), n, 1e-5f);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], y[i]);
    }
}

// Rows normalized together (their add chains interleaved) give each row rms_norm's bits, with
// gaps between rows, in place, and for every count of rows around the groups of four.
TEST_P(OpsTest, RmsNormRowsAsEachRow) {
    for (int64_t n : {1, 3, 7, 64, 100, 576}) {
        for (int64_t n_rows : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
            SCOPED_TRACE(::testing::Message() << n << " x " << n_rows);
            const int64_t xs = n + 3, ys = n + 5;
            std::vector<float> x(static_cast<size_t>(xs * n_rows));
            const auto r = random_row(static_cast<int64_t>(x.size()), 11, 1.0f);
            const auto e = random_row(static_cast<int64_t>(x.size()), 12, 0.8f);
            for (size_t i = 0; i < x.size(); ++i) x[i] = r[i] * std::pow(10.0f, e[i]);
            const auto w = random_row(n, 2);
            std::vector<float> want(static_cast<size_t>(ys * n_rows), 0.0f), got = want;
            for (int64_t k = 0; k < n_rows; ++k) rms_norm(x.data() + k * xs, w.data(), want.data() + k * ys, n, 1e-5f);
            rms_norm_rows(x.data(), xs, w.data(), got.data(), ys, n_rows, n, 1e-5f);
            ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
            std::vector<float> z = x;
            rms_norm_rows(z.data(), xs, w.data(), z.data(), xs, n_rows, n, 1e-5f);
            for (int64_t k = 0; k < n_rows; ++k)
                ASSERT_EQ(0, std::memcmp(z.data() + k * xs, want.data() + k * ys, n * sizeof(float))) << "row " << k;
        }
    }
}

TEST_P(OpsTest, Softmax) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        auto x = random_row(n, 3, 4.0f, 100.0f);  // large offset: must subtract the max
        if (n > 2) x[1] = -INFINITY;              // a masked score
        std::vector<double> want(x.size());
        double mx = -INFINITY, sum = 0;
        for (float v : x) mx = std::max(mx, static_cast<double>(v));
        for (size_t i = 0; i < x.size(); ++i) sum += want[i] = std::exp(x[i] - mx);
        softmax_inplace(x.data(), n);
        double total = 0;
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(x[i], want[i] / sum, 1e-6 * want[i] / sum + 1e-9) << i;
            total += x[i];
        }
        if (n > 2) {
            EXPECT_EQ(x[1], 0.0f);
        }
        EXPECT_NEAR(total, 1.0, 1e-5);
    }
}

TEST_P(OpsTest, SoftmaxWideRange) {
    // exp over its whole useful range (differences down to -100 underflow to 0).
    std::vector<float> x(257);
    for (size_t i = 0; i < x.size(); ++i) x[i] = -100.0f + 100.0f * static_cast<float>(i) / 256;
    std::vector<double> want(x.size());
    double sum = 0;
    for (size_t i = 0; i < x.size(); ++i) sum += want[i] = std::exp(static_cast<double>(x[i]));
    softmax_inplace(x.data(), static_cast<int64_t>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        const double w = want[i] / sum;
        if (w < 1e-37) {
            ASSERT_LE(x[i], 1e-37) << i;
        } else {
            ASSERT_NEAR(x[i], w, 1e-6 * w) << i;
        }
    }
}

TEST_P(OpsTest, SiluMul) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        auto g = random_row(n, 4, 4.0f);
        const auto u = random_row(n, 5);
        g[0] = -100.0f;  // exp(100) overflows float: silu must still be ~0, not NaN
        if (n > 1) g[1] = 100.0f;
        std::vector<float> out(static_cast<size_t>(n));
        silu_mul(g.data(), u.data(), out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const double want = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
            ASSERT_NEAR(out[i], want, 2e-6 * std::fabs(want) + 1e-30) << i << " g=" << g[i];
        }
        std::vector<float> alias = g;
        silu_mul(alias.data(), u.data(), alias.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(alias[i], out[i]);
    }
}

// f16_table_mul against its definition, computed here from the F16 bits: every F16 value of the
// range as a gate (and values between them, which round to one), the bounds and beyond, on
// odd lengths and in place. The table is a function of the bits no kernel could guess (each
// entry its index's bits mixed), so a wrong index or a wrong half of the gathered word shows.
TEST_P(OpsTest, F16TableMul) {
    std::vector<uint16_t> table(65537);
    for (uint32_t i = 0; i < 65536; ++i) table[i] = static_cast<uint16_t>((i * 40503u) ^ (i >> 3)) & 0x7bffu;
    table[65536] = 0xffff;
    std::vector<float> gate;
    for (uint32_t h = 0; h < 65536; h += 7) {
        const float x = fp16_to_fp32(static_cast<uint16_t>(h));
        if (std::isfinite(x)) gate.push_back(x);
    }
    const auto r = random_row(4001, 12, 12.0f);
    gate.insert(gate.end(), r.begin(), r.end());
    for (float x : {-10.0f, 10.0f, std::nextafter(-10.0f, 0.0f), std::nextafter(10.0f, 0.0f), -11.0f, 11.0f,
                    65504.0f, -65504.0f, 1e30f, -1e30f, 0.0f, -0.0f, 1e-8f, -1e-8f})
        gate.push_back(x);
    const auto up_all = random_row(static_cast<int64_t>(gate.size()), 13, 2.0f);
    for (int64_t n : {static_cast<int64_t>(gate.size()), int64_t{1}, int64_t{7}, int64_t{9}, int64_t{31}}) {
        SCOPED_TRACE(n);
        const float* g = gate.data() + gate.size() - static_cast<size_t>(n);
        std::vector<float> up(up_all.end() - n, up_all.end());
        up[0] = -3.0f;  // with a gate <= -10 the product is +0, not -0
        std::vector<float> out(static_cast<size_t>(n));
        f16_table_mul(table.data(), g, up.data(), out.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const float x = g[i];
            const float want = x <= -10.0f ? 0.0f
                               : x >= 10.0f ? x * up[i]
                                            : fp16_to_fp32(table[fp32_to_fp16(x)]) * up[i];
            uint32_t a, b;
            std::memcpy(&a, &out[i], 4);
            std::memcpy(&b, &want, 4);
            ASSERT_EQ(a, b) << i << " x=" << x;
        }
        std::vector<float> alias(g, g + n);
        f16_table_mul(table.data(), alias.data(), up.data(), alias.data(), n);
        ASSERT_EQ(0, std::memcmp(alias.data(), out.data(), out.size() * sizeof(float)));
    }
}

TEST_P(OpsTest, VecAddScaleAxpy) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        const auto a = random_row(n, 6);
        const auto b = random_row(n, 7);
        std::vector<float> out(static_cast<size_t>(n));
        vec_add(a.data(), b.data(), out.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] + b[i]);
        vec_scale(a.data(), -0.75f, out.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a[i] * -0.75f);
        std::vector<float> y = b;
        axpy(1.25f, a.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i)
            ASSERT_NEAR(y[i], b[i] + 1.25 * a[i], 1e-6 * (std::fabs(b[i]) + std::fabs(a[i])));
        std::vector<float> z = a;  // out aliases an input
        vec_add(z.data(), b.data(), z.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z[i], a[i] + b[i]);
    }
}

TEST_P(OpsTest, DotF32) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        const auto a = random_row(n, 8);
        const auto b = random_row(n, 9, 1.0f, 0.3f);
        double want = 0, abs_sum = 0;
        for (int64_t i = 0; i < n; ++i) {
            want += static_cast<double>(a[i]) * b[i];
            abs_sum += std::fabs(static_cast<double>(a[i]) * b[i]);
        }
        // Float accumulation: error grows with the number of terms per accumulator.
        EXPECT_NEAR(dot_f32(a.data(), b.data(), n), want, 1e-7 * abs_sum * std::sqrt(n) + 1e-7);
    }
}

TEST_P(OpsTest, GemmF32OddShapes) {
    // (m, n, k) with tails in every dimension of the 4 x 3 x 8 tiles, and padded strides.
    const int64_t shapes[][3] = {{1, 1, 1}, {1, 5, 7}, {4, 3, 8}, {5, 7, 9}, {13, 11, 384}, {9, 100, 33}};
    for (const auto& sh : shapes) {
        const int64_t m = sh[0], n = sh[1], k = sh[2];
        SCOPED_TRACE(testing::Message() << m << "x" << n << "x" << k);
        const int64_t lda = k + 3, ldw = k + 1, ldc = n + 2;
        const auto a = random_row(m * lda, 11);
        const auto w = random_row(n * ldw, 12);
        std::vector<float> c(static_cast<size_t>(m * ldc), -7.0f);
        gemm_f32(a.data(), lda, w.data(), ldw, c.data(), ldc, m, n, k);
        for (int64_t i = 0; i < m; ++i) {
            for (int64_t j = 0; j < n; ++j) {
                double ref = 0, mag = 0;
                for (int64_t t = 0; t < k; ++t) {
                    ref += static_cast<double>(a[i * lda + t]) * w[j * ldw + t];
                    mag += std::fabs(static_cast<double>(a[i * lda + t]) * w[j * ldw + t]);
                }
                EXPECT_NEAR(c[i * ldc + j], ref, 1e-5 * mag + 1e-6) << i << "," << j;
            }
            for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[i * ldc + j], -7.0f) << "padding written";
        }
    }
}

TEST_P(OpsTest, GeluErf) {
    for (int64_t n : kLengths) {
        SCOPED_TRACE(n);
        auto x = random_row(n, 5, 12.0f);
        if (n > 3) x[0] = 0.0f, x[1] = -30.0f, x[2] = 30.0f;
        std::vector<float> y(static_cast<size_t>(n));
        gelu_erf(x.data(), y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            const double v = x[i];
            const double ref = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
            EXPECT_NEAR(y[i], ref, 3e-7 * std::max(1.0, std::fabs(v))) << "x=" << v;
        }
    }
}

// Both pair orders, bit for bit what the fused multiply-adds written out give, with a tail.
TEST_P(OpsTest, RopeRotateIsTheFusedFormula) {
    for (int64_t n_rot : {2, 8, 14, 64, 128, 256}) {
        for (bool neox : {false, true}) {
            auto x = random_row(n_rot + 6, 3, 4.0f);  // 6 dims past n_rot stay as they are
            const auto cs = random_row(n_rot / 2, 4, 1.0f), sn = random_row(n_rot / 2, 5, 1.0f);
            auto want = x;
            const int64_t half = n_rot / 2;
            for (int64_t i = 0; i < half; ++i) {
                const int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
                const float x0 = x[a], x1 = x[b];
                want[a] = std::fma(x0, cs[i], -(x1 * sn[i]));
                want[b] = std::fma(x0, sn[i], x1 * cs[i]);
            }
            rope_rotate(x.data(), cs.data(), sn.data(), n_rot, neox);
            SCOPED_TRACE(::testing::Message() << "n_rot " << n_rot << (neox ? " neox" : " normal"));
            EXPECT_EQ(0, std::memcmp(x.data(), want.data(), x.size() * sizeof(float)));
        }
    }
}

// The plain loop's answer: ties to the first, NaNs never chosen (0 when x[0] is NaN).
TEST_P(OpsTest, ArgmaxFirstIsThePlainLoop) {
    const auto plain = [](const std::vector<float>& x) {
        int64_t best = 0;
        for (int64_t i = 1; i < static_cast<int64_t>(x.size()); ++i) {
            if (x[i] > x[best]) best = i;
        }
        return best;
    };
    EXPECT_EQ(argmax_first(nullptr, 0), 0);
    for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{100}, int64_t{49152}}) {
        for (int variant = 0; variant < 6; ++variant) {
            auto x = random_row(n, static_cast<uint32_t>(7 + variant), 10.0f);
            if (variant == 1 && n > 40) x[37] = x[n - 1] = 99.0f;                  // a tie: the first
            if (variant == 2) x[n / 2] = std::nanf("");                            // a NaN is skipped
            if (variant == 3) x[0] = std::nanf("");                                // ... or answers 0
            if (variant == 4) x.assign(static_cast<size_t>(n), -INFINITY);         // all -inf
            if (variant == 5 && n > 3) x[n - 2] = INFINITY, x[1] = INFINITY;      // +inf, twice
            SCOPED_TRACE(::testing::Message() << "n " << n << " variant " << variant);
            EXPECT_EQ(argmax_first(x.data(), n), plain(x));
        }
    }
}

// max_finite skips NaN and +-inf; exp_shifted is exp((x - m) * s) per finite entry (relative
// error 2e-7 of std::exp), 0 elsewhere, and its double sum is the sum of what it wrote.
TEST_P(OpsTest, MaxFiniteAndExpShiftedSkipNonFinite) {
    EXPECT_EQ(max_finite(nullptr, 0), -INFINITY);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100}, int64_t{49152}}) {
        for (int variant = 0; variant < 5; ++variant) {
            auto x = random_row(n, static_cast<uint32_t>(11 + variant), 12.0f);
            if (variant == 1) x[n - 1] = INFINITY, x[0] = std::nanf("");            // never the maximum
            if (variant == 2) x[n / 2] = -INFINITY, x[(n - 1) / 3] = 1e30f;         // a far one
            if (variant == 3) x.assign(static_cast<size_t>(n), std::nanf(""));      // nothing finite
            if (variant == 4 && n > 2) x[1] = -90.0f, x[2] = 88.0f;                 // exp under- and overflow
            SCOPED_TRACE(::testing::Message() << "n " << n << " variant " << variant);
            float want_max = -INFINITY;
            for (float v : x)
                if (std::isfinite(v) && v > want_max) want_max = v;
            const float m = max_finite(x.data(), n);
            EXPECT_EQ(m, want_max);
            if (!std::isfinite(m)) continue;
            for (float s : {1.0f, 1.25f, 0.5f}) {
                std::vector<float> w(static_cast<size_t>(n), -1.0f);
                const double sum = exp_shifted(x.data(), m, s, w.data(), n);
                double got_sum = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const float v = x[static_cast<size_t>(i)];
                    const float want = std::isfinite(v) ? std::exp((v - m) * s) : 0.0f;
                    ASSERT_NEAR(w[static_cast<size_t>(i)], want, 2.5e-7f * want + 1e-37f) << "i " << i << " s " << s;
                    got_sum += w[static_cast<size_t>(i)];
                }
                EXPECT_NEAR(sum, got_sum, 1e-12 * got_sum);
            }
        }
    }
}

// chunk_max and ids_at_or_above answer as their plain loops: odd lengths and chunks, NaN,
// +-inf and ties at the threshold.
TEST_P(OpsTest, ChunkMaxAndIdsAtOrAboveAreThePlainLoops) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{1000}, int64_t{49152}}) {
        for (int variant = 0; variant < 4; ++variant) {
            auto x = random_row(n, static_cast<uint32_t>(21 + variant), 4.0f);
            for (auto& v : x) v = std::round(v * 4.0f) / 4.0f;  // ties
            if (variant == 1) x[0] = std::nanf(""), x[n - 1] = INFINITY;
            if (variant == 2) x.assign(static_cast<size_t>(n), std::nanf(""));
            if (variant == 3 && n > 9) x[9] = -INFINITY, x[n / 2] = std::nanf("");
            for (int64_t chunk : {int64_t{1}, int64_t{8}, int64_t{64}, int64_t{100}}) {
                SCOPED_TRACE(::testing::Message() << "n " << n << " variant " << variant << " chunk " << chunk);
                const int64_t nc = (n + chunk - 1) / chunk;
                std::vector<float> got(static_cast<size_t>(nc), 7.0f);
                chunk_max(x.data(), n, chunk, got.data());
                for (int64_t c = 0; c < nc; ++c) {
                    float want = -INFINITY;
                    for (int64_t i = c * chunk; i < std::min(n, (c + 1) * chunk); ++i) want = want < x[i] ? x[i] : want;
                    ASSERT_EQ(got[static_cast<size_t>(c)], want) << "chunk " << c;
                }
            }
            for (float th : {-INFINITY, -1.0f, 0.0f, 2.25f, 100.0f}) {
                SCOPED_TRACE(::testing::Message() << "n " << n << " variant " << variant << " th " << th);
                std::vector<int32_t> got(static_cast<size_t>(n), -1), want;
                const int64_t k = ids_at_or_above(x.data(), n, th, got.data());
                for (int64_t i = 0; i < n; ++i)
                    if (x[i] >= th) want.push_back(static_cast<int32_t>(i));
                got.resize(static_cast<size_t>(k));
                ASSERT_EQ(got, want);
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, OpsTest, ::testing::ValuesIn(kernel_test::all_isas()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ferrox

// quantize_row_ggml (src/kernels/quantize_ggml.cc) against llama.cpp's own quantizers, byte for
// byte: quantize_ggml_golden.inc holds, for 17 kinds of rows x 8 seeds (512 floats each; see
// make_quantize_golden.py for the kinds: random scales, outliers, zeros, constants, values below
// ggml's 1e-15 "all zero" threshold, denormals, powers of two and the floats just below them,
// rounding ties, huge values whose sums overflow...), the FNV-1a 64 of the bytes
// ggml_quantize_chunk(type, ..., imatrix NULL) wrote for Q2_K, Q3_K, IQ4_NL, IQ4_XS and MXFP4.
// The rows are not stored: the generator below is the script's, and the inputs' own hashes
// check that both sides made the same floats.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quant_blocks.h"
#include "kernels/quants.h"

namespace ferrox {
namespace {

#include "kernels/quantize_ggml_golden.inc"

struct SplitMix {
    uint64_t s;
    uint64_t next() {
        s += 0x9E3779B97F4A7C15ull;
        uint64_t z = s;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
};

float pow2(int e) { return std::ldexp(1.0f, e); }  // exact for -149 <= e <= 127

// make_quantize_golden.py's make_row, step for step (the same draws in the same order, every
// float product a single float32 multiplication).
std::vector<float> make_row(int kind, int seed) {
    SplitMix r{static_cast<uint64_t>(seed) * 1000003u + static_cast<uint64_t>(kind)};
    auto bell = [&] {
        const int64_t a = static_cast<int64_t>(r.next() >> 48);
        const int64_t b = static_cast<int64_t>(r.next() >> 48);
        const int64_t c = static_cast<int64_t>(r.next() >> 48);
        return static_cast<int>(a + b + c - 98304);
    };
    auto uni = [&] { return static_cast<int>(static_cast<int64_t>(r.next() >> 40) - (1 << 23)); };
    const float mults[4] = {static_cast<float>(1.0), static_cast<float>(0.7310586), static_cast<float>(1.3333334),
                            static_cast<float>(0.9100000262260437)};
    const int e = -static_cast<int>(r.next() % 16) - 8;
    const float s = mults[r.next() % 4] * pow2(e - 8);
    std::vector<float> x(kGgmlGoldenRow, 0.0f);
    const int n = kGgmlGoldenRow;
    switch (kind) {
        case 0:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(bell()) * s;
            break;
        case 1:
            for (int i = 0; i < n; ++i) {
                float v = static_cast<float>(bell()) * s;
                if (r.next() % 64 == 0) v = v * 40.0f;
                x[i] = v;
            }
            break;
        case 2:
            break;
        case 3: {
            const float c = static_cast<float>(std::abs(bell()) + 1) * s;
            for (int i = 0; i < n; ++i) x[i] = c;
            break;
        }
        case 4: {
            const float c = -(static_cast<float>(std::abs(bell()) + 1) * s);
            for (int i = 0; i < n; ++i) x[i] = c;
            break;
        }
        case 5:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(bell()) * pow2(-66);
            break;
        case 6:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(uni()) * pow2(-149);
            break;
        case 7:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(uni()) * pow2(-23);
            break;
        case 8:
            for (int g = 0; g < n / 16; ++g) {
                const bool z = r.next() % 2;
                for (int i = 0; i < 16; ++i) {
                    const float v = static_cast<float>(bell()) * s;
                    x[16 * g + i] = z ? 0.0f : v;
                }
            }
            break;
        case 9:
            for (int b = 0; b < n / 32; ++b) {
                const int pos = static_cast<int>(r.next() % 32);
                x[32 * b + pos] = static_cast<float>(bell()) * s;
            }
            break;
        case 10: {
            const float below = 1.0f - pow2(-24);
            for (int i = 0; i < n; ++i) {
                const int k = static_cast<int>(r.next() % 8);
                const bool neg = r.next() % 2;
                const int c = static_cast<int>(r.next() % 3);
                const float base = pow2(k - 4);
                const float v = c == 0 ? base : (c == 1 ? base * below : base * 1.5f);
                x[i] = neg ? -v : v;
            }
            break;
        }
        case 11:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<int>(r.next() % 17) - 8) * 0.5f;
            break;
        case 12:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(std::abs(bell()) + 1000) * s;
            break;
        case 13:
            for (int i = 0; i < n; ++i) x[i] = -(static_cast<float>(std::abs(bell()) + 1000) * s);
            break;
        case 14:
            for (int i = 0; i < n; ++i) x[i] = static_cast<float>(bell()) * pow2(90);
            break;
        case 15:
            for (int g = 0; g < n / 16; ++g) {
                const float gs = pow2(-static_cast<int>(r.next() % 40) - 5);
                for (int i = 0; i < 16; ++i) x[16 * g + i] = static_cast<float>(bell()) * gs;
            }
            break;
        case 16:
            for (int i = 0; i < n; ++i) {
                const float a = static_cast<float>(bell());
                const float b = static_cast<float>(std::abs(bell()));
                x[i] = (a * b) * (s * pow2(-12));
            }
            break;
        default:
            ADD_FAILURE() << "unknown kind " << kind;
    }
    return x;
}

uint64_t fnv1a64(const void* data, size_t n, uint64_t h = 0xCBF29CE484222325ull) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
    return h;
}

TEST(QuantizeGgml, GeneratorMakesTheScriptsRows) {
    for (int k = 0; k < kGgmlGoldenKinds; ++k)
        for (int s = 0; s < kGgmlGoldenSeeds; ++s) {
            const auto x = make_row(k, s);
            EXPECT_EQ(fnv1a64(x.data(), x.size() * sizeof(float)), kGgmlGoldenInputFnv[k][s])
                << "kind " << k << " seed " << s;
        }
}

TEST(QuantizeGgml, BytesEqualLlamaCpps) {
    for (const auto& g : kGgmlGolden) {
        ASSERT_TRUE(has_ggml_quantizer(g.type));
        const int64_t bytes = dtype_row_bytes(g.type, kGgmlGoldenRow);
        int mismatches = 0;
        for (int k = 0; k < kGgmlGoldenKinds; ++k)
            for (int s = 0; s < kGgmlGoldenSeeds; ++s) {
                const auto x = make_row(k, s);
                std::vector<uint8_t> q(static_cast<size_t>(bytes));
                quantize_row_ggml(g.type, x.data(), q.data(), kGgmlGoldenRow);
                const bool same = fnv1a64(q.data(), q.size()) == g.fnv[k][s];
                EXPECT_TRUE(same) << dtype_name(g.type) << ": kind " << k << " seed " << s;
                mismatches += same ? 0 : 1;
            }
        std::printf("%-7s %d of %d rows byte-identical to llama.cpp's\n", std::string(dtype_name(g.type)).c_str(),
                    kGgmlGoldenKinds * kGgmlGoldenSeeds - mismatches, kGgmlGoldenKinds * kGgmlGoldenSeeds);
    }
}

// 1024 more ordinary rows, one hash per type over all of them.
TEST(QuantizeGgml, BulkBytesEqualLlamaCpps) {
    constexpr int n_kinds = sizeof(kGgmlBulkKinds) / sizeof(kGgmlBulkKinds[0]);
    std::vector<std::vector<float>> rows;
    uint64_t hin = 0xCBF29CE484222325ull;
    for (int i = 0; i < kGgmlBulkRows; ++i) {
        rows.push_back(make_row(kGgmlBulkKinds[i % n_kinds], 100 + i));
        hin = fnv1a64(rows.back().data(), rows.back().size() * sizeof(float), hin);
    }
    ASSERT_EQ(hin, kGgmlBulkInputFnv);
    int t = 0;
    for (const auto& g : kGgmlGolden) {
        std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(g.type, kGgmlGoldenRow)));
        uint64_t h = 0xCBF29CE484222325ull;
        for (const auto& x : rows) {
            quantize_row_ggml(g.type, x.data(), q.data(), kGgmlGoldenRow);
            h = fnv1a64(q.data(), q.size(), h);
        }
        EXPECT_EQ(h, kGgmlBulkFnv[t++]) << dtype_name(g.type);
    }
}

TEST(QuantizeGgml, OnlyTheLowBitTypes) {
    EXPECT_TRUE(has_ggml_quantizer(DType::kQ2_K));
    EXPECT_TRUE(has_ggml_quantizer(DType::kMXFP4));
    EXPECT_FALSE(has_ggml_quantizer(DType::kQ4_K));
    EXPECT_FALSE(has_ggml_quantizer(DType::kQ4_0));
    EXPECT_FALSE(has_ggml_quantizer(DType::kF16));
}

// The blocks are independent: a row of several blocks is the concatenation of its blocks' bytes.
TEST(QuantizeGgml, RowsAreTheirBlocks) {
    const auto x = make_row(0, 3);
    for (const auto& g : kGgmlGolden) {
        const int64_t qk = dtype_info(g.type).block_elems;
        const int64_t bb = dtype_info(g.type).block_bytes;
        std::vector<uint8_t> whole(static_cast<size_t>(dtype_row_bytes(g.type, kGgmlGoldenRow)));
        quantize_row_ggml(g.type, x.data(), whole.data(), kGgmlGoldenRow);
        std::vector<uint8_t> one(static_cast<size_t>(bb));
        for (int64_t b = 0; b < kGgmlGoldenRow / qk; ++b) {
            quantize_row_ggml(g.type, x.data() + b * qk, one.data(), qk);
            EXPECT_EQ(0, std::memcmp(one.data(), whole.data() + b * bb, static_cast<size_t>(bb)))
                << dtype_name(g.type) << " block " << b;
        }
    }
}

}  // namespace
}  // namespace ferrox

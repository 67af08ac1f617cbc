// Quantized formats: layouts (hand-packed blocks and gguf-py golden data), round-trip error
// bounds derived per format, and dispatched kernels against the scalar reference and against
// float math, on every ISA the CPU has.

#include "kernels/quants.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>

#include "kernels/quant_blocks.h"
#include "kernels/test_util.h"
#include "tensor/fp16.h"

namespace ferrox {
namespace {

using kernel_test::dequantize;
using kernel_test::quantize;
using kernel_test::random_row;

struct GoldenCase {
    DType type;
    const uint8_t* bytes;
    size_t n_bytes;
    const float* values;  // dequantize cases: expected floats; quantize cases: the input
    int64_t n;
};
#include "kernels/quant_golden.inc"

const DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,  DType::kQ4_0,   DType::kQ4_1,
                              DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,  DType::kQ4_K,   DType::kQ5_K,
                              DType::kQ6_K, DType::kQ2_K, DType::kQ3_K,  DType::kIQ4_NL, DType::kIQ4_XS,
                              DType::kMXFP4};
const DType kAllTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16,   DType::kQ4_0,   DType::kQ4_1,
                           DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,   DType::kQ8_1,   DType::kQ4_K,
                           DType::kQ5_K, DType::kQ6_K, DType::kQ8_K,   DType::kQ2_K,   DType::kQ3_K,
                           DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4};

std::string type_name(DType t) { return std::string(dtype_name(t)); }

// Row lengths to test a type on: odd multiples of its block, down to a single block.
std::vector<int64_t> lengths_for(DType t) {
    switch (dtype_info(t).block_elems) {
        case 1:
            return {1, 7, 8, 9, 31, 33, 100, 256, 1000, 4096};
        case 32:
            return {32, 64, 96, 256, 512, 4096};
        default:
            return {256, 512, 4096};
    }
}

// ---- layout constants ----

TEST(QuantLayout, BlockSizesMatchDtypeInfo) {
    EXPECT_EQ(dtype_info(DType::kQ4_0).block_bytes, static_cast<int64_t>(sizeof(BlockQ4_0)));
    EXPECT_EQ(dtype_info(DType::kQ4_1).block_bytes, static_cast<int64_t>(sizeof(BlockQ4_1)));
    EXPECT_EQ(dtype_info(DType::kQ5_0).block_bytes, static_cast<int64_t>(sizeof(BlockQ5_0)));
    EXPECT_EQ(dtype_info(DType::kQ5_1).block_bytes, static_cast<int64_t>(sizeof(BlockQ5_1)));
    EXPECT_EQ(dtype_info(DType::kQ8_0).block_bytes, static_cast<int64_t>(sizeof(BlockQ8_0)));
    EXPECT_EQ(dtype_info(DType::kQ8_1).block_bytes, static_cast<int64_t>(sizeof(BlockQ8_1)));
    EXPECT_EQ(dtype_info(DType::kQ4_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ4_K)));
    EXPECT_EQ(dtype_info(DType::kQ5_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ5_K)));
    EXPECT_EQ(dtype_info(DType::kQ6_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ6_K)));
    EXPECT_EQ(dtype_info(DType::kQ8_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ8_K)));
    EXPECT_EQ(dtype_info(DType::kQ2_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ2_K)));
    EXPECT_EQ(dtype_info(DType::kQ3_K).block_bytes, static_cast<int64_t>(sizeof(BlockQ3_K)));
    EXPECT_EQ(dtype_info(DType::kIQ4_NL).block_bytes, static_cast<int64_t>(sizeof(BlockIQ4_NL)));
    EXPECT_EQ(dtype_info(DType::kIQ4_XS).block_bytes, static_cast<int64_t>(sizeof(BlockIQ4_XS)));
    EXPECT_EQ(dtype_info(DType::kMXFP4).block_bytes, static_cast<int64_t>(sizeof(BlockMXFP4)));
    EXPECT_EQ(offsetof(BlockQ2_K, d), 80u);
    EXPECT_EQ(offsetof(BlockQ3_K, d), 108u);
    EXPECT_EQ(offsetof(BlockIQ4_XS, qs), 8u);
    // ggml's type ids and names.
    EXPECT_EQ(dtype_info(10)->type, DType::kQ2_K);
    EXPECT_EQ(dtype_info(11)->name, "q3_K");
    EXPECT_EQ(dtype_info(20)->name, "iq4_nl");
    EXPECT_EQ(dtype_info(23)->name, "iq4_xs");
    EXPECT_EQ(dtype_info(39)->name, "mxfp4");
    // The grid formats.
    EXPECT_EQ(dtype_info(DType::kIQ2_XXS).block_bytes, static_cast<int64_t>(sizeof(BlockIQ2_XXS)));
    EXPECT_EQ(dtype_info(DType::kIQ2_XS).block_bytes, static_cast<int64_t>(sizeof(BlockIQ2_XS)));
    EXPECT_EQ(dtype_info(DType::kIQ2_S).block_bytes, static_cast<int64_t>(sizeof(BlockIQ2_S)));
    EXPECT_EQ(dtype_info(DType::kIQ3_XXS).block_bytes, static_cast<int64_t>(sizeof(BlockIQ3_XXS)));
    EXPECT_EQ(dtype_info(DType::kIQ3_S).block_bytes, static_cast<int64_t>(sizeof(BlockIQ3_S)));
    EXPECT_EQ(dtype_info(DType::kIQ1_S).block_bytes, static_cast<int64_t>(sizeof(BlockIQ1_S)));
    EXPECT_EQ(dtype_info(DType::kIQ1_M).block_bytes, static_cast<int64_t>(sizeof(BlockIQ1_M)));
    EXPECT_EQ(offsetof(BlockIQ2_XS, scales), 66u);
    EXPECT_EQ(offsetof(BlockIQ2_S, qh), 66u);
    EXPECT_EQ(offsetof(BlockIQ3_S, signs), 74u);
    EXPECT_EQ(offsetof(BlockIQ3_S, scales), 106u);
    EXPECT_EQ(offsetof(BlockIQ1_S, qh), 34u);
    EXPECT_EQ(offsetof(BlockIQ1_M, scales), 48u);
    const std::pair<uint32_t, const char*> grid_ids[] = {{16, "iq2_xxs"}, {17, "iq2_xs"}, {18, "iq3_xxs"},
                                                         {19, "iq1_s"},   {21, "iq3_s"},  {22, "iq2_s"},
                                                         {29, "iq1_m"}};
    for (const auto& [id, name] : grid_ids) {
        ASSERT_TRUE(dtype_info(id).has_value()) << name;
        EXPECT_EQ(dtype_info(id)->name, name);
        EXPECT_EQ(static_cast<uint32_t>(dtype_info(id)->type), id);
        EXPECT_EQ(dtype_info(id)->block_elems, 256);
    }
    EXPECT_EQ(offsetof(BlockQ6_K, d), 208u);
    EXPECT_EQ(offsetof(BlockQ5_K, qs), 48u);
    EXPECT_EQ(offsetof(BlockQ8_K, bsums), 260u);
}

TEST(QuantLayout, VecDotTypesAsGgml) {
    EXPECT_EQ(vec_dot_type(DType::kQ4_0), DType::kQ8_0);
    EXPECT_EQ(vec_dot_type(DType::kQ5_0), DType::kQ8_0);
    EXPECT_EQ(vec_dot_type(DType::kQ8_0), DType::kQ8_0);
    EXPECT_EQ(vec_dot_type(DType::kQ4_1), DType::kQ8_1);
    EXPECT_EQ(vec_dot_type(DType::kQ5_1), DType::kQ8_1);
    EXPECT_EQ(vec_dot_type(DType::kQ4_K), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kQ5_K), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kQ6_K), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kQ2_K), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kQ3_K), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kIQ4_XS), DType::kQ8_K);
    EXPECT_EQ(vec_dot_type(DType::kIQ4_NL), DType::kQ8_0);
    EXPECT_EQ(vec_dot_type(DType::kMXFP4), DType::kQ8_0);
    EXPECT_EQ(vec_dot_type(DType::kF16), DType::kF16);
    EXPECT_EQ(vec_dot_type(DType::kBF16), DType::kBF16);
    EXPECT_EQ(vec_dot_type(DType::kF32), DType::kF32);
    for (DType t : kernel_test::kGridTypes) {
        EXPECT_TRUE(is_weight_type(t)) << type_name(t);
        EXPECT_EQ(vec_dot_type(t), DType::kQ8_K) << type_name(t);  // ggml-cpu's type traits
        EXPECT_EQ(quant_kernels(t).act_type, DType::kQ8_K);
    }
    EXPECT_FALSE(is_weight_type(DType::kQ8_K));
    EXPECT_FALSE(is_weight_type(DType::kQ8_1));
    for (DType t : kWeightTypes) {
        const QuantKernels& k = quant_kernels(t);
        EXPECT_EQ(k.type, t);
        EXPECT_EQ(k.act_type, vec_dot_type(t));
    }
}

// ---- hand-packed blocks: bytes written at the offsets the GGUF format defines ----

void put_f16(uint8_t* p, float v) {
    const uint16_t h = fp32_to_fp16(v);
    p[0] = static_cast<uint8_t>(h & 0xff);  // little-endian
    p[1] = static_cast<uint8_t>(h >> 8);
}

std::vector<float> deq(DType t, const std::vector<uint8_t>& bytes) {
    const DTypeInfo& info = dtype_info(t);
    const int64_t n = static_cast<int64_t>(bytes.size()) / info.block_bytes * info.block_elems;
    return dequantize(t, bytes, n);
}

TEST(QuantKnownAnswer, Q4_0) {
    std::vector<uint8_t> b(18);
    put_f16(&b[0], 0.5f);
    for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    const auto y = deq(DType::kQ4_0, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], (j - 8) * 0.5f) << j;            // low nibbles: elements 0..15
        EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f) << j;  // high nibbles: elements 16..31
    }
}

TEST(QuantKnownAnswer, Q4_1) {
    std::vector<uint8_t> b(20);
    put_f16(&b[0], 0.25f);  // d
    put_f16(&b[2], -1.0f);  // m
    for (int j = 0; j < 16; ++j) b[4 + j] = static_cast<uint8_t>(j | (((7 * j) % 16) << 4));
    const auto y = deq(DType::kQ4_1, b);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(y[j], j * 0.25f - 1.0f) << j;
        EXPECT_EQ(y[j + 16], ((7 * j) % 16) * 0.25f - 1.0f) << j;
    }
}

TEST(QuantKnownAnswer, Q5_0AndQ5_1) {
    const uint32_t qh = 0xA5C3F00Fu;  // bit j = 5th bit of element j
    std::vector<uint8_t> b0(22), b1(24);
    put_f16(&b0[0], 2.0f);
    put_f16(&b1[0], 2.0f);
    put_f16(&b1[2], 0.5f);
    for (int k = 0; k < 4; ++k) {
        b0[2 + k] = static_cast<uint8_t>(qh >> (8 * k));
        b1[4 + k] = static_cast<uint8_t>(qh >> (8 * k));
    }
    for (int j = 0; j < 16; ++j) {
        b0[6 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
        b1[8 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    }
    const auto y0 = deq(DType::kQ5_0, b0);
    const auto y1 = deq(DType::kQ5_1, b1);
    for (int e = 0; e < 32; ++e) {
        const int lo = e < 16 ? e : 15 - (e - 16);
        const int q = lo | static_cast<int>(((qh >> e) & 1) << 4);
        EXPECT_EQ(y0[e], (q - 16) * 2.0f) << e;
        EXPECT_EQ(y1[e], q * 2.0f + 0.5f) << e;
    }
}

TEST(QuantKnownAnswer, Q8_0) {
    std::vector<uint8_t> b(34);
    put_f16(&b[0], 0.125f);
    for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j * 7 - 100));
    const auto y = deq(DType::kQ8_0, b);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 7 - 100) * 0.125f) << j;
}

// Q4_K/Q5_K: 6-bit scales and mins packed into 12 bytes, written here straight from the
// format's description (see quant_blocks.h for the unpacking side).
void pack_k_scales(const int* sc, const int* m, uint8_t* s) {
    std::memset(s, 0, 12);
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            s[j] |= static_cast<uint8_t>(sc[j]);     // low 6 bits of byte j
            s[j + 4] |= static_cast<uint8_t>(m[j]);  // low 6 bits of byte j+4
        } else {
            s[j + 4] |= static_cast<uint8_t>((sc[j] & 15) | ((m[j] & 15) << 4));
            s[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);  // top 2 bits of byte j-4
            s[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);       // top 2 bits of byte j
        }
    }
}

const int kKSc[8] = {1, 2, 3, 63, 17, 33, 48, 5};
const int kKMin[8] = {0, 7, 60, 1, 40, 21, 3, 63};

TEST(QuantKnownAnswer, Q4_K) {
    std::vector<uint8_t> b(144, 0);
    put_f16(&b[0], 1.0f);  // d
    put_f16(&b[2], 0.5f);  // dmin
    pack_k_scales(kKSc, kKMin, &b[4]);
    int q[256];
    for (int e = 0; e < 256; ++e) {
        q[e] = (e * 5 + 3) % 16;
        const int byte = 16 + 32 * (e / 64) + e % 32;
        b[byte] |= static_cast<uint8_t>((e % 64) < 32 ? q[e] : q[e] << 4);
    }
    const auto y = deq(DType::kQ4_K, b);
    for (int e = 0; e < 256; ++e)
        EXPECT_EQ(y[e], 1.0f * kKSc[e / 32] * q[e] - 0.5f * kKMin[e / 32]) << e;
}

TEST(QuantKnownAnswer, Q5_K) {
    std::vector<uint8_t> b(176, 0);
    put_f16(&b[0], 0.25f);
    put_f16(&b[2], 2.0f);
    pack_k_scales(kKSc, kKMin, &b[4]);
    int q[256];
    for (int e = 0; e < 256; ++e) {
        q[e] = (e * 13 + 7) % 32;
        const int byte = 48 + 32 * (e / 64) + e % 32;
        b[byte] |= static_cast<uint8_t>((e % 64) < 32 ? (q[e] & 15) : (q[e] & 15) << 4);
        b[16 + e % 32] |= static_cast<uint8_t>((q[e] >> 4) << (e / 32));  // qh: bit e/32
    }
    const auto y = deq(DType::kQ5_K, b);
    for (int e = 0; e < 256; ++e)
        EXPECT_EQ(y[e], 0.25f * kKSc[e / 32] * q[e] - 2.0f * kKMin[e / 32]) << e;
}

TEST(QuantKnownAnswer, Q6_K) {
    std::vector<uint8_t> b(210, 0);
    int sc[16];
    for (int j = 0; j < 16; ++j) {
        sc[j] = (j * 13 % 40) - 20;  // signed
        b[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(sc[j]));
    }
    put_f16(&b[208], 0.5f);  // d is the last field
    int q[256];
    for (int e = 0; e < 256; ++e) {
        q[e] = (e * 11 + 5) % 64;
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        const int ql_byte = 64 * h + l + (k & 1) * 32;
        b[ql_byte] |= static_cast<uint8_t>(k < 2 ? (q[e] & 15) : (q[e] & 15) << 4);
        b[128 + 32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
    }
    const auto y = deq(DType::kQ6_K, b);
    for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.5f * sc[e / 16] * (q[e] - 32)) << e;
}

TEST(QuantKnownAnswer, Q8_KQuantizeAsGgml) {
    // The signed abs-max maps to -127 (iscale = -127 / max) and d = 1 / iscale, so d has the
    // opposite sign of that element. bsums are the sums of each 16 quants.
    for (float max : {-2.0f, 2.0f}) {
        SCOPED_TRACE(max);
        std::vector<float> x(256, 0.0f);
        for (int e = 0; e < 256; ++e) x[e] = static_cast<float>((e % 17) - 8) / 8.0f;
        x[3] = max;
        const auto q = quantize(DType::kQ8_K, x);
        BlockQ8_K b;
        std::memcpy(&b, q.data(), sizeof(b));
        EXPECT_FLOAT_EQ(b.d, -max / 127.0f);
        EXPECT_EQ(b.qs[3], -127);
        EXPECT_EQ(b.qs[0], max < 0 ? -64 : 64);  // -1.0 -> -1.0 * -127 / max = +-63.5 -> +-64
        for (int j = 0; j < 16; ++j) {
            int s = 0;
            for (int l = 0; l < 16; ++l) s += b.qs[16 * j + l];
            EXPECT_EQ(b.bsums[j], s);
        }
    }
    // nearest_int rounds ties to even: max = -127/64 gives iscale = 64, and 32.5/64 -> 32.5.
    std::vector<float> x(256, 0.0f);
    x[0] = -127.0f / 64;
    x[1] = 32.5f / 64;
    x[2] = 33.5f / 64;
    const auto q = quantize(DType::kQ8_K, x);
    EXPECT_EQ(static_cast<int8_t>(q[4 + 1]), 32);
    EXPECT_EQ(static_cast<int8_t>(q[4 + 2]), 34);
}

// ---- golden data from gguf-py (an independent implementation of the same formats) ----

class QuantIsaTest : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (!kernel_test::isa_available(GetParam()))
            GTEST_SKIP() << GetParam() << " not on this CPU";
        kernels_force_isa(GetParam().c_str());
    }
    void TearDown() override { kernels_force_isa(kernel_test::best_isa()); }
};

TEST_P(QuantIsaTest, GoldenDequantizeMatchesGgufPy) {
    for (const GoldenCase& g : kGoldenDequant) {
        SCOPED_TRACE(type_name(g.type));
        std::vector<float> ref(static_cast<size_t>(g.n)), disp(static_cast<size_t>(g.n));
        ASSERT_EQ(dtype_row_bytes(g.type, g.n), static_cast<int64_t>(g.n_bytes));
        dequantize_row_ref(g.type, g.bytes, ref.data(), g.n);
        quant_kernels(g.type).dequantize_row(g.bytes, disp.data(), g.n);
        for (int64_t i = 0; i < g.n; ++i) {
            ASSERT_NEAR(ref[i], g.values[i], 1e-6f * std::fabs(g.values[i])) << "element " << i;
            ASSERT_EQ(disp[i], ref[i]) << "element " << i;
        }
    }
}

TEST(QuantGolden, QuantizeRefIsByteExactWithGgml) {
    for (const GoldenCase& g : kGoldenQuant) {
        SCOPED_TRACE(type_name(g.type));
        std::vector<uint8_t> q(g.n_bytes);
        ASSERT_EQ(dtype_row_bytes(g.type, g.n), static_cast<int64_t>(g.n_bytes));
        quantize_row_ref(g.type, g.values, q.data(), g.n);
        for (size_t i = 0; i < g.n_bytes; ++i) ASSERT_EQ(q[i], g.bytes[i]) << "byte " << i;
    }
}

// The grid formats have no quantizer (quants.h): asking for one is a bug, not a silent zero row.
TEST(QuantGridDeathTest, QuantizeRefRefusesTheGridFormats) {
    const std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_row_bytes(DType::kIQ2_XXS, 256)));
    EXPECT_DEATH(quantize_row_ref(DType::kIQ2_XXS, x.data(), q.data(), 256), "no quantizer");
}

// ---- round trips ----

// Per-element bound on |x - dequantize(quantize(x))| for a row, derived from the format and
// the quantizer (fp16 scales are relatively exact to 2^-11, hence the 1/2048 terms).
std::vector<double> error_bounds(DType t, const std::vector<float>& x) {
    const int64_t n = static_cast<int64_t>(x.size());
    std::vector<double> bound(x.size());
    auto amax_of = [&](int64_t b, int64_t len) {
        double a = 0;
        for (int64_t i = b; i < b + len; ++i) a = std::max(a, std::fabs(static_cast<double>(x[i])));
        return a;
    };
    auto minmax_of = [&](int64_t b, int64_t len, double* mn, double* mx) {
        *mn = x[b];
        *mx = x[b];
        for (int64_t i = b; i < b + len; ++i) {
            *mn = std::min(*mn, static_cast<double>(x[i]));
            *mx = std::max(*mx, static_cast<double>(x[i]));
        }
    };
    const double ulp16 = 1.0 / 2048;
    switch (t) {
        case DType::kF32:
            std::fill(bound.begin(), bound.end(), 0.0);
            break;
        case DType::kF16:  // round to nearest: half an ulp, relative 2^-11
            for (size_t i = 0; i < x.size(); ++i) bound[i] = std::fabs(x[i]) * ulp16 + 3e-8;
            break;
        case DType::kBF16:  // 8 significant bits: relative 2^-8
            for (size_t i = 0; i < x.size(); ++i) bound[i] = std::fabs(x[i]) / 256.0 + 1e-38;
            break;
        case DType::kQ8_0:
        case DType::kQ8_1:
            // d = amax/127, round to nearest: d/2, plus |q| <= 127 times d's fp16 error.
            for (int64_t b = 0; b < n; b += 32) {
                const double d = amax_of(b, 32) / 127;
                for (int64_t i = b; i < b + 32; ++i) bound[i] = d * (0.5 + 127 * ulp16) + 1e-9;
            }
            break;
        case DType::kQ8_K:  // float d, no fp16 rounding
            for (int64_t b = 0; b < n; b += 256) {
                const double d = amax_of(b, 256) / 127;
                for (int64_t i = b; i < b + 256; ++i) bound[i] = d * 0.5 * (1 + 1e-4) + 1e-9;
            }
            break;
        case DType::kQ4_0:
        case DType::kQ5_0: {
            // ggml maps the signed abs-max to the most negative level (-8 / -16): an element
            // near -max lands one past the top level and clamps, so the bound is a full step.
            const double levels = t == DType::kQ4_0 ? 8 : 16;
            for (int64_t b = 0; b < n; b += 32) {
                const double d = amax_of(b, 32) / levels;
                for (int64_t i = b; i < b + 32; ++i) bound[i] = d * (1 + levels * ulp16) + 1e-9;
            }
            break;
        }
        case DType::kQ4_1:
        case DType::kQ5_1: {
            // d = (max - min)/nmax, round to nearest; m = min in fp16.
            const double nmax = t == DType::kQ4_1 ? 15 : 31;
            for (int64_t b = 0; b < n; b += 32) {
                double mn, mx;
                minmax_of(b, 32, &mn, &mx);
                const double d = (mx - mn) / nmax;
                for (int64_t i = b; i < b + 32; ++i)
                    bound[i] = d * (0.5 + nmax * ulp16) + std::fabs(mn) * ulp16 + 1e-7;
            }
            break;
        }
        case DType::kQ4_K:
        case DType::kQ5_K: {
            // See fit_kquant: half a step of d*sc_j <= scale_j + d + dmin/nmax, or where the
            // 6-bit cap bites, dmin plus the fp16 shortfall of d.
            const double nmax = t == DType::kQ4_K ? 15 : 31;
            for (int64_t b = 0; b < n; b += 256) {
                double s_max = 0, m_max = 0;
                for (int j = 0; j < 8; ++j) {
                    double mn, mx;
                    minmax_of(b + 32 * j, 32, &mn, &mx);
                    mn = std::min(mn, 0.0);
                    mx = std::max(mx, 0.0);
                    s_max = std::max(s_max, (mx - mn) / nmax);
                    m_max = std::max(m_max, -mn);
                }
                const double d = s_max / 63, dmin = m_max / 63;
                const double bnd =
                    0.5 * (s_max + d + dmin / nmax) + dmin + nmax * s_max * ulp16 + 1e-6;
                for (int64_t i = b; i < b + 256; ++i) bound[i] = bnd;
            }
            break;
        }
        case DType::kQ6_K:
            // See quant_q6_k: half a step of d*sc_j <= amax_j/31 + d, d = max_j(amax_j/31)/127.
            for (int64_t b = 0; b < n; b += 256) {
                const double d = amax_of(b, 256) / 31 / 127;
                for (int j = 0; j < 16; ++j) {
                    const double s = amax_of(b + 16 * j, 16) / 31;
                    for (int64_t i = b + 16 * j; i < b + 16 * j + 16; ++i)
                        bound[i] = 0.5 * (s + d) * (1 + ulp16) + 1e-7;
                }
            }
            break;
        case DType::kQ2_K: {
            // See fit_scale_min (nmax 3, 4-bit scales): as Q4_K with 16 sub-blocks of 16.
            for (int64_t b = 0; b < n; b += 256) {
                double s_max = 0, m_max = 0;
                for (int j = 0; j < 16; ++j) {
                    double mn, mx;
                    minmax_of(b + 16 * j, 16, &mn, &mx);
                    mn = std::min(mn, 0.0);
                    mx = std::max(mx, 0.0);
                    s_max = std::max(s_max, (mx - mn) / 3);
                    m_max = std::max(m_max, -mn);
                }
                const double d = s_max / 15, dmin = m_max / 15;
                const double bnd = 0.5 * (s_max + d + dmin / 3) + dmin + 3 * s_max * ulp16 + 1e-6;
                for (int64_t i = b; i < b + 256; ++i) bound[i] = bnd;
            }
            break;
        }
        case DType::kQ3_K:
            // See quant_q3_k: half a step of d*sc_j <= amax_j/3 + d, d = max_j(amax_j/3)/31.
            for (int64_t b = 0; b < n; b += 256) {
                const double d = amax_of(b, 256) / 3 / 31;
                for (int j = 0; j < 16; ++j) {
                    const double s = amax_of(b + 16 * j, 16) / 3;
                    for (int64_t i = b + 16 * j; i < b + 16 * j + 16; ++i)
                        bound[i] = 0.5 * (s + d) * (1 + ulp16) + 1e-7;
                }
            }
            break;
        case DType::kIQ4_NL:
            // See quant_iq4_nl: 14 steps of d = amax / 127 (above the top level), fp16 d.
            for (int64_t b = 0; b < n; b += 32) {
                const double d = amax_of(b, 32) / 127;
                for (int64_t i = b; i < b + 32; ++i) bound[i] = 14 * d + 127 * d * ulp16 + 1e-7;
            }
            break;
        case DType::kIQ4_XS:
            // See quant_iq4_xs: 14 steps of d * |ls_j| <= amax_j / 127 + d, d = max_j(amax_j/127)/31,
            // plus the fp16 rounding of d (times up to 127 * 32 steps).
            for (int64_t b = 0; b < n; b += 256) {
                const double d = amax_of(b, 256) / 127 / 31;
                for (int j = 0; j < 8; ++j) {
                    const double s = amax_of(b + 32 * j, 32) / 127;
                    for (int64_t i = b + 32 * j; i < b + 32 * j + 32; ++i)
                        bound[i] = 14 * (s + d) + 127 * 32 * d * ulp16 + 1e-7;
                }
            }
            break;
        case DType::kMXFP4:
            // See quant_mxfp4: half the widest gap between levels, 2 * d < amax / 3.
            for (int64_t b = 0; b < n; b += 32) {
                const double a = amax_of(b, 32);
                for (int64_t i = b; i < b + 32; ++i) bound[i] = a / 3 + 1e-30;
            }
            break;
        default:
            ADD_FAILURE() << "no bound for " << type_name(t);
    }
    return bound;
}

// Largest acceptable rms(error) / rms(x) on the Gaussian rows below: a sanity check of the
// quantizer's quality (about step/sqrt(12) of a 2.5-sigma block range), far below what a
// broken layout or scale gives (~1).
double max_relative_rms(DType t) {
    switch (t) {
        case DType::kF32:
            return 0;
        case DType::kF16:
            return 4e-4;
        case DType::kBF16:
            return 3e-3;
        case DType::kQ8_0:
        case DType::kQ8_1:
        case DType::kQ8_K:
            return 0.025;
        case DType::kQ6_K:
            return 0.05;
        case DType::kQ2_K:
            return 0.45;
        case DType::kQ3_K:
            return 0.3;
        case DType::kQ5_0:
        case DType::kQ5_1:
        case DType::kQ5_K:
            return 0.1;
        default:
            return 0.2;  // 4-bit
    }
}

TEST(QuantRoundTrip, WithinFormatBounds) {
    uint32_t seed = 1;
    for (DType t : kAllTypes) {
        for (int64_t n : lengths_for(t)) {
            for (float offset : {0.0f, 1.5f}) {
                SCOPED_TRACE(type_name(t) + " n=" + std::to_string(n) +
                             " offset=" + std::to_string(offset));
                const auto x = random_row(n, seed++, 0.7f, offset);
                const auto y = dequantize(t, quantize(t, x), n);
                const auto bound = error_bounds(t, x);
                double err2 = 0, x2 = 0;
                for (int64_t i = 0; i < n; ++i) {
                    const double e = std::fabs(static_cast<double>(x[i]) - y[i]);
                    ASSERT_LE(e, bound[i]) << "element " << i << " x=" << x[i] << " y=" << y[i];
                    err2 += e * e;
                    x2 += static_cast<double>(x[i]) * x[i];
                }
                EXPECT_LE(std::sqrt(err2 / x2), max_relative_rms(t));
            }
        }
    }
}

TEST(QuantRoundTrip, ZeroAndConstantRows) {
    for (DType t : kAllTypes) {
        SCOPED_TRACE(type_name(t));
        const int64_t n = 512;
        const std::vector<float> zeros(n, 0.0f);
        for (float v : dequantize(t, quantize(t, zeros), n)) ASSERT_EQ(v, 0.0f);
        const std::vector<float> ones(n, 1.0f);
        const auto bound = error_bounds(t, ones);
        const auto y = dequantize(t, quantize(t, ones), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], 1.0f, bound[i] + 1e-6);
    }
}

// ---- dispatched kernels against the reference and against float math ----

double dot_double(const std::vector<float>& a, const std::vector<float>& b, double* abs_sum) {
    double s = 0, as = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        s += static_cast<double>(a[i]) * b[i];
        as += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    *abs_sum = as;
    return s;
}

// Q4_1/Q5_1 x Q8_1 use s = fp16(d * sum(q)) for the offset term, where d is the activation
// scale before its own rounding to fp16; a float dot of the dequantized rows uses fp16(d)
// instead. Two fp16 roundings: sum over blocks of 2 * |m| * |s| / 2048.
double q8_1_offset_slack(DType t, const std::vector<uint8_t>& w, const std::vector<uint8_t>& a,
                         int64_t n) {
    if (vec_dot_type(t) != DType::kQ8_1) return 0;
    double slack = 0;
    const int64_t wb = dtype_info(t).block_bytes;
    for (int64_t i = 0; i < n / 32; ++i) {
        uint16_t m, s;
        std::memcpy(&m, w.data() + i * wb + 2, 2);  // m follows d in Q4_1 and Q5_1
        std::memcpy(&s, a.data() + i * 36 + 2, 2);
        slack += 2 * std::fabs(fp16_to_fp32(m) * fp16_to_fp32(s)) / 2048;
    }
    return slack;
}

TEST_P(QuantIsaTest, VecDotMatchesReferenceAndFloatMath) {
    uint32_t seed = 100;
    for (DType t : kWeightTypes) {
        const DType at = vec_dot_type(t);
        const QuantKernels& k = quant_kernels(t);
        for (int64_t n : lengths_for(t)) {
            SCOPED_TRACE(type_name(t) + " n=" + std::to_string(n));
            const auto wf = random_row(n, seed++, 0.05f, 0.01f);
            const auto af = random_row(n, seed++, 2.0f);
            const auto w = quantize(t, wf);
            const auto a = quantize(at, af);  // reference activation quantization
            const auto wd = dequantize(t, w, n);
            const auto ad = dequantize(at, a, n);
            double abs_sum;
            const double exact = dot_double(wd, ad, &abs_sum);
            const double slack = q8_1_offset_slack(t, w, a, n);

            const float r = vec_dot_ref(t, n, w.data(), a.data());
            EXPECT_NEAR(r, exact, 2e-6 * abs_sum + slack + 1e-7) << "reference vs float math";
            const float v = k.vec_dot(n, w.data(), a.data());
            EXPECT_NEAR(v, r, 2e-6 * abs_sum + 1e-7) << "dispatched vs reference";

            // The whole path from float activations, against the float dot with the
            // unquantized activations: bounded by sum |w_i| * (activation error bound_i).
            std::vector<uint8_t> a2(a.size());
            k.quantize_act_row(af.data(), a2.data(), n);
            const auto act_bound = error_bounds(at, af);
            double wd_af_abs, quant_err = 0;
            const double float_dot = dot_double(wd, af, &wd_af_abs);
            for (int64_t i = 0; i < n; ++i) quant_err += std::fabs(wd[i]) * act_bound[i];
            const float v2 = k.vec_dot(n, w.data(), a2.data());
            EXPECT_NEAR(v2, float_dot,
                        quant_err + 2e-6 * wd_af_abs + q8_1_offset_slack(t, w, a2, n) + 1e-7)
                << "from float activations";
        }
    }
}

TEST_P(QuantIsaTest, VecDotRowsMatchesVecDot) {
    uint32_t seed = 500;
    for (DType t : kWeightTypes) {
        const DType at = vec_dot_type(t);
        const QuantKernels& k = quant_kernels(t);
        const int64_t n = dtype_info(t).block_elems == 256 ? 512 : 96;
        const int64_t row_bytes = dtype_row_bytes(t, n);
        // Rows further apart than their size: the stride must be honoured.
        const int64_t stride = row_bytes + dtype_info(t).block_bytes * (t == DType::kF32 ? 3 : 1);
        for (int64_t n_rows : {1, 3, 4, 5, 17}) {
            SCOPED_TRACE(type_name(t) + " rows=" + std::to_string(n_rows));
            std::vector<uint8_t> w(static_cast<size_t>(stride * n_rows), 0xEE);
            for (int64_t r = 0; r < n_rows; ++r) {
                const auto q = quantize(t, random_row(n, seed++, 0.1f));
                std::memcpy(w.data() + r * stride, q.data(), q.size());
            }
            const auto af = random_row(n, seed++);
            std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(at, n)));
            k.quantize_act_row(af.data(), a.data(), n);
            std::vector<float> out(static_cast<size_t>(n_rows) + 1, -12345.0f);
            k.vec_dot_rows(n, w.data(), stride, n_rows, a.data(), out.data());
            for (int64_t r = 0; r < n_rows; ++r) {
                const float one = k.vec_dot(n, w.data() + r * stride, a.data());
                EXPECT_NEAR(out[r], one, 1e-5f * std::fabs(one) + 1e-6f) << "row " << r;
            }
            EXPECT_EQ(out[n_rows], -12345.0f) << "wrote past n_rows";
        }
    }
}

// Every bit pattern of the weight blocks (random bytes, fp16 scales kept finite) against
// activations at the extremes of their range: catches saturation in the integer products.
TEST_P(QuantIsaTest, VecDotRandomBlocksAndExtremeActivations) {
    std::mt19937 rng(7);
    for (DType t : kWeightTypes) {
        const DTypeInfo& info = dtype_info(t);
        if (!info.is_quantized) continue;
        SCOPED_TRACE(type_name(t));
        const int64_t n = info.block_elems == 256 ? 1024 : 256;
        std::vector<uint8_t> w(static_cast<size_t>(dtype_row_bytes(t, n)));
        for (auto& byte : w) byte = static_cast<uint8_t>(rng());
        // Overwrite the fp16 scale fields with sane values.
        const std::vector<int> half_fields =
            t == DType::kQ6_K   ? std::vector<int>{208}
            : t == DType::kQ2_K ? std::vector<int>{80, 82}
            : t == DType::kQ3_K ? std::vector<int>{108}
            : t == DType::kMXFP4 ? std::vector<int>{}
            : (t == DType::kQ4_0 || t == DType::kQ5_0 || t == DType::kQ8_0 || t == DType::kIQ4_NL ||
               t == DType::kIQ4_XS)
                ? std::vector<int>{0}
                : std::vector<int>{0, 2};
        // MXFP4's exponent byte: scales 2^-8 .. 2^-4 (random bytes reach 2^127).
        if (t == DType::kMXFP4)
            for (int64_t b = 0; b < n / info.block_elems; ++b)
                w[static_cast<size_t>(b * info.block_bytes)] = static_cast<uint8_t>(120 + rng() % 5);
        std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
        for (int64_t b = 0; b < n / info.block_elems; ++b)
            for (int off : half_fields) {
                const uint16_t h = fp32_to_fp16(scale(rng));
                std::memcpy(&w[static_cast<size_t>(b * info.block_bytes + off)], &h, 2);
            }
        // Activations of +-amax in every block: quantize to +-127.
        std::vector<float> af(static_cast<size_t>(n));
        for (auto& v : af) v = (rng() & 1) ? 3.0f : -3.0f;
        const DType at = vec_dot_type(t);
        std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(at, n)));
        quantize_row_ref(at, af.data(), a.data(), n);
        const auto wd = dequantize(t, w, n);
        const auto ad = dequantize(at, a, n);
        double abs_sum;
        const double exact = dot_double(wd, ad, &abs_sum);
        const float r = vec_dot_ref(t, n, w.data(), a.data());
        const float v = quant_kernels(t).vec_dot(n, w.data(), a.data());
        EXPECT_NEAR(r, exact, 2e-6 * abs_sum + q8_1_offset_slack(t, w, a, n));
        EXPECT_NEAR(v, r, 2e-6 * abs_sum);
    }
}

// The low-bit formats' SIMD dot products sum in vec_dot_ref's order (one exact integer sum per
// block, the reference's float steps): its bits on every level, for rows of quantized values and
// of random blocks (every quant, high-bit and scale pattern, negative scales included), against
// ordinary activations and +-127 everywhere (where a saturating integer step would show).
TEST_P(QuantIsaTest, LowBitVecDotIsTheReference) {
    std::mt19937 rng(23);
    for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kIQ4_NL, DType::kIQ4_XS, DType::kMXFP4}) {
        const QuantKernels& k = quant_kernels(t);
        const DType at = vec_dot_type(t);
        for (int64_t n : {256, 512, 4096}) {
            for (int variant = 0; variant < 4; ++variant) {
                SCOPED_TRACE(type_name(t) + " n=" + std::to_string(n) + " variant " + std::to_string(variant));
                std::vector<uint8_t> w(static_cast<size_t>(dtype_row_bytes(t, n)));
                if (variant % 2 == 0) {
                    w = quantize(t, random_row(n, static_cast<uint32_t>(rng()), 0.05f, 0.01f));
                } else {
                    kernel_test::random_blocks(t, w.data(), n, rng);
                }
                std::vector<float> af = random_row(n, static_cast<uint32_t>(rng()), 2.0f);
                if (variant >= 2)
                    for (auto& v : af) v = (rng() & 1) ? 3.0f : -3.0f;
                std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(at, n)));
                k.quantize_act_row(af.data(), a.data(), n);
                const float want = vec_dot_ref(t, n, w.data(), a.data());
                const float got = k.vec_dot(n, w.data(), a.data());
                ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << got << " vs " << want;
            }
        }
    }
}

// The grid formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M) on random blocks (every
// grid index, sign code, scale and delta bit): vec_dot_ref is the float dot of the dequantized
// weights and the dequantized Q8_K activations (its exact integer sums scaled in float), and the
// dispatched vec_dot and vec_dot_rows give its bits, for ordinary activations and +-127 everywhere.
TEST_P(QuantIsaTest, GridVecDotIsTheDequantizedDot) {
    std::mt19937 rng(31);
    for (DType t : kernel_test::kGridTypes) {
        const QuantKernels& k = quant_kernels(t);
        ASSERT_EQ(k.act_type, DType::kQ8_K);
        for (int64_t n : {256, 1024, 4096}) {
            for (int variant = 0; variant < 3; ++variant) {
                SCOPED_TRACE(type_name(t) + " n=" + std::to_string(n) + " variant " + std::to_string(variant));
                std::vector<uint8_t> w(static_cast<size_t>(dtype_row_bytes(t, n)));
                kernel_test::random_blocks(t, w.data(), n, rng);
                std::vector<float> af = random_row(n, static_cast<uint32_t>(rng()), 2.0f);
                if (variant == 1)
                    for (auto& v : af) v = (rng() & 1) ? 3.0f : -3.0f;
                if (variant == 2)
                    for (auto& v : af) v = -3.0f;
                std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(DType::kQ8_K, n)));
                k.quantize_act_row(af.data(), a.data(), n);
                const auto wd = dequantize(t, w, n);
                const auto ad = dequantize(DType::kQ8_K, a, n);
                double abs_sum;
                const double exact = dot_double(wd, ad, &abs_sum);
                const float want = vec_dot_ref(t, n, w.data(), a.data());
                EXPECT_NEAR(want, exact, 2e-6 * abs_sum + 1e-9) << "reference vs float math";
                const float got = k.vec_dot(n, w.data(), a.data());
                ASSERT_EQ(std::memcmp(&got, &want, 4), 0) << got << " vs " << want;
            }
        }
        // vec_dot_rows: a strided stack of rows, vec_dot's bits each.
        const int64_t n = 512, stride = dtype_row_bytes(t, n) + 7;
        for (int64_t n_rows : {1, 3, 8, 17}) {
            std::vector<uint8_t> w(static_cast<size_t>(stride * n_rows), 0xEE);
            for (int64_t r = 0; r < n_rows; ++r) kernel_test::random_blocks(t, w.data() + r * stride, n, rng);
            const auto af = random_row(n, static_cast<uint32_t>(rng()));
            std::vector<uint8_t> a(static_cast<size_t>(dtype_row_bytes(DType::kQ8_K, n)));
            k.quantize_act_row(af.data(), a.data(), n);
            std::vector<float> out(static_cast<size_t>(n_rows) + 1, -12345.0f);
            k.vec_dot_rows(n, w.data(), stride, n_rows, a.data(), out.data());
            for (int64_t r = 0; r < n_rows; ++r) {
                const float want = vec_dot_ref(t, n, w.data() + r * stride, a.data());
                ASSERT_EQ(std::memcmp(&out[r], &want, 4), 0) << type_name(t) << " row " << r;
            }
            EXPECT_EQ(out[n_rows], -12345.0f) << "wrote past n_rows";
        }
    }
}

// The dispatched activation quantizers against the reference. Q8_K, F16, BF16, F32: the
// same bytes. Q8_0/Q8_1 on AVX2 follow ggml's x86 code (id = 127/amax, ties to even), so a
// quant may differ by one where x/d sits on (or within float rounding of) a .5 tie.
TEST_P(QuantIsaTest, ActivationQuantizerMatchesReference) {
    for (DType at :
         {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K, DType::kF16, DType::kBF16, DType::kF32}) {
        const DType wt = at == DType::kQ8_0   ? DType::kQ8_0
                         : at == DType::kQ8_1 ? DType::kQ4_1
                         : at == DType::kQ8_K ? DType::kQ4_K
                                              : at;
        SCOPED_TRACE(type_name(at));
        const int64_t n = 4096;
        const auto x = random_row(n, 99, 3.0f);
        const auto ref = quantize(at, x);
        std::vector<uint8_t> got(ref.size());
        quant_kernels(wt).quantize_act_row(x.data(), got.data(), n);
        if (at != DType::kQ8_0 && at != DType::kQ8_1) {
            EXPECT_EQ(got, ref);
            continue;
        }
        const int64_t bb = dtype_info(at).block_bytes;
        const int64_t q_off = at == DType::kQ8_0 ? 2 : 4;
        int n_diff = 0;
        for (int64_t b = 0; b < n / 32; ++b) {
            ASSERT_EQ(std::memcmp(&got[b * bb], &ref[b * bb], 2), 0) << "d of block " << b;
            bool same_q = true;
            for (int64_t j = 0; j < 32; ++j) {
                const int diff = static_cast<int8_t>(got[b * bb + q_off + j]) -
                                 static_cast<int8_t>(ref[b * bb + q_off + j]);
                ASSERT_LE(std::abs(diff), 1);
                n_diff += diff != 0;
                same_q = same_q && diff == 0;
            }
            if (at == DType::kQ8_1 && same_q) {  // then s = fp16(d * sum) must agree too
                ASSERT_EQ(std::memcmp(&got[b * bb + 2], &ref[b * bb + 2], 2), 0)
                    << "s of block " << b;
            }
        }
        EXPECT_LE(n_diff, 4) << "more than float-rounding ties";
    }
}

// The SIMD Q8_0 / Q8_1 quantizers (eight blocks reduced together) byte for byte against ggml's
// x86 formula written per block: d = amax / 127, q = round_half_even(x * (127 / amax)) (0 for
// an all-zero block), s = fp16(d * sum(q)). Rows of 1-40 blocks, so every group size up to 8
// and its remainder is hit, with zero blocks, exact ties and tiny and large scales.
TEST_P(QuantIsaTest, Q8ActivationBlocksAsGgmlX86) {
    if (GetParam() == "scalar") GTEST_SKIP() << "the scalar quantizer rounds as ggml's reference";
    uint32_t seed = 5;
    for (int64_t nb = 1; nb <= 40; ++nb) {
        for (int variant = 0; variant < 4; ++variant) {
            const int64_t n = 32 * nb;
            auto x = random_row(n, seed++, variant == 1 ? 1e-3f : 3.0f);
            if (variant == 2) std::fill(x.begin() + 32 * (nb / 2), x.begin() + 32 * (nb / 2 + 1), 0.0f);
            if (variant == 3) {
                x[32 * (nb - 1)] = 127.0f;  // d = 1: 2.5 and -3.5 are exact ties
                x[32 * (nb - 1) + 1] = 2.5f;
                x[32 * (nb - 1) + 2] = -3.5f;
            }
            for (const bool with_sum : {false, true}) {
                SCOPED_TRACE(::testing::Message() << nb << " blocks, variant " << variant
                                                  << (with_sum ? ", Q8_1" : ", Q8_0"));
                const int64_t bb = with_sum ? 36 : 34, q_off = with_sum ? 4 : 2;
                std::vector<uint8_t> want(nb * bb), got(nb * bb, 0xAB);
                for (int64_t b = 0; b < nb; ++b) {
                    float amax = 0.0f;
                    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
                    const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
                    int sum = 0;
                    for (int j = 0; j < 32; ++j) {
                        const int q = static_cast<int>(std::nearbyint(x[32 * b + j] * id));
                        want[b * bb + q_off + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
                        sum += q;
                    }
                    const uint16_t dh = fp32_to_fp16(d), sh = fp32_to_fp16(d * static_cast<float>(sum));
                    std::memcpy(&want[b * bb], &dh, 2);
                    if (with_sum) std::memcpy(&want[b * bb + 2], &sh, 2);
                }
                quant_kernels(with_sum ? DType::kQ4_1 : DType::kQ8_0).quantize_act_row(x.data(), got.data(), n);
                for (int64_t b = 0; b < nb; ++b)
                    ASSERT_EQ(std::memcmp(&got[b * bb], &want[b * bb], bb), 0) << "block " << b;
            }
        }
    }
}

// Q8_K's vector quantizer on the blocks where the reference's scalar semantics decide: the
// first of two equal magnitudes sets the sign, NaNs are skipped by the max (and give 0), an
// infinite max gives -0 scales, a denormal max overflows iscale (the int8 cast wraps what
// nearest_int returns), exact halves round to even, all-zero and -0 blocks are zero blocks.
TEST_P(QuantIsaTest, Q8_KEdgeBlocksAsReference) {
    constexpr int64_t K = 256;
    std::vector<std::vector<float>> blocks;
    const auto base = random_row(K, 7, 1.0f);
    auto with = [&](std::initializer_list<std::pair<int, float>> set) {
        std::vector<float> b = base;
        for (const auto& [i, v] : set) b[i] = v;
        blocks.push_back(b);
    };
    with({{3, -5.0f}, {200, 5.0f}});                       // tie: the negative one comes first
    with({{3, 5.0f}, {200, -5.0f}});                       // tie: the positive one first
    with({{10, std::nanf("")}, {11, 4.0f}});               // a NaN is not the max
    with({{0, std::numeric_limits<float>::infinity()}});   // infinite max
    with({{5, -std::numeric_limits<float>::infinity()}, {6, std::numeric_limits<float>::infinity()}});
    std::vector<float> tiny(K, 0.0f);
    tiny[9] = 1e-44f;  // denormal: -127 / max overflows to -inf
    tiny[10] = -5e-45f;
    blocks.push_back(tiny);
    std::vector<float> halves(K, 0.0f);
    halves[0] = 127.0f;  // iscale = -1 exactly
    for (int i = 1; i < 40; ++i) halves[i] = 0.5f * static_cast<float>(i) - 10.0f;
    blocks.push_back(halves);
    blocks.push_back(std::vector<float>(K, 0.0f));
    blocks.push_back(std::vector<float>(K, -0.0f));
    // x whose product with iscale rounds up to an exact half (5.5) in float although the exact
    // product is below it: the reference rounds the product, then the half to even (6); a
    // multiply fused into the rounding add sees the exact product (5). Found on a Gemma 3
    // activation (with this max).
    {
        const float max = -3.38032651f, iscale = -127.f / max;
        float x = std::nextafter(5.5f / iscale, 0.0f);
        for (int k = 0; k < 64 && !(x * iscale == 5.5f && double(x) * iscale < 5.5); ++k) x = std::nextafter(x, 1.0f);
        ASSERT_TRUE(x * iscale == 5.5f && double(x) * iscale < 5.5) << "no such x near 5.5 / iscale";
        std::vector<float> b(K, 0.0f);
        b[0] = max;
        b[1] = x;
        b[2] = -x;
        blocks.push_back(b);
    }
    std::vector<float> row;
    for (const auto& b : blocks) row.insert(row.end(), b.begin(), b.end());
    const int64_t n = static_cast<int64_t>(row.size());
    const auto ref = quantize(DType::kQ8_K, row);
    std::vector<uint8_t> got(ref.size(), 0xAB);
    quant_kernels(DType::kQ6_K).quantize_act_row(row.data(), got.data(), n);
    const int64_t bb = dtype_info(DType::kQ8_K).block_bytes;
    for (int64_t i = 0; i < n / K; ++i)
        EXPECT_EQ(0, std::memcmp(got.data() + i * bb, ref.data() + i * bb, bb)) << "block " << i;
}

TEST_P(QuantIsaTest, Q8_0TieRoundingAsGgml) {
    // amax = 127 -> d = 1 exactly; 2.5 is an exact tie.
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    std::vector<uint8_t> q(34);
    quant_kernels(DType::kQ8_0).quantize_act_row(x.data(), q.data(), 32);
    if (GetParam() != "scalar") {
        EXPECT_EQ(static_cast<int8_t>(q[3]), 2);  // ggml x86: round half to even
        EXPECT_EQ(static_cast<int8_t>(q[4]), -4);
    } else {
        EXPECT_EQ(static_cast<int8_t>(q[3]), 3);  // ggml reference: roundf, half away from zero
        EXPECT_EQ(static_cast<int8_t>(q[4]), -4);
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, QuantIsaTest, ::testing::ValuesIn(kernel_test::all_isas()),
                         [](const auto& info) { return info.param; });

TEST(KernelsIsa, SelectsBestAndCanBeForced) {
    const std::string best = kernel_test::best_isa();
    if (std::getenv("FERROX_KERNELS_ISA") == nullptr) {
        EXPECT_EQ(kernels_isa_name(), best);
    }
    kernels_force_isa("scalar");
    EXPECT_STREQ(kernels_isa_name(), "scalar");
    kernels_force_isa(best.c_str());
    EXPECT_EQ(kernels_isa_name(), best);
}

}  // namespace
}  // namespace ferrox

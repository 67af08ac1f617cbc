#include "tensor/dtype.h"

#include <iterator>

#include "core/check.h"

namespace ferrox {

namespace {
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "f32", 1, 4, false},
    {DType::kF16, "f16", 1, 2, false},
    {DType::kQ4_0, "q4_0", 32, 18, true},
    {DType::kQ4_1, "q4_1", 32, 20, true},
    {DType::kQ5_0, "q5_0", 32, 22, true},
    {DType::kQ5_1, "q5_1", 32, 24, true},
    {DType::kQ8_0, "q8_0", 32, 34, true},
    {DType::kQ8_1, "q8_1", 32, 36, true},
    {DType::kQ2_K, "q2_K", 256, 84, true},
    {DType::kQ3_K, "q3_K", 256, 110, true},
    {DType::kQ4_K, "q4_K", 256, 144, true},
    {DType::kQ5_K, "q5_K", 256, 176, true},
    {DType::kQ6_K, "q6_K", 256, 210, true},
    {DType::kQ8_K, "q8_K", 256, 292, true},
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66, true},
    {DType::kIQ2_XS, "iq2_xs", 256, 74, true},
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98, true},
    {DType::kIQ1_S, "iq1_s", 256, 50, true},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true},
    {DType::kIQ3_S, "iq3_s", 256, 110, true},
    {DType::kIQ2_S, "iq2_s", 256, 82, true},
    {DType::kIQ4_XS, "iq4_xs", 256, 136, true},
    {DType::kIQ1_M, "iq1_m", 256, 56, true},
    {DType::kBF16, "bf16", 1, 2, false},
    {DType::kMXFP4, "mxfp4", 32, 17, true},
};
}  // namespace

std::optional<DTypeInfo> dtype_info(uint32_t ggml_type) {
    for (const auto& i : kInfos)
        if (static_cast<uint32_t>(i.type) == ggml_type) return i;
    return std::nullopt;
}

const DTypeInfo& dtype_info(DType type) {
    for (const auto& i : kInfos)
        if (i.type == type) return i;
    CHECK_MSG(false, "unknown DType");
    __builtin_unreachable();
}

std::string_view dtype_name(DType type) { return dtype_info(type).name; }

std::string_view ggml_type_name(uint32_t ggml_type) {
    // ggml's type ids (gguf-py's GGMLQuantizationType); the gaps are ids ggml removed.
    static constexpr std::string_view kNames[] = {
        "f32",     "f16",    "q4_0",    "q4_1",   "",       "",       "q5_0",  "q5_1",   "q8_0",   "q8_1",
        "q2_K",    "q3_K",   "q4_K",    "q5_K",   "q6_K",   "q8_K",   "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s",
        "iq4_nl",  "iq3_s",  "iq2_s",   "iq4_xs", "i8",     "i16",    "i32",   "i64",    "f64",    "iq1_m",
        "bf16",    "",       "",        "",       "tq1_0",  "tq2_0",  "",      "",       "",       "mxfp4",
        "nvfp4",   "q1_0"};
    return ggml_type < std::size(kNames) ? kNames[ggml_type] : std::string_view();
}

}  // namespace ferrox

#pragma once
// Tensor element types with GGUF's numbering (ggml_type) and their block geometry.
// A quantized row of n elements is n / block_elems blocks of block_bytes each; n must be a
// multiple of block_elems (the loader rejects files where it is not).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ferrox {

enum class DType : uint32_t {
    kF32 = 0,
    kF16 = 1,
    kQ4_0 = 2,
    kQ4_1 = 3,
    kQ5_0 = 6,
    kQ5_1 = 7,
    kQ8_0 = 8,
    kQ8_1 = 9,  // activations only (the partner of Q4_1/Q5_1 dot products)
    kQ2_K = 10,
    kQ3_K = 11,
    kQ4_K = 12,
    kQ5_K = 13,
    kQ6_K = 14,
    kQ8_K = 15,  // activations only (the partner of K-quant dot products)
    kIQ2_XXS = 16,
    kIQ2_XS = 17,
    kIQ3_XXS = 18,
    kIQ1_S = 19,
    kIQ4_NL = 20,
    kIQ3_S = 21,
    kIQ2_S = 22,
    kIQ4_XS = 23,
    kIQ1_M = 29,
    kBF16 = 30,
    kMXFP4 = 39,
};

struct DTypeInfo {
    DType type;
    std::string_view name;  // as ggml prints it: "f32", "q4_0", "q4_K"...
    int64_t block_elems;    // elements per block (1 for plain floats)
    int64_t block_bytes;    // bytes per block
    bool is_quantized;
};

// Returns info for a supported type, or nullopt for any other ggml type id (the loader turns
// that into a one-line "unsupported tensor type" error).
std::optional<DTypeInfo> dtype_info(uint32_t ggml_type);
const DTypeInfo& dtype_info(DType type);
std::string_view dtype_name(DType type);
// The name ggml gives a type id, supported or not ("iq2_xxs", "iq3_s", "tq1_0"), for messages;
// empty for an id ggml does not define.
std::string_view ggml_type_name(uint32_t ggml_type);

// Bytes of a row of n elements (n a multiple of block_elems).
inline int64_t dtype_row_bytes(DType type, int64_t n) {
    const DTypeInfo& i = dtype_info(type);
    return n / i.block_elems * i.block_bytes;
}

}  // namespace ferrox

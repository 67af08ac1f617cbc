#pragma once
// Non-owning views of tensor data. Shapes follow ggml's convention: ne[0] is the innermost
// (contiguous) dimension, so a weight matrix of n_out rows by n_in columns has
// ne = {n_in, n_out}, and row r starts at data + r * row_bytes.

#include <array>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace ferrox {

constexpr int kMaxDims = 4;

struct TensorView {
    std::string name;
    DType type = DType::kF32;
    int n_dims = 0;
    std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};  // elements per dimension, innermost first
    const void* data = nullptr;                     // not owned; usually inside the mmap
    // Rows interleaved in groups of 8 (QuantKernels::repack8's layout): only the packed
    // kernels read it; row() does not apply.
    bool packed8 = false;

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t row_bytes() const { return dtype_row_bytes(type, ne[0]); }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    int64_t n_bytes() const { return row_bytes() * n_rows(); }
    const uint8_t* row(int64_t i) const {
        return static_cast<const uint8_t*>(data) + i * row_bytes();
    }
};

}  // namespace ferrox

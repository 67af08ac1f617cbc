#pragma once
// Builds GGUF v3 images in memory: used by the test suite to make tiny random-weight models
// and corrupt files, and by tools that write models. Not used when serving.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "loader/gguf.h"

namespace ferrox {

class GgufWriter {
public:
    explicit GgufWriter(size_t alignment = 32) : alignment_(alignment) {}

    void add_string(const std::string& key, const std::string& value);
    void add_u32(const std::string& key, uint32_t value);
    void add_i32(const std::string& key, int32_t value);
    void add_f32(const std::string& key, float value);
    void add_bool(const std::string& key, bool value);
    void add_string_array(const std::string& key, const std::vector<std::string>& values);
    void add_f32_array(const std::string& key, const std::vector<float>& values);
    void add_i32_array(const std::string& key, const std::vector<int32_t>& values);
    // Any value, including nested arrays.
    void add_value(const std::string& key, const GgufValue& value);

    // ne innermost first; data must hold exactly the tensor's bytes.
    void add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                    std::vector<uint8_t> data);

    std::vector<uint8_t> finish() const;
    Status write_file(const std::string& path) const;

private:
    struct Tensor {
        std::string name;
        DType type;
        std::vector<int64_t> ne;
        std::vector<uint8_t> data;
    };
    size_t alignment_;
    uint64_t n_kv_ = 0;
    std::vector<uint8_t> kv_bytes_;
    std::vector<Tensor> tensors_;
};

}  // namespace ferrox

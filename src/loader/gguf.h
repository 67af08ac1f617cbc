#pragma once
// GGUF reader (versions 2 and 3). The file is memory-mapped; tensor data is never copied.
// Every count, offset, size and string length is checked against the file before use, so a
// truncated or hostile file yields a Status naming the file and the problem, never a crash.
//
// Threading: a GgufFile is immutable after open() and may be read from any thread.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/mmap_file.h"
#include "core/status.h"
#include "tensor/tensor.h"

namespace ferrox {

enum class GgufType : uint32_t {
    kUint8 = 0,
    kInt8 = 1,
    kUint16 = 2,
    kInt16 = 3,
    kUint32 = 4,
    kInt32 = 5,
    kFloat32 = 6,
    kBool = 7,
    kString = 8,
    kArray = 9,
    kUint64 = 10,
    kInt64 = 11,
    kFloat64 = 12,
};

// One metadata value. Arrays hold values of one element type; nested arrays are allowed.
struct GgufValue {
    GgufType type = GgufType::kUint8;
    GgufType elem_type = GgufType::kUint8;  // for arrays
    // Scalars: integers widen to int64/uint64, floats to double, bool to uint64 0/1.
    std::variant<uint64_t, int64_t, double, std::string, std::vector<GgufValue>> v;

    bool is_array() const { return type == GgufType::kArray; }
    bool is_string() const { return type == GgufType::kString; }
    bool is_integer() const;
    bool is_float() const;
    // Numeric value as the requested kind (nullopt if not numeric).
    std::optional<int64_t> as_int() const;
    std::optional<double> as_float() const;
    const std::string* as_string() const;
    const std::vector<GgufValue>* as_array() const;
};

class GgufFile {
public:
    // Opens and validates the whole file structure (header, metadata, tensor infos).
    // The file is mapped, not read: see Model::place_weights for where the weights go.
    static Expected<std::unique_ptr<GgufFile>> open(const std::string& path);
    // Parses an in-memory image (for tests and the fuzzer). `data` must outlive the result.
    static Expected<std::unique_ptr<GgufFile>> parse(const uint8_t* data, size_t size,
                                                     const std::string& name);

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t data_offset() const { return data_offset_; }

    // Metadata, in file order.
    const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
    const GgufValue* find(std::string_view key) const;
    // Typed getters: nullopt when absent; a Status error when present with the wrong type.
    Expected<std::optional<std::string>> get_string(std::string_view key) const;
    Expected<std::optional<int64_t>> get_int(std::string_view key) const;
    Expected<std::optional<double>> get_float(std::string_view key) const;
    Expected<std::optional<bool>> get_bool(std::string_view key) const;
    // Array getters; empty optional when absent, error when present with another type.
    Expected<std::optional<std::vector<std::string>>> get_string_array(std::string_view key) const;
    Expected<std::optional<std::vector<int64_t>>> get_int_array(std::string_view key) const;
    Expected<std::optional<std::vector<float>>> get_float_array(std::string_view key) const;

    const std::vector<TensorView>& tensors() const { return tensors_; }
    const TensorView* find_tensor(std::string_view name) const;

    // "<path>: <message>", for one-line errors.
    Status error(const std::string& message) const;

    // Tells the kernel that the whole pages inside [p, p + n) of an opened file's tensor data
    // will not be read again (a model that repacked a tensor elsewhere): their memory is given
    // back. Reading them afterwards gives the file's bytes again (mapped) or zeros (copied).
    // Does nothing for an in-memory image from parse(), whose memory the caller owns.
    void discard(const void* p, size_t n) const;

private:
    GgufFile() = default;
    Status parse_all(const uint8_t* data, size_t size);

    std::string path_;
    std::unique_ptr<MmapFile> file_;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<std::pair<std::string, GgufValue>> kv_;
    std::map<std::string, size_t, std::less<>> kv_index_;
    std::vector<TensorView> tensors_;
    std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace ferrox

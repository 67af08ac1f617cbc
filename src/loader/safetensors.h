#pragma once
// safetensors reader (https://huggingface.co/docs/safetensors: an 8-byte little-endian header
// length N, N bytes of JSON, then the tensor bytes), sharded checkpoints
// (model.safetensors.index.json) and HF config.json. Files are memory-mapped; tensor data is
// never copied. Every header length, dtype, shape and offset is checked against the file
// before use (offsets in range, sizes equal to shape x dtype, no overlaps and no holes, as the
// format requires), so a truncated or hostile file yields a one-line Status
// "<path>: <problem>", never a crash.
//
// Shapes are kept as the file writes them (outermost first, row-major); view() turns an
// F32/F16/BF16 tensor into a TensorView (ggml order: ne[0] innermost).
//
// Threading: immutable after open(); any thread may read.

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

struct SafetensorsTensor {
    std::string name;
    std::string dtype;           // as written: "F32", "BF16", "I64", ...
    int64_t elem_bytes = 0;      // bytes per element of dtype
    std::vector<int64_t> shape;  // outermost first; [] is a scalar
    const uint8_t* data = nullptr;  // inside the file image; may be unaligned
    uint64_t n_bytes = 0;
    std::optional<DType> type;   // F32 / F16 / BF16; nullopt for other dtypes

    int64_t n_elements() const;
    // A ggml-order view (ne reversed from shape); error for another dtype, > 4 dims or an
    // empty tensor. `file` names the file in the message.
    Expected<TensorView> view(const std::string& file) const;
};

class SafetensorsFile {
  public:
    static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
    // An in-memory image (tests, fuzzer); `data` must outlive the result.
    static Expected<std::unique_ptr<SafetensorsFile>> parse(const uint8_t* data, size_t size,
                                                            const std::string& name);

    const std::string& path() const { return path_; }
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    const SafetensorsTensor* find(std::string_view name) const;
    // The header's "__metadata__" (string -> string).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    Status error(const std::string& message) const;

  private:
    SafetensorsFile() = default;
    Status parse_all(const uint8_t* data, size_t size);

    std::string path_;
    std::unique_ptr<MmapFile> file_;
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
    std::map<std::string, std::string> metadata_;
};

// One checkpoint: a single model.safetensors or the shards that an index names.
class SafetensorsCheckpoint {
  public:
    // `path`: a .safetensors file, a model.safetensors.index.json, or a directory holding
    // either (the index wins).
    static Expected<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& path);

    const std::string& path() const { return path_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
    // The tensor and the file that holds it (null when absent).
    const SafetensorsTensor* find(std::string_view name, const SafetensorsFile** file = nullptr) const;
    size_t n_tensors() const;
    uint64_t n_bytes() const;  // the tensor bytes of every shard

  private:
    SafetensorsCheckpoint() = default;
    std::string path_;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

// An HF config.json's top-level scalars (and arrays of strings, such as "architectures").
// Getters return nullopt when absent or null, an error naming the file and the key on
// another type.
class HfConfig {
  public:
    using Value = std::variant<bool, int64_t, double, std::string, std::vector<std::string>>;
    static Expected<HfConfig> open(const std::string& path);
    static Expected<HfConfig> parse(std::string_view text, const std::string& name);

    const std::string& path() const { return path_; }
    bool has(std::string_view key) const { return values_.count(std::string(key)) != 0; }
    Expected<std::optional<int64_t>> get_int(std::string_view key) const;
    Expected<std::optional<double>> get_float(std::string_view key) const;  // ints widen
    Expected<std::optional<std::string>> get_string(std::string_view key) const;
    Expected<std::optional<bool>> get_bool(std::string_view key) const;
    Expected<std::optional<std::vector<std::string>>> get_strings(std::string_view key) const;
    Status error(const std::string& message) const;

  private:
    std::string path_;
    std::map<std::string, Value> values_;
};

}  // namespace ferrox

#pragma once
// A read-only memory-mapped file. Move-only; unmaps on destruction.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"

namespace ferrox {

class MmapFile {
public:
    // Maps the file read-only (pages shared with the page cache, loaded on first touch). A model
    // that wants its weights in huge pages copies them out itself (Model::place_weights).
    static Expected<std::unique_ptr<MmapFile>> open(const std::string& path);
    ~MmapFile();
    MmapFile(const MmapFile&) = delete;
    MmapFile& operator=(const MmapFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    MmapFile() = default;
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// Reads a whole file into a string (for small text files: JSON, templates).
Expected<std::string> read_file(const std::string& path);

}  // namespace ferrox

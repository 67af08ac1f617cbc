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
    // kMap maps the file (pages shared with the page cache, loaded on first touch). kCopy reads
    // it into anonymous memory backed by transparent huge pages where the kernel allows: one
    // TLB entry per 2 MiB instead of per 4 KiB, which weight streaming notices.
    enum class Mode { kMap, kCopy };
    static Expected<std::unique_ptr<MmapFile>> open(const std::string& path, Mode mode = Mode::kMap);
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
    size_t mapped_ = 0;  // bytes of the mapping (kCopy rounds up to 2 MiB)
};

// Reads a whole file into a string (for small text files: JSON, templates).
Expected<std::string> read_file(const std::string& path);

}  // namespace ferrox

#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferrox {

Expected<std::unique_ptr<MmapFile>> MmapFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return io_error(path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        return io_error(path + ": cannot stat: " + std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return io_error(path + ": not a regular file");
    }
    std::unique_ptr<MmapFile> f(new MmapFile());
    f->path_ = path;
    f->size_ = static_cast<size_t>(st.st_size);
    if (f->size_ > 0) {
        void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            return io_error(path + ": mmap failed: " + std::strerror(e));
        }
        f->data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return f;
}

MmapFile::~MmapFile() {
    if (data_ && size_) munmap(const_cast<uint8_t*>(data_), size_);
}

Expected<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error(path + ": cannot open: " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace ferrox

#include "core/mmap_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

namespace ferrox {

Expected<std::unique_ptr<MmapFile>> MmapFile::open(const std::string& path, Mode mode) {
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
    if (f->size_ > 0 && mode == Mode::kCopy) {
        constexpr size_t kHuge = size_t{2} << 20;
        // Over-allocate by one huge page to align the start, then trim.
        const size_t want = (f->size_ + kHuge - 1) / kHuge * kHuge;
        void* raw = mmap(nullptr, want + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            return io_error(path + ": cannot allocate " + std::to_string(want >> 20) + " MiB: " + std::strerror(e));
        }
        auto* base = static_cast<uint8_t*>(raw);
        auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1));
        if (aligned > base) munmap(base, aligned - base);
        const size_t tail = (base + want + kHuge) - (aligned + want);
        if (tail > 0) munmap(aligned + want, tail);
        madvise(aligned, want, MADV_HUGEPAGE);
        size_t done = 0;
        while (done < f->size_) {
            const ssize_t n = pread(fd, aligned + done, std::min<size_t>(f->size_ - done, size_t{64} << 20),
                                    static_cast<off_t>(done));
            if (n <= 0) {
                int e = n < 0 ? errno : EIO;
                munmap(aligned, want);
                ::close(fd);
                return io_error(path + ": read failed: " + std::strerror(e));
            }
            done += static_cast<size_t>(n);
        }
        mprotect(aligned, want, PROT_READ);
        f->data_ = aligned;
        f->mapped_ = want;
    } else if (f->size_ > 0) {
        void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            return io_error(path + ": mmap failed: " + std::strerror(e));
        }
        f->data_ = static_cast<const uint8_t*>(p);
        f->mapped_ = f->size_;
    }
    ::close(fd);
    return f;
}

MmapFile::~MmapFile() {
    if (data_ && mapped_) munmap(const_cast<uint8_t*>(data_), mapped_);
}

Expected<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error(path + ": cannot open: " + std::strerror(errno));
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

}  // namespace ferrox

#include "engine/kv_disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/log.h"
#include "loader/gguf.h"

namespace ferrox {

namespace {

constexpr char kMagic[8] = {'F', 'X', 'K', 'V', 'B', 'L', 'K', '1'};
constexpr uint32_t kVersion = 1;
// Blocks waiting for the writer beyond this are not queued (the pool keeps them; only the disk
// copy is skipped): a slow disk never holds more than this much memory.
constexpr int64_t kMaxQueuedBytes = int64_t{256} << 20;

struct FileHeader {
    char magic[8];
    uint32_t version;
    uint32_t block_size;
    uint64_t model_key;
    uint64_t hash;
    uint64_t payload_bytes;
    uint64_t checksum;  // of the tokens and the payload
};
static_assert(sizeof(FileHeader) == 48);

// A fast 64-bit hash, 8 bytes a step (splitmix64's finalizer on a running state).
uint64_t mix(uint64_t h) {
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

uint64_t hash_bytes(const void* p, size_t n, uint64_t h) {
    const auto* b = static_cast<const uint8_t*>(p);
    h ^= n * 0x9e3779b97f4a7c15ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        std::memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
        h ^= h >> 29;
    }
    uint64_t tail = 0;
    std::memcpy(&tail, b + i, n - i);
    return mix(h ^ tail);
}

uint64_t file_checksum(const int32_t* tokens, int n_tokens, const uint8_t* payload, size_t n) {
    return hash_bytes(payload, n, hash_bytes(tokens, static_cast<size_t>(n_tokens) * sizeof(int32_t), 0x6b76));
}

bool read_all(int fd, void* dst, size_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    while (n > 0) {
        const ssize_t r = ::read(fd, p, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

bool write_all(int fd, const void* src, size_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    while (n > 0) {
        const ssize_t r = ::write(fd, p, n);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            return false;
        }
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

std::string hex16(uint64_t v) {
    char s[17];
    std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
    return s;
}

void hash_value(const GgufValue& v, uint64_t* h) {
    *h = mix(*h ^ static_cast<uint64_t>(v.type));
    if (const auto* s = v.as_string()) {
        *h = hash_bytes(s->data(), s->size(), *h);
    } else if (const auto* a = v.as_array()) {
        *h = mix(*h ^ a->size());
        for (const GgufValue& e : *a) hash_value(e, h);
    } else if (const auto i = v.as_int()) {
        *h = mix(*h ^ static_cast<uint64_t>(*i));
    } else if (const auto d = v.as_float()) {
        *h = hash_bytes(&*d, sizeof(double), *h);
    }
}

}  // namespace

uint64_t model_cache_key(const GgufFile& f, const KvGeometry& geo) {
    uint64_t h = 0x66657272'6f78ULL;
    for (const auto& [k, v] : f.metadata()) {
        h = hash_bytes(k.data(), k.size(), h);
        hash_value(v, &h);
    }
    const uint8_t* base = f.tensors().empty() ? nullptr : static_cast<const uint8_t*>(f.tensors()[0].data);
    for (const TensorView& t : f.tensors()) {
        h = hash_bytes(t.name.data(), t.name.size(), h);
        const int64_t fields[] = {static_cast<int64_t>(t.type), t.ne[0], t.ne[1], t.ne[2], t.ne[3],
                                  static_cast<const uint8_t*>(t.data) - base};
        h = hash_bytes(fields, sizeof fields, h);
    }
    const int64_t g[] = {geo.n_layer, geo.kv_dim, geo.block_size, static_cast<int64_t>(geo.type)};
    return hash_bytes(g, sizeof g, h);
}

KvDiskCache::KvDiskCache(std::string dir, uint64_t model_key, KvStorage& kv, int64_t max_bytes)
    : dir_(std::move(dir)),
      model_key_(model_key),
      kv_(kv),
      max_bytes_(max_bytes),
      block_bytes_(kv.geometry().block_bytes()),
      block_size_(kv.geometry().block_size) {}

Expected<std::unique_ptr<KvDiskCache>> KvDiskCache::open(const std::string& dir, uint64_t model_key, KvStorage& kv,
                                                         int64_t max_bytes) {
    const std::string sub = dir + "/" + hex16(model_key);
    std::error_code ec;
    std::filesystem::create_directories(sub, ec);
    if (ec) return invalid_argument("--cache-dir " + dir + ": cannot create " + sub + ": " + ec.message());
    if (::access(sub.c_str(), W_OK | R_OK | X_OK) != 0) {
        return invalid_argument("--cache-dir " + dir + ": " + sub + " is not writable: " + std::strerror(errno));
    }
    std::unique_ptr<KvDiskCache> c(new KvDiskCache(sub, model_key, kv, max_bytes));
    c->scan();
    {
        std::lock_guard<std::mutex> lock(c->mu_);
        c->evict_over_budget();
    }
    c->thread_ = std::thread([p = c.get()] { p->writer(); });
    return c;
}

KvDiskCache::~KvDiskCache() {
    flush();
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::string KvDiskCache::file_of(uint64_t hash) const { return dir_ + "/" + hex16(hash) + ".kv"; }

// Indexes the files already there, oldest first; files of the wrong size and leftover
// temporary files go.
void KvDiskCache::scan() {
    const int64_t want = static_cast<int64_t>(sizeof(FileHeader) + block_size_ * sizeof(int32_t) + block_bytes_);
    std::vector<std::pair<int64_t, uint64_t>> found;  // (mtime, hash)
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) {
        const std::string name = e.path().filename().string();
        if (name.find(".tmp.") != std::string::npos) {
            std::filesystem::remove(e.path(), ec);
            continue;
        }
        if (name.size() != 19 || name.compare(16, 3, ".kv") != 0) continue;
        struct stat st;
        if (::stat(e.path().c_str(), &st) != 0) continue;
        if (st.st_size != want) {
            FERROX_LOG_WARN("prompt cache: %s has %lld bytes, not %lld: removed", e.path().c_str(),
                            static_cast<long long>(st.st_size), static_cast<long long>(want));
            std::filesystem::remove(e.path(), ec);
            continue;
        }
        found.push_back({static_cast<int64_t>(st.st_mtime), std::stoull(name.substr(0, 16), nullptr, 16)});
    }
    std::sort(found.begin(), found.end());
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [mtime, hash] : found) {
        index_[hash] = {want, ++clock_};
        total_bytes_ += want;
    }
    if (!found.empty()) {
        FERROX_LOG_INFO("prompt cache: %zu blocks (%.1f MiB) in %s", found.size(),
                        static_cast<double>(total_bytes_) / (1 << 20), dir_.c_str());
    }
}

void KvDiskCache::offer(uint64_t hash, const int32_t* tokens, int32_t block) {
    std::unique_lock<std::mutex> lock(mu_);
    if (auto it = index_.find(hash); it != index_.end()) {
        it->second.last_use = ++clock_;
        return;
    }
    if (queued_bytes_ + static_cast<int64_t>(block_bytes_) > kMaxQueuedBytes || stop_) return;
    for (const Pending& p : queue_) {
        if (p.hash == hash) return;
    }
    queued_bytes_ += static_cast<int64_t>(block_bytes_);
    lock.unlock();
    // The copy is made outside the lock (the writer never touches the pool).
    Pending p{hash, std::vector<int32_t>(tokens, tokens + block_size_), {}};
    const uint8_t* src = kv_.k_rows(block, 0);
    p.bytes.assign(src, src + block_bytes_);
    lock.lock();
    queue_.push_back(std::move(p));
    lock.unlock();
    cv_.notify_one();
}

bool KvDiskCache::has(uint64_t hash) const {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.count(hash) != 0;
}

bool KvDiskCache::fetch(uint64_t hash, const int32_t* tokens, int32_t block) {
    if (!has(hash)) return false;
    const std::string path = file_of(hash);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        forget(hash, false);  // another process's budget removed it
        return false;
    }
    FileHeader h{};
    std::vector<int32_t> file_tokens(static_cast<size_t>(block_size_));
    uint8_t* dst = kv_.k_rows(block, 0);
    bool ok = read_all(fd, &h, sizeof h) && std::memcmp(h.magic, kMagic, 8) == 0 && h.version == kVersion &&
              h.model_key == model_key_ && h.hash == hash && h.block_size == static_cast<uint32_t>(block_size_) &&
              h.payload_bytes == block_bytes_ &&
              read_all(fd, file_tokens.data(), file_tokens.size() * sizeof(int32_t));
    if (ok && std::memcmp(file_tokens.data(), tokens, file_tokens.size() * sizeof(int32_t)) != 0) {
        ::close(fd);
        return false;  // a hash collision: another prefix's block, intact
    }
    ok = ok && read_all(fd, dst, block_bytes_) &&
         file_checksum(file_tokens.data(), block_size_, dst, block_bytes_) == h.checksum;
    ::close(fd);
    if (!ok) {
        bool warn;
        {
            std::lock_guard<std::mutex> lock(mu_);
            warn = !warned_;
            warned_ = true;
        }
        if (warn) FERROX_LOG_WARN("prompt cache: %s is damaged or foreign: removed (recomputed instead)", path.c_str());
        forget(hash, true);
        return false;
    }
    touch(hash);
    ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // the next start's order
    return true;
}

void KvDiskCache::touch(uint64_t hash) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(hash); it != index_.end()) it->second.last_use = ++clock_;
}

void KvDiskCache::forget(uint64_t hash, bool remove_file) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        if (auto it = index_.find(hash); it != index_.end()) {
            total_bytes_ -= it->second.bytes;
            index_.erase(it);
        }
    }
    if (remove_file) ::unlink(file_of(hash).c_str());
}

// Least recently used files go until the directory fits the budget (mu_ held).
void KvDiskCache::evict_over_budget() {
    while (total_bytes_ > max_bytes_ && !index_.empty()) {
        auto oldest = index_.begin();
        for (auto it = index_.begin(); it != index_.end(); ++it) {
            if (it->second.last_use < oldest->second.last_use) oldest = it;
        }
        ::unlink(file_of(oldest->first).c_str());
        total_bytes_ -= oldest->second.bytes;
        index_.erase(oldest);
    }
}

void KvDiskCache::write_one(uint64_t hash, const std::vector<int32_t>& tokens, const std::vector<uint8_t>& bytes) {
    FileHeader h{};
    std::memcpy(h.magic, kMagic, 8);
    h.version = kVersion;
    h.block_size = static_cast<uint32_t>(block_size_);
    h.model_key = model_key_;
    h.hash = hash;
    h.payload_bytes = bytes.size();
    h.checksum = file_checksum(tokens.data(), block_size_, bytes.data(), bytes.size());
    static std::atomic<uint64_t> counter{0};
    const std::string path = file_of(hash);
    const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && write_all(fd, &h, sizeof h) && write_all(fd, tokens.data(), tokens.size() * sizeof(int32_t)) &&
              write_all(fd, bytes.data(), bytes.size());
    if (fd >= 0) ok = (::close(fd) == 0) && ok;
    ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
    if (!ok) {
        const int err = errno;
        ::unlink(tmp.c_str());
        bool warn;
        {
            std::lock_guard<std::mutex> lock(mu_);
            warn = !warned_;
            warned_ = true;
        }
        if (warn) FERROX_LOG_WARN("prompt cache: cannot write %s: %s (the cache goes on in memory)", path.c_str(), std::strerror(err));
        if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
            // The disk (or a quota, or a file-size limit) is fuller than the budget: the budget
            // shrinks under what fits, so the oldest files make room for the next ones.
            std::lock_guard<std::mutex> lock(mu_);
            max_bytes_ = std::max<int64_t>(total_bytes_ - total_bytes_ / 8, 0);
            evict_over_budget();
        }
        return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = index_.try_emplace(hash, Entry{});
    if (inserted) total_bytes_ += static_cast<int64_t>(sizeof(FileHeader) + tokens.size() * sizeof(int32_t) + bytes.size());
    it->second.bytes = static_cast<int64_t>(sizeof(FileHeader) + tokens.size() * sizeof(int32_t) + bytes.size());
    it->second.last_use = ++clock_;
    evict_over_budget();
}

void KvDiskCache::writer() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) {
            if (stop_) return;
            continue;
        }
        Pending p = std::move(queue_.front());
        queue_.pop_front();
        writing_ = true;
        lock.unlock();
        write_one(p.hash, p.tokens, p.bytes);
        lock.lock();
        queued_bytes_ -= static_cast<int64_t>(p.bytes.size());
        writing_ = false;
        if (queue_.empty()) idle_cv_.notify_all();
    }
}

void KvDiskCache::flush() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [&] { return (queue_.empty() && !writing_) || !thread_.joinable(); });
}

int64_t KvDiskCache::bytes_on_disk() const {
    std::lock_guard<std::mutex> lock(mu_);
    return total_bytes_;
}

int64_t KvDiskCache::files() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(index_.size());
}

}  // namespace ferrox

#pragma once
// The prompt cache on disk (`--cache-dir DIR`, `--cache-disk MIB`): every KV block the prefix
// cache publishes is also written to DIR, so a prefix evicted from the pool, or computed before
// a restart, is read back instead of recomputed.
//
// Layout: DIR/<model key>/<chain hash>.kv, one file per block. The model key (16 hex digits)
// hashes what decides the KV's bytes: the GGUF's metadata and tensor table (names, types,
// shapes, data offsets), the KV type and the block geometry; another model's or another
// geometry's files are never looked at. A file is a header (magic, version, model key, chain
// hash, block size, payload size, checksum), the block's tokens and the block's bytes as the
// pool holds them. Files are written by a thread of the cache's own (a copy of the block is
// queued; the engine thread never waits on the disk), to a temporary name and renamed into
// place, so a reader sees whole files or none. A file whose header, size, tokens or checksum is
// wrong is skipped with a one-line warning and removed: it never changes an answer, it only
// costs the recomputation. The directory's size is bounded by `max_bytes`, least recently used
// files (written or read) first; at start the existing files are indexed by modification time.
//
// Threading: offer / has / fetch on the engine thread; the writer thread shares the index
// under a mutex. Two processes may share a directory: each writes whole files by rename, reads
// verify, and each bounds its own view of the size (the other's files count once it restarts).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/prefix_store.h"
#include "model/kv_storage.h"

namespace ferrox {

class KvDiskCache final : public PrefixStore {
public:
    // `model_key`: the identity of the model and KV layout (see model_cache_key). The directory
    // is created if missing; a directory that cannot be created or written is an error.
    static Expected<std::unique_ptr<KvDiskCache>> open(const std::string& dir, uint64_t model_key, KvStorage& kv,
                                                       int64_t max_bytes);
    ~KvDiskCache() override;

    void offer(uint64_t hash, const int32_t* tokens, int32_t block) override;
    bool has(uint64_t hash) const override;
    bool fetch(uint64_t hash, const int32_t* tokens, int32_t block) override;

    // Waits until every offered block is on disk (tests, shutdown).
    void flush();
    int64_t bytes_on_disk() const;
    int64_t files() const;
    const std::string& path() const { return dir_; }

private:
    KvDiskCache(std::string dir, uint64_t model_key, KvStorage& kv, int64_t max_bytes);
    void writer();
    void write_one(uint64_t hash, const std::vector<int32_t>& tokens, const std::vector<uint8_t>& bytes);
    void forget(uint64_t hash, bool remove_file);
    void touch(uint64_t hash);
    void evict_over_budget();
    std::string file_of(uint64_t hash) const;
    void scan();

    struct Entry {
        int64_t bytes = 0;
        uint64_t last_use = 0;
    };
    struct Pending {
        uint64_t hash;
        std::vector<int32_t> tokens;
        std::vector<uint8_t> bytes;
    };

    std::string dir_;
    uint64_t model_key_;
    KvStorage& kv_;
    int64_t max_bytes_;  // guarded by mu_ (a full disk lowers it)
    size_t block_bytes_;
    int block_size_;

    mutable std::mutex mu_;
    std::condition_variable cv_, idle_cv_;
    std::unordered_map<uint64_t, Entry> index_;  // guarded by mu_
    int64_t total_bytes_ = 0;                    // guarded by mu_
    uint64_t clock_ = 0;                         // guarded by mu_
    std::deque<Pending> queue_;                  // guarded by mu_
    int64_t queued_bytes_ = 0;                   // guarded by mu_
    bool writing_ = false;                       // guarded by mu_
    bool stop_ = false;                          // guarded by mu_
    bool warned_ = false;                        // guarded by mu_
    std::thread thread_;
};

// The identity of a model's KV bytes for the disk cache: a hash of the GGUF file's metadata and
// tensor table, the KV type and the block geometry.
class GgufFile;
uint64_t model_cache_key(const GgufFile& f, const KvGeometry& geo);

}  // namespace ferrox

#pragma once
// Stored Responses (OpenAI's `store: true`, the default): the response object, its input items
// and the conversation it ended with, so that `previous_response_id` continues it (and the
// prefix cache finds its KV). Bounded in count and bytes (the oldest go first) and in age
// (`ttl_s`). Each response belongs to the API key that created it (`owner`, a hash of the key;
// "" when the server has no keys): another owner's get/erase find nothing, as if it did not
// exist.
//
// Two implementations behind one interface: in memory (the default; lost on restart) and
// SQLite (`--state-dir DIR`: DIR/responses.sqlite3, WAL; response_store_sqlite.*), and Redis
// (`--responses-store redis://HOST:PORT`, shared by replicas; response_store_redis.*).
//
// Threading: any thread (each implementation serializes on one mutex).

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/messages.h"
#include "core/status.h"

namespace ferrox {

struct StoredResponse {
    std::string id;
    std::string response_json;     // the response object as returned
    std::string input_items_json;  // JSON array of the input items, with ids
    std::vector<ChatMessage> history;  // every turn so far, this answer included (no instructions)
    std::string model;
    std::string owner;             // key_scope() of the API key that created it ("" : no keys)
};

struct ResponseStoreOptions {
    size_t max_count = 1000;
    size_t max_bytes = 64 << 20;
    double ttl_s = 30 * 86400.0;  // <= 0: no expiry
    std::string state_dir;        // not empty: SQLite in state_dir/responses.sqlite3
    std::string url;              // not empty: redis://HOST:PORT[/DB], shared by replicas
};

class ResponseStore {
  public:
    virtual ~ResponseStore() = default;
    // Stores (or replaces) r, then evicts the expired and the oldest beyond the bounds.
    virtual void put(StoredResponse r) = 0;
    // Nothing when absent, expired or owned by another key.
    virtual std::optional<StoredResponse> get(const std::string& id, const std::string& owner) const = 0;
    virtual bool erase(const std::string& id, const std::string& owner) = 0;
    virtual size_t size() const = 0;
};

class MemoryResponseStore final : public ResponseStore {
  public:
    MemoryResponseStore(size_t max_count, size_t max_bytes, double ttl_s = 0)
        : max_count_(max_count), max_bytes_(max_bytes), ttl_s_(ttl_s) {}

    void put(StoredResponse r) override;
    std::optional<StoredResponse> get(const std::string& id, const std::string& owner) const override;
    bool erase(const std::string& id, const std::string& owner) override;
    size_t size() const override;

  private:
    struct Entry {
        StoredResponse r;
        int64_t created_ms;
    };
    void evict();
    bool expired(const Entry& e) const;
    mutable std::mutex mu_;
    std::list<Entry> order_;  // oldest first
    std::unordered_map<std::string, std::list<Entry>::iterator> index_;
    size_t bytes_ = 0;
    size_t max_count_, max_bytes_;
    double ttl_s_;
};

// The store the options name: Redis with a url, SQLite with a state_dir, else in memory. An error (a directory
// that cannot be made, a damaged database) is one line naming the file.
Expected<std::unique_ptr<ResponseStore>> open_response_store(const ResponseStoreOptions& opts);

// What a response's bounds count of it.
size_t stored_bytes(const StoredResponse& r);
// The history as JSON text (every field: role, content, reasoning, tool calls, tool_call_id,
// name) and back; false on text that is not such an array.
std::string history_to_json(const std::vector<ChatMessage>& history);
bool history_from_json(const std::string& text, std::vector<ChatMessage>* out);
// The owner recorded for an API key: hex SHA-256 of "ferrox-responses:" + key; never the key.
std::string key_scope(const std::string& api_key);
// Milliseconds since the epoch (the stores' clock).
int64_t store_now_ms();

}  // namespace ferrox

#pragma once
// Stored Responses (OpenAI's `store: true`, the default): the response object, its input items
// and the conversation it ended with, so that `previous_response_id` continues it (and the
// prefix cache finds its KV). Bounded in count and bytes; the oldest go first.
//
// Threading: any thread (one mutex).

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "chat/messages.h"

namespace ferrox {

struct StoredResponse {
    std::string id;
    std::string response_json;     // the response object as returned
    std::string input_items_json;  // JSON array of the input items, with ids
    std::vector<ChatMessage> history;  // every turn so far, this answer included (no instructions)
    std::string model;
};

class ResponseStore {
  public:
    ResponseStore(size_t max_count, size_t max_bytes) : max_count_(max_count), max_bytes_(max_bytes) {}

    void put(StoredResponse r);
    std::optional<StoredResponse> get(const std::string& id) const;
    bool erase(const std::string& id);
    size_t size() const;

  private:
    static size_t bytes_of(const StoredResponse& r);
    void evict();
    mutable std::mutex mu_;
    std::list<StoredResponse> order_;  // oldest first
    std::unordered_map<std::string, std::list<StoredResponse>::iterator> index_;
    size_t bytes_ = 0;
    size_t max_count_, max_bytes_;
};

}  // namespace ferrox

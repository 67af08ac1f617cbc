#include "server/response_store.h"

namespace ferrox {

size_t ResponseStore::bytes_of(const StoredResponse& r) {
    size_t n = r.id.size() + r.response_json.size() + r.input_items_json.size() + r.model.size();
    for (const ChatMessage& m : r.history) {
        n += m.content.size() + m.reasoning.size() + m.role.size() + m.tool_call_id.size() + m.name.size();
        for (const ToolCall& c : m.tool_calls) n += c.id.size() + c.name.size() + c.arguments.size();
    }
    return n;
}

void ResponseStore::put(StoredResponse r) {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(r.id); it != index_.end()) {
        bytes_ -= bytes_of(*it->second);
        order_.erase(it->second);
        index_.erase(it);
    }
    bytes_ += bytes_of(r);
    order_.push_back(std::move(r));
    index_[order_.back().id] = std::prev(order_.end());
    evict();
}

void ResponseStore::evict() {
    while (!order_.empty() && (order_.size() > max_count_ || bytes_ > max_bytes_)) {
        bytes_ -= bytes_of(order_.front());
        index_.erase(order_.front().id);
        order_.pop_front();
    }
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return std::nullopt;
    return *it->second;
}

bool ResponseStore::erase(const std::string& id) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end()) return false;
    bytes_ -= bytes_of(*it->second);
    order_.erase(it->second);
    index_.erase(it);
    return true;
}

size_t ResponseStore::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return order_.size();
}

}  // namespace ferrox

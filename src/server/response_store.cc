#include "server/response_store.h"

#include <chrono>
#include <nlohmann/json.hpp>

#include "server/openai/reasoning_seal.h"
#include "server/response_store_redis.h"
#include "server/response_store_sqlite.h"

namespace ferrox {

using json = nlohmann::json;

int64_t store_now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

size_t stored_bytes(const StoredResponse& r) {
    size_t n = r.id.size() + r.response_json.size() + r.input_items_json.size() + r.model.size() + r.owner.size();
    for (const ChatMessage& m : r.history) {
        n += m.content.size() + m.reasoning.size() + m.role.size() + m.tool_call_id.size() + m.name.size();
        for (const ToolCall& c : m.tool_calls) n += c.id.size() + c.name.size() + c.arguments.size();
    }
    return n;
}

std::string history_to_json(const std::vector<ChatMessage>& history) {
    json a = json::array();
    for (const ChatMessage& m : history) {
        json o = {{"role", m.role}, {"content", m.content}};
        if (!m.reasoning.empty()) o["reasoning"] = m.reasoning;
        if (!m.tool_call_id.empty()) o["tool_call_id"] = m.tool_call_id;
        if (!m.name.empty()) o["name"] = m.name;
        if (!m.tool_calls.empty()) {
            json calls = json::array();
            for (const ToolCall& c : m.tool_calls) calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
            o["tool_calls"] = std::move(calls);
        }
        a.push_back(std::move(o));
    }
    // Invalid UTF-8 (a model's broken bytes) is replaced rather than thrown on.
    return a.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool history_from_json(const std::string& text, std::vector<ChatMessage>* out) {
    json a = json::parse(text, nullptr, false);
    if (!a.is_array()) return false;
    auto str = [](const json& o, const char* k, std::string* v) {
        auto it = o.find(k);
        if (it == o.end()) return true;
        if (!it->is_string()) return false;
        *v = it->get<std::string>();
        return true;
    };
    out->clear();
    for (const json& o : a) {
        if (!o.is_object()) return false;
        ChatMessage m;
        if (!str(o, "role", &m.role) || !str(o, "content", &m.content) || !str(o, "reasoning", &m.reasoning) ||
            !str(o, "tool_call_id", &m.tool_call_id) || !str(o, "name", &m.name))
            return false;
        if (auto it = o.find("tool_calls"); it != o.end()) {
            if (!it->is_array()) return false;
            for (const json& c : *it) {
                if (!c.is_object()) return false;
                ToolCall t;
                if (!str(c, "id", &t.id) || !str(c, "name", &t.name) || !str(c, "arguments", &t.arguments)) return false;
                m.tool_calls.push_back(std::move(t));
            }
        }
        out->push_back(std::move(m));
    }
    return true;
}

std::string key_scope(const std::string& api_key) {
    const std::string d = sha256("ferrox-responses:" + api_key);
    static const char* hex = "0123456789abcdef";
    std::string s;
    for (unsigned char c : d) {
        s += hex[c >> 4];
        s += hex[c & 15];
    }
    return s;
}

bool MemoryResponseStore::expired(const Entry& e) const {
    return ttl_s_ > 0 && static_cast<double>(store_now_ms() - e.created_ms) > ttl_s_ * 1000.0;
}

void MemoryResponseStore::put(StoredResponse r) {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(r.id); it != index_.end()) {
        bytes_ -= stored_bytes(it->second->r);
        order_.erase(it->second);
        index_.erase(it);
    }
    bytes_ += stored_bytes(r);
    order_.push_back(Entry{std::move(r), store_now_ms()});
    index_[order_.back().r.id] = std::prev(order_.end());
    evict();
}

void MemoryResponseStore::evict() {
    // Oldest first: the over-bound and the expired (created in order, so expiry is a prefix).
    while (!order_.empty() && (order_.size() > max_count_ || bytes_ > max_bytes_ || expired(order_.front()))) {
        bytes_ -= stored_bytes(order_.front().r);
        index_.erase(order_.front().r.id);
        order_.pop_front();
    }
}

std::optional<StoredResponse> MemoryResponseStore::get(const std::string& id, const std::string& owner) const {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end() || it->second->r.owner != owner || expired(*it->second)) return std::nullopt;
    return it->second->r;
}

bool MemoryResponseStore::erase(const std::string& id, const std::string& owner) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = index_.find(id);
    if (it == index_.end() || it->second->r.owner != owner) return false;
    const bool was_expired = expired(*it->second);
    bytes_ -= stored_bytes(it->second->r);
    order_.erase(it->second);
    index_.erase(it);
    return !was_expired;
}

size_t MemoryResponseStore::size() const {
    std::lock_guard<std::mutex> lk(mu_);
    return order_.size();
}

Expected<std::unique_ptr<ResponseStore>> open_response_store(const ResponseStoreOptions& opts) {
    if (!opts.url.empty()) return open_redis_response_store(opts);
    if (!opts.state_dir.empty()) return open_sqlite_response_store(opts);
    return std::unique_ptr<ResponseStore>(new MemoryResponseStore(opts.max_count, opts.max_bytes, opts.ttl_s));
}

}  // namespace ferrox

// The Responses stores (server/response_store.h): the SQLite one keeps every field of a history
// (tool calls, reasoning) across a reopen, scopes by owner, bounds count and bytes oldest first
// and refuses a damaged file; the in-memory one scopes and bounds the same way.
#include "server/response_store.h"
#include "server/response_store_redis.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

namespace ferrox {
namespace {

namespace fs = std::filesystem;

struct TempDir {
    fs::path path;
    TempDir() {
        path = fs::temp_directory_path() / ("ferrox_store_test_" + std::to_string(getpid()) + "_" +
                                            std::to_string(reinterpret_cast<uintptr_t>(this)));
        fs::remove_all(path);
    }
    ~TempDir() { fs::remove_all(path); }
};

std::vector<ChatMessage> sample_history() {
    std::vector<ChatMessage> h;
    h.push_back({.role = "system", .content = "Be brief."});
    h.push_back({.role = "user", .content = "weather in \"Paris\"?\n\u00e9\u4e16"});
    ChatMessage a{.role = "assistant", .content = "", .reasoning = "The user wants the weather. I call the tool."};
    a.tool_calls.push_back({.id = "call_1", .name = "get_weather", .arguments = R"({"city": "Paris", "unit": "c"})"});
    a.tool_calls.push_back({.id = "call_2", .name = "ns__lookup", .arguments = "{}"});
    h.push_back(a);
    h.push_back({.role = "tool", .content = "22 degrees", .tool_call_id = "call_1", .name = "get_weather"});
    h.push_back({.role = "assistant", .content = "It is 22 degrees.", .reasoning = "done"});
    return h;
}

void expect_same(const std::vector<ChatMessage>& a, const std::vector<ChatMessage>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].role, b[i].role);
        EXPECT_EQ(a[i].content, b[i].content);
        EXPECT_EQ(a[i].reasoning, b[i].reasoning);
        EXPECT_EQ(a[i].tool_call_id, b[i].tool_call_id);
        EXPECT_EQ(a[i].name, b[i].name);
        ASSERT_EQ(a[i].tool_calls.size(), b[i].tool_calls.size());
        for (size_t j = 0; j < a[i].tool_calls.size(); ++j) {
            EXPECT_EQ(a[i].tool_calls[j].id, b[i].tool_calls[j].id);
            EXPECT_EQ(a[i].tool_calls[j].name, b[i].tool_calls[j].name);
            EXPECT_EQ(a[i].tool_calls[j].arguments, b[i].tool_calls[j].arguments);
        }
    }
}

StoredResponse make(const std::string& id, const std::string& owner = "") {
    StoredResponse r;
    r.id = id;
    r.response_json = R"({"id":")" + id + R"(","object":"response"})";
    r.input_items_json = "[]";
    r.history = sample_history();
    r.model = "m";
    r.owner = owner;
    return r;
}

std::unique_ptr<ResponseStore> open_sqlite(const fs::path& dir, size_t max_count = 100, size_t max_bytes = 1 << 20,
                                           double ttl = 0) {
    ResponseStoreOptions o;
    o.state_dir = dir.string();
    o.max_count = max_count;
    o.max_bytes = max_bytes;
    o.ttl_s = ttl;
    auto s = open_response_store(o);
    EXPECT_TRUE(s.has_value()) << (s.has_value() ? "" : s.status().message());
    return s.has_value() ? std::move(*s) : nullptr;
}

TEST(ResponseStoreTest, HistoryJsonRoundTrip) {
    std::vector<ChatMessage> back;
    ASSERT_TRUE(history_from_json(history_to_json(sample_history()), &back));
    expect_same(sample_history(), back);
    EXPECT_FALSE(history_from_json("{}", &back));
    EXPECT_FALSE(history_from_json("[{\"role\": 3}]", &back));
    EXPECT_FALSE(history_from_json("not json", &back));
}

TEST(ResponseStoreTest, SqliteRoundTripSurvivesReopen) {
    TempDir d;
    {
        auto s = open_sqlite(d.path);
        ASSERT_TRUE(s);
        s->put(make("resp_1", "ownerA"));
        EXPECT_EQ(s->size(), 1u);
    }
    auto s = open_sqlite(d.path);
    ASSERT_TRUE(s);
    auto r = s->get("resp_1", "ownerA");
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->response_json, make("resp_1").response_json);
    EXPECT_EQ(r->input_items_json, "[]");
    EXPECT_EQ(r->model, "m");
    expect_same(sample_history(), r->history);
    // Another owner: as if absent, and cannot delete it.
    EXPECT_FALSE(s->get("resp_1", "ownerB").has_value());
    EXPECT_FALSE(s->get("resp_1", "").has_value());
    EXPECT_FALSE(s->erase("resp_1", "ownerB"));
    EXPECT_TRUE(s->erase("resp_1", "ownerA"));
    EXPECT_FALSE(s->get("resp_1", "ownerA").has_value());
    EXPECT_FALSE(s->erase("resp_1", "ownerA"));
}

TEST(ResponseStoreTest, SqliteBoundsOldestFirst) {
    TempDir d;
    auto s = open_sqlite(d.path, 3);
    for (int i = 0; i < 5; ++i) s->put(make("r" + std::to_string(i)));
    EXPECT_EQ(s->size(), 3u);
    EXPECT_FALSE(s->get("r1", "").has_value());
    EXPECT_TRUE(s->get("r2", "").has_value());
    EXPECT_TRUE(s->get("r4", "").has_value());
    // Bytes: room for about two.
    TempDir d2;
    const size_t one = stored_bytes(make("x0"));
    auto b = open_sqlite(d2.path, 100, one * 2 + one / 2);
    for (int i = 0; i < 4; ++i) b->put(make("x" + std::to_string(i)));
    EXPECT_EQ(b->size(), 2u);
    EXPECT_TRUE(b->get("x3", "").has_value());
    EXPECT_FALSE(b->get("x1", "").has_value());
}

TEST(ResponseStoreTest, SqliteExpiry) {
    TempDir d;
    auto s = open_sqlite(d.path, 100, 1 << 20, 0.2);
    s->put(make("old"));
    EXPECT_TRUE(s->get("old", "").has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_FALSE(s->get("old", "").has_value());
    s->put(make("new"));  // a put deletes the expired
    EXPECT_EQ(s->size(), 1u);
}

TEST(ResponseStoreTest, SqliteDamagedFileIsAnError) {
    TempDir d;
    fs::create_directories(d.path);
    {
        std::ofstream f(d.path / "responses.sqlite3", std::ios::binary);
        f << std::string(8192, 'x');
    }
    ResponseStoreOptions o;
    o.state_dir = d.path.string();
    auto s = open_response_store(o);
    ASSERT_FALSE(s.has_value());
    EXPECT_NE(s.status().message().find("responses.sqlite3"), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
}

TEST(ResponseStoreTest, SqliteConcurrentPutsAndGets) {
    TempDir d;
    auto s = open_sqlite(d.path, 1000, 64 << 20);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
        ts.emplace_back([&, t] {
            for (int i = 0; i < 25; ++i) {
                const std::string id = "t" + std::to_string(t) + "_" + std::to_string(i);
                s->put(make(id));
                EXPECT_TRUE(s->get(id, "").has_value());
            }
        });
    }
    for (auto& t : ts) t.join();
    EXPECT_EQ(s->size(), 100u);
}

TEST(ResponseStoreTest, MemoryScopesAndBounds) {
    MemoryResponseStore s(2, 1 << 20);
    s.put(make("a", "k1"));
    s.put(make("b", "k1"));
    s.put(make("c", "k2"));
    EXPECT_EQ(s.size(), 2u);
    EXPECT_FALSE(s.get("a", "k1").has_value());
    EXPECT_TRUE(s.get("b", "k1").has_value());
    EXPECT_FALSE(s.get("b", "k2").has_value());
    EXPECT_FALSE(s.erase("c", "k1"));
    EXPECT_TRUE(s.erase("c", "k2"));
    EXPECT_NE(key_scope("sk-one"), key_scope("sk-two"));
    EXPECT_EQ(key_scope("sk-one").size(), 64u);
}

}  // namespace
}  // namespace ferrox

namespace ferrox {
namespace {

TEST(ResponseStoreTest, RedisUrls) {
    std::string host, err;
    int port = 0, db = 0;
    EXPECT_TRUE(parse_redis_url("redis://127.0.0.1:6380", &host, &port, &db, &err));
    EXPECT_EQ(host, "127.0.0.1");
    EXPECT_EQ(port, 6380);
    EXPECT_EQ(db, 0);
    EXPECT_TRUE(parse_redis_url("redis://cache/3", &host, &port, &db, &err));
    EXPECT_EQ(host, "cache");
    EXPECT_EQ(port, 6379);
    EXPECT_EQ(db, 3);
    EXPECT_TRUE(parse_redis_url("redis://[::1]:7000", &host, &port, &db, &err));
    EXPECT_EQ(host, "::1");
    EXPECT_EQ(port, 7000);
    for (const char* bad : {"redis://", "http://h:1", "redis://h:0", "redis://h:99999", "redis://u:p@h:1",
                            "redis://h:1/x", "redis://[::1", "redis://h:12a"}) {
        EXPECT_FALSE(parse_redis_url(bad, &host, &port, &db, &err)) << bad;
    }
}

}  // namespace
}  // namespace ferrox

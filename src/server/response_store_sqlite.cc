#include "server/response_store_sqlite.h"

#include <sqlite3.h>

#include <cmath>
#include <filesystem>

#include "core/log.h"

namespace ferrox {
namespace {

constexpr int kSchemaVersion = 1;

class SqliteResponseStore final : public ResponseStore {
  public:
    SqliteResponseStore(sqlite3* db, std::string path, const ResponseStoreOptions& opts)
        : db_(db), path_(std::move(path)), opts_(opts) {}
    ~SqliteResponseStore() override {
        for (sqlite3_stmt* s : {put_, get_, erase_, evict_, expire_, count_}) sqlite3_finalize(s);
        sqlite3_close(db_);
    }

    Status prepare() {
        const struct {
            sqlite3_stmt** s;
            const char* sql;
        } all[] = {
            {&put_,
             "INSERT OR REPLACE INTO responses (id, owner, model, created_ms, bytes, response, input_items, history) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"},
            {&get_,
             "SELECT response, input_items, history, model, created_ms FROM responses WHERE id = ?1 AND owner = ?2"},
            {&erase_, "DELETE FROM responses WHERE id = ?1 AND owner = ?2"},
            // Newest first, the running count and bytes: every row past either bound goes.
            {&evict_,
             "DELETE FROM responses WHERE seq IN (SELECT seq FROM (SELECT seq, "
             "COUNT(*) OVER (ORDER BY seq DESC) AS n, SUM(bytes) OVER (ORDER BY seq DESC) AS b FROM responses) "
             "WHERE n > ?1 OR b > ?2)"},
            {&expire_, "DELETE FROM responses WHERE created_ms < ?1"},
            {&count_, "SELECT COUNT(*) FROM responses"},
        };
        for (const auto& a : all) {
            if (sqlite3_prepare_v3(db_, a.sql, -1, SQLITE_PREPARE_PERSISTENT, a.s, nullptr) != SQLITE_OK) return error("prepare");
        }
        return Status::ok();
    }

    void put(StoredResponse r) override {
        const std::string history = history_to_json(r.history);
        const int64_t now = store_now_ms();
        std::lock_guard<std::mutex> lk(mu_);
        bind_text(put_, 1, r.id);
        bind_text(put_, 2, r.owner);
        bind_text(put_, 3, r.model);
        sqlite3_bind_int64(put_, 4, now);
        sqlite3_bind_int64(put_, 5, static_cast<int64_t>(stored_bytes(r)));
        bind_text(put_, 6, r.response_json);
        bind_text(put_, 7, r.input_items_json);
        bind_text(put_, 8, history);
        step_done(put_, "store");
        if (opts_.ttl_s > 0) {
            sqlite3_bind_int64(expire_, 1, now - ttl_ms());
            step_done(expire_, "expire");
        }
        sqlite3_bind_int64(evict_, 1, static_cast<int64_t>(std::min<size_t>(opts_.max_count, INT64_MAX)));
        sqlite3_bind_int64(evict_, 2, static_cast<int64_t>(std::min<size_t>(opts_.max_bytes, INT64_MAX)));
        step_done(evict_, "evict");
    }

    std::optional<StoredResponse> get(const std::string& id, const std::string& owner) const override {
        std::lock_guard<std::mutex> lk(mu_);
        bind_text(get_, 1, id);
        bind_text(get_, 2, owner);
        std::optional<StoredResponse> out;
        const int rc = sqlite3_step(get_);
        if (rc == SQLITE_ROW) {
            const int64_t created = sqlite3_column_int64(get_, 4);
            StoredResponse r;
            r.id = id;
            r.owner = owner;
            r.response_json = column(get_, 0);
            r.input_items_json = column(get_, 1);
            r.model = column(get_, 3);
            const bool fresh = opts_.ttl_s <= 0 || created >= store_now_ms() - ttl_ms();
            if (fresh && history_from_json(column(get_, 2), &r.history)) {
                out = std::move(r);
            } else if (fresh) {
                FERROX_LOG_WARN("responses store %s: response %s has an unreadable history; treated as absent",
                                path_.c_str(), id.c_str());
            }
        } else if (rc != SQLITE_DONE) {
            FERROX_LOG_WARN("responses store %s: read failed: %s", path_.c_str(), sqlite3_errmsg(db_));
        }
        sqlite3_reset(get_);
        sqlite3_clear_bindings(get_);
        return out;
    }

    bool erase(const std::string& id, const std::string& owner) override {
        std::lock_guard<std::mutex> lk(mu_);
        bind_text(erase_, 1, id);
        bind_text(erase_, 2, owner);
        if (!step_done(erase_, "delete")) return false;
        return sqlite3_changes(db_) > 0;
    }

    size_t size() const override {
        std::lock_guard<std::mutex> lk(mu_);
        size_t n = 0;
        if (sqlite3_step(count_) == SQLITE_ROW) n = static_cast<size_t>(sqlite3_column_int64(count_, 0));
        sqlite3_reset(count_);
        return n;
    }

  private:
    int64_t ttl_ms() const { return static_cast<int64_t>(std::llround(opts_.ttl_s * 1000.0)); }
    Status error(const char* what) const {
        return invalid_argument("responses store " + path_ + ": " + what + ": " + sqlite3_errmsg(db_));
    }
    static void bind_text(sqlite3_stmt* s, int i, const std::string& v) {
        sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    }
    static std::string column(sqlite3_stmt* s, int i) {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
        return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, i))) : std::string();
    }
    bool step_done(sqlite3_stmt* s, const char* what) const {
        const int rc = sqlite3_step(s);
        if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
            FERROX_LOG_WARN("responses store %s: %s failed: %s", path_.c_str(), what, sqlite3_errmsg(db_));
        }
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return rc == SQLITE_DONE || rc == SQLITE_ROW;
    }

    sqlite3* db_;
    std::string path_;
    ResponseStoreOptions opts_;
    mutable std::mutex mu_;
    sqlite3_stmt *put_ = nullptr, *get_ = nullptr, *erase_ = nullptr, *evict_ = nullptr, *expire_ = nullptr,
                 *count_ = nullptr;
};

// One statement's first column as text ("" when none); false with the error.
bool query_text(sqlite3* db, const char* sql, std::string* out) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) return false;
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
        *out = p ? p : "";
    } else {
        out->clear();
    }
    sqlite3_finalize(s);
    return rc == SQLITE_ROW || rc == SQLITE_DONE;
}

}  // namespace

Expected<std::unique_ptr<ResponseStore>> open_sqlite_response_store(const ResponseStoreOptions& opts) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(opts.state_dir, ec);
    if (ec || !fs::is_directory(opts.state_dir, ec)) {
        return invalid_argument("--state-dir " + opts.state_dir + ": not a directory that can be created or used");
    }
    const std::string path = (fs::path(opts.state_dir) / "responses.sqlite3").string();
    sqlite3* db = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                                   nullptr);
    auto fail = [&](const std::string& what) -> Status {
        std::string msg = "responses store " + path + ": " + what + (db ? std::string(": ") + sqlite3_errmsg(db) : "") +
                          " (move the file away to start with an empty store)";
        sqlite3_close(db);
        return invalid_argument(msg);
    };
    if (rc != SQLITE_OK) return fail("cannot open");
    sqlite3_busy_timeout(db, 5000);
    std::string text;
    // The first read of a file that is not a database fails here ("file is not a database").
    if (!query_text(db, "PRAGMA journal_mode=WAL", &text)) return fail("not a readable SQLite database");
    if (text != "wal") return fail("cannot use WAL journal mode");
    if (!query_text(db, "PRAGMA quick_check", &text)) return fail("integrity check failed");
    if (text != "ok") {
        sqlite3_close(db);
        return invalid_argument("responses store " + path + ": damaged (" + text +
                                "; move the file away to start with an empty store)");
    }
    if (!query_text(db, "PRAGMA user_version", &text)) return fail("cannot read the schema version");
    const int version = std::atoi(text.c_str());
    if (version != 0 && version != kSchemaVersion) {
        sqlite3_close(db);
        return invalid_argument("responses store " + path + ": schema version " + text + ", this ferrox reads " +
                                std::to_string(kSchemaVersion));
    }
    const char* schema =
        "PRAGMA synchronous=NORMAL;"
        "CREATE TABLE IF NOT EXISTS responses ("
        " seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, owner TEXT NOT NULL, model TEXT NOT NULL,"
        " created_ms INTEGER NOT NULL, bytes INTEGER NOT NULL, response TEXT NOT NULL, input_items TEXT NOT NULL,"
        " history TEXT NOT NULL);"
        "CREATE INDEX IF NOT EXISTS responses_created ON responses(created_ms);"
        "PRAGMA user_version=1;";
    char* err = nullptr;
    if (sqlite3_exec(db, schema, nullptr, nullptr, &err) != SQLITE_OK) {
        std::string e = err ? err : "?";
        sqlite3_free(err);
        return fail("cannot create the schema (" + e + ")");
    }
    auto store = std::make_unique<SqliteResponseStore>(db, path, opts);
    if (Status st = store->prepare(); !st.is_ok()) return st;  // (store closes db)
    FERROX_LOG_INFO("responses store: %s (%zu stored)", path.c_str(), store->size());
    return std::unique_ptr<ResponseStore>(std::move(store));
}

}  // namespace ferrox

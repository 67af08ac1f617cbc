#include "server/response_store_redis.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/log.h"

namespace ferrox {

using json = nlohmann::json;

bool parse_redis_url(const std::string& url, std::string* host, int* port, int* db, std::string* error) {
    const std::string scheme = "redis://";
    *error = "--responses-store must be redis://HOST:PORT[/DB], got '" + url + "'";
    if (url.compare(0, scheme.size(), scheme) != 0) return false;
    std::string rest = url.substr(scheme.size());
    *db = 0;
    if (size_t slash = rest.find('/'); slash != std::string::npos) {
        const std::string d = rest.substr(slash + 1);
        rest.resize(slash);
        if (!d.empty()) {
            if (d.size() > 4 || d.find_first_not_of("0123456789") != std::string::npos) return false;
            *db = std::stoi(d);
        }
    }
    if (rest.find('@') != std::string::npos) {
        *error = "--responses-store: credentials in the URL are not supported (redis://HOST:PORT[/DB])";
        return false;
    }
    *port = 6379;
    if (!rest.empty() && rest.front() == '[') {  // [IPv6]:port
        const size_t close = rest.find(']');
        if (close == std::string::npos) return false;
        *host = rest.substr(1, close - 1);
        rest = rest.substr(close + 1);
        if (!rest.empty() && rest.front() != ':') return false;
        if (!rest.empty()) rest = rest.substr(1);
    } else {
        const size_t colon = rest.rfind(':');
        *host = rest.substr(0, colon);
        rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
    if (host->empty()) return false;
    if (!rest.empty()) {
        if (rest.size() > 5 || rest.find_first_not_of("0123456789") != std::string::npos) return false;
        *port = std::stoi(rest);
    }
    if (*port < 1 || *port > 65535) return false;
    error->clear();
    return true;
}

namespace {

struct Reply {
    char type = 0;  // '+', '-', ':', '$', '*'; 0: no reply (connection error)
    std::string str;  // simple, error, bulk
    long long num = 0;
    bool null = false;
    std::vector<Reply> items;
};

class RedisResponseStore final : public ResponseStore {
  public:
    RedisResponseStore(std::string host, int port, int db, const ResponseStoreOptions& opts)
        : host_(std::move(host)), port_(port), db_(db), opts_(opts) {}
    ~RedisResponseStore() override { close_fd(); }

    Status open() {
        std::lock_guard<std::mutex> lk(mu_);
        std::string err;
        if (!connect_locked(&err)) return invalid_argument("--responses-store redis://" + where() + ": " + err);
        return Status::ok();
    }

    void put(StoredResponse r) override {
        const size_t bytes = stored_bytes(r);
        if (bytes > opts_.max_bytes) {
            FERROX_LOG_WARN("responses store: %s is %zu bytes, over the bound; not stored", r.id.c_str(), bytes);
            return;
        }
        json v = {{"owner", r.owner},
                  {"model", r.model},
                  {"response", r.response_json},
                  {"input_items", r.input_items_json},
                  {"history", history_to_json(r.history)}};
        const std::string value = v.dump(-1, ' ', false, json::error_handler_t::replace);
        std::vector<std::string> set = {"SET", key(r.id), value};
        if (opts_.ttl_s > 0) {
            set.push_back("PX");
            set.push_back(std::to_string(std::max<long long>(1, std::llround(opts_.ttl_s * 1000.0))));
        }
        std::lock_guard<std::mutex> lk(mu_);
        Reply rep = command_locked(set);
        if (rep.type != '+') return warn("SET", rep);
        rep = command_locked({"RPUSH", order_key(), r.id});
        if (rep.type != ':') return warn("RPUSH", rep);
        for (long long n = rep.num; n > static_cast<long long>(opts_.max_count); --n) {
            Reply old = command_locked({"LPOP", order_key()});
            if (old.type != '$' || old.null) break;
            command_locked({"DEL", key(old.str)});
        }
    }

    std::optional<StoredResponse> get(const std::string& id, const std::string& owner) const override {
        std::lock_guard<std::mutex> lk(mu_);
        Reply rep = command_locked({"GET", key(id)});
        if (rep.type != '$') {
            warn("GET", rep);
            return std::nullopt;
        }
        if (rep.null) return std::nullopt;
        json v = json::parse(rep.str, nullptr, false);
        if (!v.is_object() || !v.value("owner", json()).is_string() || v["owner"].get<std::string>() != owner) {
            return std::nullopt;
        }
        StoredResponse r;
        r.id = id;
        r.owner = owner;
        auto text = [&](const char* k) {
            auto it = v.find(k);
            return it != v.end() && it->is_string() ? it->get<std::string>() : std::string();
        };
        r.model = text("model");
        r.response_json = text("response");
        r.input_items_json = text("input_items");
        if (!history_from_json(text("history"), &r.history)) return std::nullopt;
        return r;
    }

    bool erase(const std::string& id, const std::string& owner) override {
        if (!get(id, owner)) return false;
        std::lock_guard<std::mutex> lk(mu_);
        Reply rep = command_locked({"DEL", key(id)});
        if (rep.type != ':') {
            warn("DEL", rep);
            return false;
        }
        command_locked({"LREM", order_key(), "1", id});
        return rep.num > 0;
    }

    size_t size() const override {
        std::lock_guard<std::mutex> lk(mu_);
        Reply rep = command_locked({"LLEN", order_key()});
        return rep.type == ':' ? static_cast<size_t>(rep.num) : 0;
    }

  private:
    static std::string key(const std::string& id) { return "ferrox:responses:" + id; }
    static std::string order_key() { return "ferrox:responses:order"; }
    std::string where() const { return host_ + ":" + std::to_string(port_) + "/" + std::to_string(db_); }
    void warn(const char* what, const Reply& rep) const {
        FERROX_LOG_WARN("responses store redis://%s: %s failed: %s", where().c_str(), what,
                        rep.type == '-' ? rep.str.c_str() : rep.type == 0 ? "no connection" : "unexpected reply");
    }

    void close_fd() const {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        buf_.clear();
    }

    bool connect_locked(std::string* err) const {
        close_fd();
        addrinfo hints{};
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        if (int rc = getaddrinfo(host_.c_str(), std::to_string(port_).c_str(), &hints, &res); rc != 0) {
            *err = std::string("cannot resolve the host: ") + gai_strerror(rc);
            return false;
        }
        for (addrinfo* a = res; a; a = a->ai_next) {
            int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) continue;
            timeval tv{2, 0};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                fd_ = fd;
                break;
            }
            ::close(fd);
        }
        freeaddrinfo(res);
        if (fd_ < 0) {
            *err = "cannot connect";
            return false;
        }
        Reply r = roundtrip({"PING"});
        if (r.type != '+') {
            *err = r.type == '-' ? "PING: " + r.str : "no answer to PING (not a Redis server?)";
            close_fd();
            return false;
        }
        if (db_ != 0) {
            r = roundtrip({"SELECT", std::to_string(db_)});
            if (r.type != '+') {
                *err = "SELECT " + std::to_string(db_) + ": " + (r.type == '-' ? r.str : "no answer");
                close_fd();
                return false;
            }
        }
        return true;
    }

    // One command; on a connection error, reconnects once and retries.
    Reply command_locked(const std::vector<std::string>& args) const {
        if (fd_ >= 0) {
            Reply r = roundtrip(args);
            if (r.type != 0) return r;
        }
        std::string err;
        if (!connect_locked(&err)) return Reply{};
        return roundtrip(args);
    }

    Reply roundtrip(const std::vector<std::string>& args) const {
        std::string out = "*" + std::to_string(args.size()) + "\r\n";
        for (const std::string& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
        size_t sent = 0;
        while (sent < out.size()) {
            ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                close_fd();
                return Reply{};
            }
            sent += static_cast<size_t>(n);
        }
        Reply r;
        if (!read_reply(&r, 0)) {
            close_fd();
            return Reply{};
        }
        return r;
    }

    bool fill() const {
        char tmp[65536];
        ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
        if (n <= 0) return false;
        buf_.append(tmp, static_cast<size_t>(n));
        return true;
    }

    bool read_line(std::string* line) const {
        size_t pos;
        while ((pos = buf_.find("\r\n")) == std::string::npos) {
            if (buf_.size() > (1 << 16) || !fill()) return false;
        }
        *line = buf_.substr(0, pos);
        buf_.erase(0, pos + 2);
        return true;
    }

    bool read_reply(Reply* r, int depth) const {
        std::string line;
        if (depth > 8 || !read_line(&line) || line.empty()) return false;
        r->type = line[0];
        const std::string rest = line.substr(1);
        auto num = [&](long long* v) {
            char* end = nullptr;
            *v = std::strtoll(rest.c_str(), &end, 10);
            return !rest.empty() && *end == '\0';
        };
        switch (r->type) {
            case '+':
            case '-': r->str = rest; return true;
            case ':': return num(&r->num);
            case '$': {
                long long n;
                if (!num(&n) || n < -1 || n > (512LL << 20)) return false;
                if (n == -1) {
                    r->null = true;
                    return true;
                }
                while (buf_.size() < static_cast<size_t>(n) + 2) {
                    if (!fill()) return false;
                }
                r->str = buf_.substr(0, static_cast<size_t>(n));
                buf_.erase(0, static_cast<size_t>(n) + 2);
                return true;
            }
            case '*': {
                long long n;
                if (!num(&n) || n < -1 || n > 1 << 20) return false;
                if (n == -1) {
                    r->null = true;
                    return true;
                }
                r->items.resize(static_cast<size_t>(n));
                for (Reply& it : r->items) {
                    if (!read_reply(&it, depth + 1)) return false;
                }
                return true;
            }
            default: return false;
        }
    }

    std::string host_;
    int port_, db_;
    ResponseStoreOptions opts_;
    mutable std::mutex mu_;
    mutable int fd_ = -1;
    mutable std::string buf_;
};

}  // namespace

Expected<std::unique_ptr<ResponseStore>> open_redis_response_store(const ResponseStoreOptions& opts) {
    std::string host, err;
    int port = 0, db = 0;
    if (!parse_redis_url(opts.url, &host, &port, &db, &err)) return invalid_argument(err);
    auto store = std::make_unique<RedisResponseStore>(host, port, db, opts);
    if (Status st = store->open(); !st.is_ok()) return st;
    FERROX_LOG_INFO("responses store: redis://%s:%d/%d", host.c_str(), port, db);
    return std::unique_ptr<ResponseStore>(std::move(store));
}

}  // namespace ferrox

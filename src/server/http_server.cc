// HttpServer: the only translation unit that includes Boost.Asio/Beast (about 30 s to compile;
// keep it that way). Beast's parser parses requests, fed by our own socket reads so that every
// byte a client sends passes through one handler of ours (limits, deadlines, exceptions);
// responses are formatted here by hand, which keeps the write path a plain queue of strings and
// chunked framing a two-line affair.
//
// Ownership: the server's registry holds every open Connection (shared_ptr) until it closes;
// pending asynchronous operations hold it until they complete. A responder handed to the
// handler holds only a weak_ptr, so a caller that keeps one for long keeps no socket alive, and
// it posts through Hub, whose mutex and flag keep it from posting into a destroyed io_context.
//
// Every completion handler and every posted operation runs inside Connection::guarded(): an
// exception (Beast's fields throw std::length_error for a field over 64 KiB; bad_alloc) never
// escapes into the io_context, where it would leave the connection unanswered and open. It
// answers 431/413/400 while a request is being read, 500 before a response started, and
// otherwise closes.
//
// A connection is in one phase at a time, all of it on its strand:
//   kRequest   reading a request. Deadlines, one timer: a new connection must send its first
//              byte within header_timeout_s of the accept, a kept-alive one within
//              idle_timeout_s of its last response; the header is due header_timeout_s after
//              that first byte, the whole body body_timeout_s after the header. A request that
//              started and missed its deadline gets 408; a connection that sent nothing is just
//              closed.
//   kResponse  the handler has the request; a socket read stays pending so that a reset is
//              noticed at once (bytes the client pipelines are kept for the next request, up to
//              max_header_bytes). The client's EOF (a half-close after its request) is not a
//              disconnect: the response is still written, then the connection closes. A client
//              is gone when a read reports a reset or a write fails. A write stalled for
//              idle_timeout_s closes. A FIN during an event stream (text/event-stream) that
//              has nothing to write yet (a request waiting for a slot) is probed: an SSE
//              comment line now and another kProbeDelay later. A client that only
//              half-closed ignores them; one that closed its socket answers the first with a
//              reset, so the second write fails and the request is cancelled at once instead
//              of when its first tokens would have been written.
//   kLingering the last response is queued: write it, shut down our side, discard input until
//              the client closes or a short timer fires (closing with unread input would reset
//              the connection and could destroy the response before the client reads it)
//   kClosed    socket closed; operations still in flight complete with an error and stop

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/http.h"

// GCC 12 with -fsanitize flags reports -Wmaybe-uninitialized inside Beast's parser
// (boost::optional in content_length(); a false positive that the system-header exemption
// misses because it is found after inlining). Silenced for the Boost headers only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#pragma GCC diagnostic pop

#include "core/check.h"
#include "core/log.h"

namespace ferrox {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

constexpr int kLingerSeconds = 2;
// One socket read; bodies arrive through it too, so not too small.
constexpr size_t kReadChunk = 16 << 10;
// After a large request the read buffer is given back rather than kept per idle connection.
constexpr size_t kBufferKeepBytes = 64 << 10;

thread_local bool t_on_io_thread = false;

// Guards posting from non-I/O threads against a stopped or destroyed io_context: `alive` is
// cleared (under `mu`) once the I/O threads are joined, before the io_context is destroyed.
//
// Responders' operations go through one queue here, run in order by one drain handler on an
// I/O thread, which dispatches each onto its connection's strand. Posting each on its own cost
// the posting thread ~6 us (a wake-up of the I/O thread, mostly), and the engine thread posts
// every token of a step in a row: now the first operation of a burst posts the drain, the rest
// only queue (~0.2 us). One drain at a time, so the operations of a connection keep their order.
struct Hub {
    std::mutex mu;
    bool alive = true;
    asio::any_io_executor ex;  // the io_context's, for work that has no connection any more
    std::vector<std::function<void()>> queue;  // guarded by mu
    bool draining = false;                     // a drain is posted or running (guarded by mu)

    // Under mu, alive: queues op and posts the drain unless one is pending.
    void enqueue_locked(std::function<void()> op) {
        queue.push_back(std::move(op));
        if (draining) return;
        draining = true;
        asio::post(ex, [this] { drain(); });
    }

    // One batch, then the next batch as a handler of its own, so that a stream of operations
    // never keeps the I/O thread from its reads, accepts and timers.
    void drain() {
        std::vector<std::function<void()>> batch;
        {
            std::lock_guard<std::mutex> lk(mu);
            batch.swap(queue);
        }
        for (auto& op : batch) op();
        std::lock_guard<std::mutex> lk(mu);
        if (queue.empty() || !alive) {
            draining = false;
            return;
        }
        asio::post(ex, [this] { drain(); });
    }
};

// What a responder shares with its connection: read from any thread.
struct ResponseState {
    std::atomic<bool> gone{false};
    std::atomic<size_t> pending{0};  // bytes counted by the responder, not yet written or dropped
    std::atomic<bool> disconnected{false};  // the connection closed before send()/end()
};

// A queued piece of output: prefix + data + suffix, so chunk framing never copies the data.
struct OutItem {
    std::string prefix;
    std::string data;
    std::string_view suffix;
    size_t counted = 0;  // bytes this item adds to ResponseState::pending
};

enum class Framing { kLength, kChunked, kUntilClose, kNone };

// What the connection's one timer is waiting for; each kind has its own action on expiry.
enum class Deadline { kIdle, kHeader, kBody, kWrite, kLinger };

std::string http_date() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    size_t n = std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    return std::string(buf, n);
}

std::string_view reason_phrase(int status) {
    auto s = http::int_to_status(static_cast<unsigned>(status));
    if (s == http::status::unknown) return "Unknown";
    return http::obsolete_reason(s);
}

bool has_crlf(std::string_view s) { return s.find_first_of("\r\n") != std::string_view::npos; }

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        char x = a[i] >= 'A' && a[i] <= 'Z' ? char(a[i] - 'A' + 'a') : a[i];
        char y = b[i] >= 'A' && b[i] <= 'Z' ? char(b[i] - 'A' + 'a') : b[i];
        if (x != y) return false;
    }
    return true;
}

std::string lowercase(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    }
    return out;
}

std::string_view trim_ows(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

std::string endpoint_string(const tcp::endpoint& ep) {
    const auto addr = ep.address();
    std::string host = addr.to_string();
    if (addr.is_v6()) host = "[" + host + "]";
    return host + ":" + std::to_string(ep.port());
}

std::string_view path_of(std::string_view target) { return target.substr(0, target.find('?')); }

// The framing rules Beast leaves to us (RFC 9112 6.1, 6.3): it ignores a Transfer-Encoding whose
// final coding is not chunked and then reads the body as the next request (smuggling), and it
// lets a non-chunked Transfer-Encoding sit beside Content-Length. We accept exactly
// "Transfer-Encoding: chunked" from an HTTP/1.1 client, without Content-Length. Returns why the
// request is refused, or an empty view.
template <typename Message>
std::string_view framing_error(const Message& msg) {
    bool has_te = false, has_length = false;
    int n_codings = 0;
    bool only_chunked = true;
    for (const auto& field : msg) {
        if (field.name() == http::field::content_length) has_length = true;
        if (field.name() != http::field::transfer_encoding) continue;
        has_te = true;
        std::string_view list = field.value();
        while (true) {
            size_t comma = list.find(',');
            std::string_view coding = trim_ows(list.substr(0, comma));
            if (!coding.empty()) {
                ++n_codings;
                only_chunked &= iequals(coding, "chunked");
            }
            if (comma == std::string_view::npos) break;
            list.remove_prefix(comma + 1);
        }
    }
    if (!has_te) return {};
    if (has_length) return "a request must not have both Transfer-Encoding and Content-Length";
    if (msg.version() < 11) return "Transfer-Encoding in an HTTP/1.0 request";
    if (n_codings != 1 || !only_chunked) {
        return "unsupported Transfer-Encoding (only chunked is accepted)";
    }
    return {};
}

class Connection;

void run_callback(const std::function<void()>& fn) {
    if (!fn) return;
    try {
        fn();
    } catch (const std::exception& e) {
        FERROX_LOG_ERROR("http: on_disconnect callback threw: %s", e.what());
    } catch (...) {
        FERROX_LOG_ERROR("http: on_disconnect callback threw");
    }
}

}  // namespace

class HttpServer::Impl {
  public:
    Impl(const HttpServerOptions& options, HttpHandler handler)
        : options_(options),
          handler_(std::move(handler)),
          ioc_(options.n_io_threads),
          accept_strand_(asio::make_strand(ioc_)),
          work_(asio::make_work_guard(ioc_)) {
        hub_->ex = ioc_.get_executor();
    }
    ~Impl();

    Status listen();
    void start_threads();
    void shutdown(int grace_ms);
    int port() const { return port_; }
    size_t n_connections() const {
        std::lock_guard<std::mutex> lk(registry_mu_);
        return registry_.size();
    }

    // For connections (any I/O thread).
    const HttpServerOptions& options() const { return options_; }
    const HttpHandler& handler() const { return handler_; }
    const std::shared_ptr<Hub>& hub() const { return hub_; }
    bool stopping() const { return stopping_.load(std::memory_order_acquire); }
    void unregister(Connection* conn, bool counted, const std::string& client);

  private:
    // One listening socket per address of --host (llama-server takes a comma-separated list).
    struct Listener {
        explicit Listener(asio::strand<asio::io_context::executor_type>& strand) : acceptor(strand), retry(strand) {}
        tcp::acceptor acceptor;
        asio::steady_timer retry;
    };
    Status listen_on(const std::string& host, int port, bool several);
    void do_accept(Listener& l);
    void retry_accept_later(Listener& l);
    void on_accept(Listener& l, error_code ec, tcp::socket socket);
    void admit(tcp::socket socket);

    // Declaration order is destruction order reversed: the io_context outlives the acceptor
    // and the registry, and whatever its queued handlers still own.
    std::shared_ptr<Hub> hub_ = std::make_shared<Hub>();
    HttpServerOptions options_;
    HttpHandler handler_;
    asio::io_context ioc_;
    asio::strand<asio::io_context::executor_type> accept_strand_;
    std::deque<Listener> listeners_;  // a deque: handlers hold references to its elements
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::vector<std::thread> threads_;
    int port_ = 0;

    std::atomic<bool> stopping_{false};
    std::mutex shutdown_mu_;
    bool shut_down_ = false;  // under shutdown_mu_

    mutable std::mutex registry_mu_;
    std::condition_variable registry_cv_;
    std::unordered_map<Connection*, std::shared_ptr<Connection>> registry_;  // open connections
    size_t n_counted_ = 0;  // of those, the ones that count against max_connections
    // Counted connections per client address (only addresses with at least one).
    std::unordered_map<std::string, size_t> n_by_client_;
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
  public:
    // `client` is the peer's address for the per-client count ("" when not counted there).
    Connection(HttpServer::Impl* server, tcp::socket socket, bool counted, std::string client)
        : server_(server),
          socket_(std::move(socket)),
          ex_(socket_.get_executor()),
          timer_(ex_),
          probe_timer_(ex_),
          counted_(counted),
          client_(std::move(client)) {}

    // Any thread may post to the connection's strand through this.
    const asio::any_io_executor& executor() const { return ex_; }

    // Runs fn (on the strand); an exception it throws is answered or closes the connection
    // instead of escaping into the io_context. Every completion handler goes through this.
    template <typename Fn>
    void guarded(Fn&& fn) noexcept {
        try {
            fn();
        } catch (const std::length_error& e) {
            // Beast's fields throw this for a name or value over 64 KiB (a header, or a trailer,
            // which has no limit of its own).
            on_exception(431, "request header or trailer field too large", e.what());
        } catch (const std::bad_alloc& e) {
            on_exception(413, "request too large", e.what());
        } catch (const std::exception& e) {
            on_exception(400, "malformed HTTP request", e.what());
        } catch (...) {
            on_exception(400, "malformed HTTP request", "a non-std exception");
        }
    }

    // The rest runs on the strand.
    void start();
    void start_rejected(std::string_view why);
    void begin_shutdown();
    void force_close() { close(); }

    // Responder operations; `seq` names the response they belong to. They return false when
    // the operation was dropped (its counted bytes were not queued).
    bool do_send(uint64_t seq, int status, std::string body, std::string content_type,
                 HttpHeaders extra, size_t counted);
    bool do_start_stream(uint64_t seq, int status, std::string content_type, HttpHeaders extra);
    bool do_write(uint64_t seq, std::string chunk, size_t counted);
    bool do_end(uint64_t seq);
    void do_on_disconnect(uint64_t seq, std::function<void()> fn);
    void probe_peer();
    void do_abandon(uint64_t seq);

  private:
    enum class Phase { kRequest, kResponse, kLingering, kClosed };

    void on_exception(int request_status, std::string_view message, const char* what) noexcept;

    void read_request(Deadline wait);
    void parse_request();
    bool on_header_complete();
    void on_parse_error(error_code ec);
    void on_request();
    void start_read();
    void maybe_start_read();
    void on_read(error_code ec, size_t n);

    bool accepts(uint64_t seq) const { return phase_ == Phase::kResponse && seq == seq_; }
    std::string request_path() const;
    std::string error_body(int status, std::string_view message) const;
    std::string build_head(int status, std::string_view content_type, Framing framing,
                           size_t length, const HttpHeaders& extra) const;
    void enqueue(std::string data, size_t counted) {
        out_.push_back(OutItem{{}, std::move(data), {}, counted});
    }
    void flush();
    void on_write(error_code ec);
    void on_drained();
    void response_complete();
    void respond_error_and_close(int status, std::string_view message, HttpHeaders extra = {});
    void linger_close();
    void close();
    void arm_timer(Deadline kind, int seconds);
    void on_timer(Deadline kind);
    void cancel_timer();

    HttpServer::Impl* const server_;
    tcp::socket socket_;
    const asio::any_io_executor ex_;
    asio::steady_timer timer_;
    asio::steady_timer probe_timer_;  // the liveness probes (probe_peer)
    const bool counted_;
    const std::string client_;
    std::string remote_;

    Phase phase_ = Phase::kRequest;
    std::array<char, kReadChunk> read_buf_;  // the one socket read in flight writes here only
    bool read_pending_ = false;
    bool peer_eof_ = false;      // the client shut down its side; no read is started again
    bool sse_ = false;           // the stream being written is text/event-stream
    int probes_sent_ = 0;        // liveness probes of this response after the client's FIN
    beast::flat_buffer buffer_;  // received, not yet parsed
    std::optional<http::request_parser<http::string_body>> parser_;
    bool request_started_ = false;  // a byte of the request being read arrived
    bool header_checked_ = false;   // on_header_complete() ran for it
    size_t n_header_fields_ = 0;    // fields of the header section; later ones are trailers
    std::string path_;              // of the request in progress or the last one
    uint64_t timer_gen_ = 0;

    // The response in progress (phase kResponse), or the last one.
    uint64_t seq_ = 0;
    std::shared_ptr<ResponseState> current_;
    bool keep_alive_ = true;
    bool http10_ = false;
    bool head_ = false;
    bool resp_started_ = false;   // status line queued
    bool resp_finished_ = false;  // send() or end() applied
    bool streaming_ = false;
    bool chunked_ = false;
    bool unfinished_at_close_ = false;
    std::function<void()> disconnect_fn_;

    std::deque<OutItem> out_;
    std::vector<OutItem> in_flight_;
    std::vector<asio::const_buffer> write_bufs_;
    bool writing_ = false;
    bool fin_sent_ = false;  // lingering: our side is shut down
};

// The HttpResponder given to the handler. Holds the connection weakly; every call is posted.
class ResponderImpl final : public HttpResponder {
  public:
    ResponderImpl(std::shared_ptr<Hub> hub, std::weak_ptr<Connection> conn, uint64_t seq,
                  std::shared_ptr<ResponseState> state)
        : hub_(std::move(hub)), conn_(std::move(conn)), seq_(seq), state_(std::move(state)) {}

    ~ResponderImpl() override {
        post(0, [seq = seq_](Connection& c) {
            c.do_abandon(seq);
            return true;
        });
    }

    void send(int status, std::string body, std::string content_type,
              HttpHeaders extra_headers) override {
        size_t n = body.size();
        post(n, [seq = seq_, status, n, body = std::move(body), ct = std::move(content_type),
                 extra = std::move(extra_headers)](Connection& c) mutable {
            return c.do_send(seq, status, std::move(body), std::move(ct), std::move(extra), n);
        });
    }

    void start_stream(int status, std::string content_type, HttpHeaders extra_headers) override {
        post(0, [seq = seq_, status, ct = std::move(content_type),
                 extra = std::move(extra_headers)](Connection& c) mutable {
            return c.do_start_stream(seq, status, std::move(ct), std::move(extra));
        });
    }

    void write(std::string chunk) override {
        if (chunk.empty() || client_gone()) return;
        size_t n = chunk.size();
        post(n, [seq = seq_, n, chunk = std::move(chunk)](Connection& c) mutable {
            return c.do_write(seq, std::move(chunk), n);
        });
    }

    void end() override {
        post(0, [seq = seq_](Connection& c) { return c.do_end(seq); });
    }

    bool client_gone() const override { return state_->gone.load(std::memory_order_acquire); }

    void on_disconnect(std::function<void()> fn) override {
        {
            std::lock_guard<std::mutex> lk(hub_->mu);
            if (hub_->alive) {
                if (std::shared_ptr<Connection> c = conn_.lock()) {
                    hub_->enqueue_locked([c, seq = seq_, fn = std::move(fn)]() mutable {
                        asio::dispatch(c->executor(), [c, seq, fn = std::move(fn)]() mutable {
                            c->guarded([&] { c->do_on_disconnect(seq, std::move(fn)); });
                        });
                    });
                } else if (state_->disconnected.load(std::memory_order_acquire)) {
                    hub_->enqueue_locked([fn = std::move(fn)] { run_callback(fn); });
                }
                return;
            }
        }
        // The server is gone: no I/O thread is left to run it.
        if (state_->disconnected.load(std::memory_order_acquire)) run_callback(fn);
    }

    size_t pending_bytes() const override {
        return client_gone() ? 0 : state_->pending.load(std::memory_order_acquire);
    }

  private:
    // Counts `counted` bytes as pending, then runs op(connection) on its strand (through the
    // hub's queue, in the order of the calls); the bytes are uncounted when the op is dropped,
    // or at once when the connection or server is gone. An op that throws leaves them counted
    // (it may have queued them); its connection is closed or answered, and pending_bytes() of a
    // gone client reads 0.
    template <typename Op>
    void post(size_t counted, Op&& op) {
        if (counted) state_->pending.fetch_add(counted, std::memory_order_acq_rel);
        bool posted = false;
        {
            std::lock_guard<std::mutex> lk(hub_->mu);
            if (hub_->alive) {
                if (std::shared_ptr<Connection> c = conn_.lock()) {
                    hub_->enqueue_locked([c, state = state_, counted, op = std::forward<Op>(op)]() mutable {
                        asio::dispatch(c->executor(), [c, state, counted, op = std::move(op)]() mutable {
                            bool dropped = false;
                            c->guarded([&] { dropped = !op(*c); });
                            if (dropped && counted) state->pending.fetch_sub(counted, std::memory_order_acq_rel);
                        });
                    });
                    posted = true;
                }
            }
        }
        if (!posted && counted) state_->pending.fetch_sub(counted, std::memory_order_acq_rel);
    }

    const std::shared_ptr<Hub> hub_;
    const std::weak_ptr<Connection> conn_;
    const uint64_t seq_;
    const std::shared_ptr<ResponseState> state_;
};

void Connection::start() {
    error_code ec;
    socket_.set_option(tcp::no_delay(true), ec);  // each chunk goes out now, not after an ACK
    auto ep = socket_.remote_endpoint(ec);
    if (!ec) remote_ = endpoint_string(ep);
    // A new connection has no idle allowance: connecting and sending nothing is a cheap way to
    // hold a slot, so its first byte is due within header_timeout_s of the accept.
    read_request(Deadline::kHeader);
}

void Connection::start_rejected(std::string_view why) {
    respond_error_and_close(503, why, {{"Retry-After", "1"}});
}

void Connection::begin_shutdown() {
    switch (phase_) {
        case Phase::kRequest:  // idle, or a request not yet complete
            close();
            break;
        case Phase::kResponse:  // close after this response
            keep_alive_ = false;
            break;
        case Phase::kLingering:
        case Phase::kClosed:
            break;
    }
}

void Connection::on_exception(int request_status, std::string_view message,
                              const char* what) noexcept {
    try {
        FERROX_LOG_ERROR("http: %s: caught on the I/O path: %s", remote_.c_str(), what);
        switch (phase_) {
            case Phase::kRequest:
                return respond_error_and_close(request_status, message);
            case Phase::kResponse:
                if (!resp_started_) {
                    // Answer for the handler, and tell it to stop: its later calls are dropped.
                    resp_started_ = resp_finished_ = true;
                    std::function<void()> fn = std::move(disconnect_fn_);
                    disconnect_fn_ = nullptr;
                    if (current_) current_->gone.store(true, std::memory_order_release);
                    respond_error_and_close(500, "internal error while answering the request");
                    return run_callback(fn);
                }
                return close();
            case Phase::kLingering:
                return close();
            case Phase::kClosed:
                return;
        }
    } catch (...) {
        // Even answering failed (out of memory): at least give the socket back.
        try {
            close();
        } catch (...) {
        }
    }
}

// ---- reading requests ----

// `wait` is the deadline until the first byte: kIdle between kept-alive requests, kHeader for
// a new connection.
void Connection::read_request(Deadline wait) {
    phase_ = Phase::kRequest;
    const HttpServerOptions& o = server_->options();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(o.max_body_bytes));
    request_started_ = header_checked_ = false;
    n_header_fields_ = 0;
    path_.clear();
    arm_timer(wait, wait == Deadline::kIdle ? o.idle_timeout_s : o.header_timeout_s);
    parse_request();  // a pipelined request may be buffered already
}

// Feeds what is buffered to the parser; reads more when it needs more. Beast's parser stops
// after the header (not eager), so the header checks run before any body byte is taken.
void Connection::parse_request() {
    const HttpServerOptions& o = server_->options();
    while (buffer_.size() > 0) {
        if (!request_started_) {
            request_started_ = true;
            arm_timer(Deadline::kHeader, o.header_timeout_s);
        }
        error_code ec;
        size_t used = parser_->put(buffer_.data(), ec);
        buffer_.consume(used);
        if (ec == http::error::need_more) {
            // Beast bounds the header by header_limit but not a chunk-size line or the trailer
            // section: it would buffer them without end. The same limit applies to them here.
            if (parser_->is_header_done() && buffer_.size() >= o.max_header_bytes) {
                return respond_error_and_close(431,
                                               "a chunk header or the trailer section exceeds " +
                                                   std::to_string(o.max_header_bytes) + " bytes");
            }
            break;
        }
        if (ec) return on_parse_error(ec);
        if (parser_->is_header_done() && !header_checked_) {
            header_checked_ = true;
            if (!on_header_complete()) return;
        }
        if (parser_->is_done()) return on_request();
        if (used == 0) break;  // no progress without more input
    }
    if (peer_eof_) return close();  // the client half-closed: this request can never complete
    start_read();
}

// Framing checks, 100-continue and the body deadline. False if it answered (and closes).
bool Connection::on_header_complete() {
    const auto& msg = parser_->get();
    n_header_fields_ = static_cast<size_t>(std::distance(msg.begin(), msg.end()));
    std::string_view why = framing_error(msg);
    if (!why.empty()) {
        respond_error_and_close(400, why);
        return false;
    }
    if (parser_->is_done()) return true;
    arm_timer(Deadline::kBody, server_->options().body_timeout_s);
    auto expect = msg.find(http::field::expect);
    if (msg.version() >= 11 && expect != msg.end() && iequals(expect->value(), "100-continue")) {
        enqueue("HTTP/1.1 100 Continue\r\n\r\n", 0);
        flush();
    }
    return true;
}

void Connection::on_parse_error(error_code ec) {
    const HttpServerOptions& o = server_->options();
    if (ec == http::error::body_limit) {
        respond_error_and_close(
            413, "request body exceeds " + std::to_string(o.max_body_bytes) + " bytes");
    } else if (ec == http::error::header_limit) {
        respond_error_and_close(
            431, "request headers exceed " + std::to_string(o.max_header_bytes) + " bytes");
    } else {
        respond_error_and_close(400, "malformed HTTP request: " + ec.message());
    }
}

void Connection::on_request() {
    cancel_timer();
    http::request<http::string_body> msg = parser_->release();
    parser_.reset();

    HttpRequest req;
    req.method = std::string(msg.method_string());
    std::string_view target = msg.target();
    size_t q = target.find('?');
    req.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
    // Trailer fields are dropped, not merged into the header (RFC 9110 6.5.1): a handler that
    // reads a header must not get one sent after the body, outside what proxies checked.
    req.headers.reserve(std::min<size_t>(n_header_fields_, 64));
    size_t i_field = 0;
    for (const auto& field : msg) {
        if (i_field++ == n_header_fields_) break;
        req.headers.emplace_back(lowercase(field.name_string()), std::string(field.value()));
    }
    req.body = std::move(msg.body());
    req.remote = remote_;
    path_ = req.path;

    phase_ = Phase::kResponse;
    // A client that half-closed with nothing more pipelined gets this as its last response.
    keep_alive_ = msg.keep_alive() && !server_->stopping() && !(peer_eof_ && buffer_.size() == 0);
    http10_ = msg.version() < 11;
    head_ = msg.method() == http::verb::head;
    resp_started_ = resp_finished_ = streaming_ = chunked_ = false;
    disconnect_fn_ = nullptr;
    ++seq_;
    current_ = std::make_shared<ResponseState>();
    if (buffer_.capacity() > kBufferKeepBytes && buffer_.size() < kBufferKeepBytes) {
        buffer_.shrink_to_fit();
    }
    maybe_start_read();

    auto res = std::make_shared<ResponderImpl>(server_->hub(), weak_from_this(), seq_, current_);
    try {
        server_->handler()(std::move(req), std::move(res));
    } catch (const std::exception& e) {
        FERROX_LOG_ERROR("http: handler threw: %s", e.what());
    } catch (...) {
        FERROX_LOG_ERROR("http: handler threw a non-std exception");
    }
    // If the handler dropped the responder unanswered, its destructor posted do_abandon.
}

// The one socket read: into read_buf_, so buffer_ is never owned by an operation in flight and
// can be parsed at any time. Kept pending in every phase but kClosed: in kResponse it notices a
// reset at once and keeps pipelined bytes; while lingering it discards.
void Connection::start_read() {
    if (read_pending_ || peer_eof_ || phase_ == Phase::kClosed) return;
    read_pending_ = true;
    socket_.async_read_some(asio::buffer(read_buf_),
                            [self = shared_from_this()](error_code ec, size_t n) {
                                self->guarded([&] { self->on_read(ec, n); });
                            });
}

void Connection::maybe_start_read() {
    // Past max_header_bytes of pipelined input we stop reading (and stop noticing a reset
    // until a write fails) rather than buffer without bound.
    if (buffer_.size() < server_->options().max_header_bytes) start_read();
}

void Connection::on_read(error_code ec, size_t n) {
    read_pending_ = false;
    if (phase_ == Phase::kClosed) return;
    if (ec == asio::error::eof) {
        // A FIN is only the end of the client's requests, not of its interest in the answers.
        peer_eof_ = true;
    } else if (ec) {
        return close();  // a reset (abortive close) or an I/O error: the client is gone
    }
    if (phase_ == Phase::kLingering) {
        if (peer_eof_) {
            if (fin_sent_) close();  // else on_drained closes once our side is shut down
            return;
        }
        return start_read();  // discard: never buffered
    }
    if (n > 0) {
        auto space = buffer_.prepare(n);
        std::memcpy(space.data(), read_buf_.data(), n);
        buffer_.commit(n);
    }
    if (phase_ == Phase::kRequest) return parse_request();
    // kResponse.
    if (peer_eof_) {
        // Nothing pipelined: this response is the last one.
        if (buffer_.size() == 0) keep_alive_ = false;
        probe_peer();
        return;
    }
    maybe_start_read();
}

// ---- responder operations ----

bool Connection::do_send(uint64_t seq, int status, std::string body, std::string content_type,
                         HttpHeaders extra, size_t counted) {
    if (!accepts(seq)) return false;
    if (resp_started_) {
        FERROX_LOG_WARN("http: send() after the response was started; ignored");
        return false;
    }
    if (status < 200 || status > 999) {
        FERROX_LOG_WARN("http: send() with status %d; answering 500", status);
        status = 500;
    }
    resp_started_ = resp_finished_ = true;
    disconnect_fn_ = nullptr;
    const bool no_body = status == 204 || status == 304;
    std::string out = build_head(status, content_type, no_body ? Framing::kNone : Framing::kLength,
                                 body.size(), extra);
    out_.push_back(
        OutItem{std::move(out), head_ || no_body ? std::string() : std::move(body), {}, counted});
    flush();
    return true;
}

bool Connection::do_start_stream(uint64_t seq, int status, std::string content_type,
                                 HttpHeaders extra) {
    if (!accepts(seq)) return false;
    if (resp_started_) {
        FERROX_LOG_WARN("http: start_stream() after the response was started; ignored");
        return false;
    }
    if (status < 200 || status > 999 || status == 204 || status == 304) {
        FERROX_LOG_WARN("http: start_stream() with status %d; answering 500", status);
        status = 500;
    }
    resp_started_ = streaming_ = true;
    sse_ = content_type.rfind("text/event-stream", 0) == 0;
    probes_sent_ = 0;
    chunked_ = !http10_;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the body is the end of the stream
    bool has_cache_control = false, has_accel = false;
    for (const auto& [name, value] : extra) {
        has_cache_control |= iequals(name, "cache-control");
        has_accel |= iequals(name, "x-accel-buffering");
    }
    if (!has_cache_control) extra.emplace_back("Cache-Control", "no-cache");
    // Tells nginx-like proxies not to buffer the stream.
    if (!has_accel) extra.emplace_back("X-Accel-Buffering", "no");
    enqueue(build_head(status, content_type, chunked_ ? Framing::kChunked : Framing::kUntilClose, 0,
                       extra),
            0);
    flush();
    if (peer_eof_) probe_peer();  // the FIN came while the handler had not started the stream
    return true;
}

// See kResponse at the top. Two SSE comment lines, kProbeDelay apart, after the client's FIN.
void Connection::probe_peer() {
    constexpr auto kProbeDelay = std::chrono::milliseconds(200);
    if (phase_ != Phase::kResponse || !streaming_ || !sse_ || resp_finished_ || head_ || probes_sent_ >= 2) return;
    ++probes_sent_;
    OutItem item{{}, ":\n\n", {}, 0};
    if (chunked_) {
        item.prefix = "3\r\n";
        item.suffix = "\r\n";
    }
    out_.push_back(std::move(item));
    flush();
    if (probes_sent_ < 2) {
        probe_timer_.expires_after(kProbeDelay);
        probe_timer_.async_wait([self = shared_from_this()](error_code ec) {
            self->guarded([&] {
                if (!ec) self->probe_peer();
            });
        });
    }
}

bool Connection::do_write(uint64_t seq, std::string chunk, size_t counted) {
    if (!accepts(seq)) return false;
    if (!streaming_ || resp_finished_) {
        FERROX_LOG_WARN("http: write() outside start_stream()..end(); ignored");
        return false;
    }
    if (head_ || chunk.empty()) return false;
    OutItem item{{}, std::move(chunk), {}, counted};
    if (chunked_) {
        char size_line[24];
        int len = std::snprintf(size_line, sizeof(size_line), "%zx\r\n", item.data.size());
        item.prefix.assign(size_line, static_cast<size_t>(len));
        item.suffix = "\r\n";
    }
    out_.push_back(std::move(item));
    flush();
    return true;
}

bool Connection::do_end(uint64_t seq) {
    if (!accepts(seq)) return false;
    if (!streaming_ || resp_finished_) {
        FERROX_LOG_WARN("http: end() without start_stream(), or twice; ignored");
        return false;
    }
    resp_finished_ = true;
    disconnect_fn_ = nullptr;
    if (chunked_ && !head_) enqueue("0\r\n\r\n", 0);
    flush();
    return true;
}

void Connection::do_on_disconnect(uint64_t seq, std::function<void()> fn) {
    if (seq != seq_) return;  // an older response: it finished before any disconnect
    if (phase_ == Phase::kClosed) {
        if (unfinished_at_close_) run_callback(fn);  // registered after the client left
        return;
    }
    if (phase_ == Phase::kResponse && !resp_finished_) disconnect_fn_ = std::move(fn);
}

void Connection::do_abandon(uint64_t seq) {
    if (!accepts(seq) || resp_finished_) return;
    disconnect_fn_ = nullptr;
    if (!resp_started_) {
        FERROX_LOG_WARN("http: %s: handler dropped the response without answering; 500",
                        remote_.c_str());
        do_send(seq, 500, error_body(500, "the server did not answer the request"),
                "application/json", {}, 0);
    } else {
        FERROX_LOG_WARN("http: %s: stream dropped without end(); closing", remote_.c_str());
        close();  // no terminal chunk: the client sees a truncated stream
    }
}

// ---- writing ----

std::string Connection::request_path() const {
    if (parser_) return std::string(path_of(parser_->get().target()));  // "" before the line
    return path_;
}

std::string Connection::error_body(int status, std::string_view message) const {
    const auto& make = server_->options().error_body;
    if (make) {
        try {
            return make(request_path(), status, message);
        } catch (const std::exception& e) {
            FERROX_LOG_ERROR("http: error_body threw: %s; using the default", e.what());
        } catch (...) {
            FERROX_LOG_ERROR("http: error_body threw; using the default");
        }
    }
    return http_error_json(message, status >= 500 ? "server_error" : "invalid_request_error");
}

std::string Connection::build_head(int status, std::string_view content_type, Framing framing,
                                   size_t length, const HttpHeaders& extra) const {
    std::string h;
    h.reserve(256);
    h += "HTTP/1.1 ";
    h += std::to_string(status);
    h += ' ';
    h += reason_phrase(status);
    h += "\r\nDate: ";
    h += http_date();
    h += "\r\nServer: ferrox\r\n";
    if (framing != Framing::kNone && !content_type.empty() && !has_crlf(content_type)) {
        h += "Content-Type: ";
        h += content_type;
        h += "\r\n";
    }
    if (framing == Framing::kLength) {
        h += "Content-Length: ";
        h += std::to_string(length);
        h += "\r\n";
    } else if (framing == Framing::kChunked) {
        h += "Transfer-Encoding: chunked\r\n";
    }
    if (!keep_alive_) {
        h += "Connection: close\r\n";
    } else if (http10_) {
        h += "Connection: keep-alive\r\n";
    }
    for (const auto& [name, value] : extra) {
        if (name.empty() || has_crlf(name) || has_crlf(value) || name.find(':') != name.npos ||
            iequals(name, "content-length") || iequals(name, "transfer-encoding") ||
            iequals(name, "connection")) {
            FERROX_LOG_WARN("http: dropped response header '%s'", name.c_str());
            continue;
        }
        h += name;
        h += ": ";
        h += value;
        h += "\r\n";
    }
    h += "\r\n";
    return h;
}

void Connection::flush() {
    if (writing_ || phase_ == Phase::kClosed) return;
    if (out_.empty()) return on_drained();
    write_bufs_.clear();
    while (!out_.empty()) {
        in_flight_.push_back(std::move(out_.front()));
        out_.pop_front();
    }
    for (const OutItem& item : in_flight_) {
        if (!item.prefix.empty()) write_bufs_.push_back(asio::buffer(item.prefix));
        if (!item.data.empty()) write_bufs_.push_back(asio::buffer(item.data));
        if (!item.suffix.empty()) write_bufs_.push_back(asio::buffer(item.suffix));
    }
    writing_ = true;
    // A peer that stops reading (or vanished without a reset) would otherwise hold the
    // response forever: a write that makes no progress for idle_timeout_s closes it.
    if (phase_ == Phase::kResponse) arm_timer(Deadline::kWrite, server_->options().idle_timeout_s);
    asio::async_write(socket_, write_bufs_, [self = shared_from_this()](error_code ec, size_t) {
        self->guarded([&] { self->on_write(ec); });
    });
}

void Connection::on_write(error_code ec) {
    writing_ = false;
    if (phase_ == Phase::kResponse) cancel_timer();
    size_t counted = 0;
    for (const OutItem& item : in_flight_) counted += item.counted;
    in_flight_.clear();
    if (counted && current_) current_->pending.fetch_sub(counted, std::memory_order_acq_rel);
    if (phase_ == Phase::kClosed) return;
    if (ec) return close();  // EPIPE, ECONNRESET: the client is gone
    flush();
}

void Connection::on_drained() {
    if (phase_ == Phase::kLingering) {
        if (!fin_sent_) {
            fin_sent_ = true;
            error_code ignored;
            socket_.shutdown(tcp::socket::shutdown_send, ignored);
        }
        if (peer_eof_) close();  // both sides are done: nothing left to linger for
        return;
    }
    if (phase_ == Phase::kResponse && resp_finished_) response_complete();
}

void Connection::response_complete() {
    disconnect_fn_ = nullptr;
    streaming_ = false;
    if (!keep_alive_ || server_->stopping()) return linger_close();
    read_request(Deadline::kIdle);
}

// For errors the HTTP layer answers itself: the body from error_body(), then close.
void Connection::respond_error_and_close(int status, std::string_view message, HttpHeaders extra) {
    std::string body = error_body(status, message);
    keep_alive_ = false;
    head_ = false;
    enqueue(build_head(status, "application/json", Framing::kLength, body.size(), extra) + body, 0);
    linger_close();
}

void Connection::linger_close() {
    phase_ = Phase::kLingering;
    parser_.reset();
    disconnect_fn_ = nullptr;
    arm_timer(Deadline::kLinger, kLingerSeconds);
    start_read();
    flush();
}

void Connection::close() {
    if (phase_ == Phase::kClosed) return;
    const bool unfinished = phase_ == Phase::kResponse && !resp_finished_;
    phase_ = Phase::kClosed;
    unfinished_at_close_ = unfinished;
    if (current_) {
        if (unfinished) current_->disconnected.store(true, std::memory_order_release);
        current_->gone.store(true, std::memory_order_release);
        size_t counted = 0;
        for (const OutItem& item : out_) counted += item.counted;
        if (counted) current_->pending.fetch_sub(counted, std::memory_order_acq_rel);
    }
    out_.clear();
    cancel_timer();
    probe_timer_.cancel();
    error_code ignored;
    socket_.close(ignored);  // operations in flight complete with operation_aborted
    std::function<void()> fn = std::move(disconnect_fn_);
    disconnect_fn_ = nullptr;
    if (unfinished) run_callback(fn);
    server_->unregister(this, counted_, client_);  // our caller's handler still holds a reference
}

void Connection::arm_timer(Deadline kind, int seconds) {
    uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::chrono::seconds(seconds));
    timer_.async_wait([self = shared_from_this(), gen, kind](error_code ec) {
        self->guarded([&] {
            if (ec || gen != self->timer_gen_) return;
            self->on_timer(kind);
        });
    });
}

void Connection::on_timer(Deadline kind) {
    const HttpServerOptions& o = server_->options();
    if (phase_ == Phase::kRequest && request_started_) {
        if (kind == Deadline::kHeader) {
            return respond_error_and_close(408, "request header not complete within " +
                                                    std::to_string(o.header_timeout_s) + " s");
        }
        if (kind == Deadline::kBody) {
            return respond_error_and_close(
                408, "request body not complete within " + std::to_string(o.body_timeout_s) + " s");
        }
    }
    // Idle, a new connection that sent nothing, a stalled write, or lingering done.
    close();
}

void Connection::cancel_timer() {
    ++timer_gen_;
    timer_.cancel();
}

}  // namespace

// ---- the server ----

HttpServer::Impl::~Impl() {
    shutdown(0);
    std::vector<std::function<void()>> unrun;  // what no drain ran: its connections go below too
    {
        std::lock_guard<std::mutex> lk(hub_->mu);
        hub_->alive = false;
        unrun.swap(hub_->queue);
    }
    unrun.clear();
    std::unordered_map<Connection*, std::shared_ptr<Connection>> left;
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        left.swap(registry_);
    }
    left.clear();
    // The io_context is destroyed last; with it, handlers never run and what they own.
}

// `host` may list several addresses separated by commas ("127.0.0.1,::1"): each gets a socket,
// all on one port (with port 0, the one the first was given).
Status HttpServer::Impl::listen() {
    const std::string& hosts = options_.host;
    size_t i = 0;
    int port = options_.port;
    do {
        size_t comma = hosts.find(',', i);
        if (comma == std::string::npos) comma = hosts.size();
        std::string host = hosts.substr(i, comma - i);
        while (!host.empty() && host.front() == ' ') host.erase(0, 1);
        while (!host.empty() && host.back() == ' ') host.pop_back();
        if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
        if (host.empty()) return invalid_argument("http: an empty address in --host '" + hosts + "'");
        FERROX_RETURN_IF_ERROR(listen_on(host, port, hosts.find(',') != std::string::npos));
        port = port_;
        i = comma + 1;
    } while (i <= hosts.size());
    for (Listener& l : listeners_) do_accept(l);  // no thread runs yet, so starting here is not a race
    return Status::ok();
}

Status HttpServer::Impl::listen_on(const std::string& host, int port, bool several) {
    error_code ec;
    tcp::endpoint ep;
    auto addr = asio::ip::make_address(host, ec);
    if (!ec) {
        ep = tcp::endpoint(addr, static_cast<unsigned short>(port));
    } else {
        tcp::resolver resolver(ioc_);
        auto results = resolver.resolve(host, std::to_string(port), ec);
        if (ec || results.empty()) {
            return invalid_argument("http: cannot resolve host '" + host + "': " + ec.message());
        }
        ep = results.begin()->endpoint();
    }
    std::string where = host + ":" + std::to_string(port);
    Listener& l = listeners_.emplace_back(accept_strand_);
    tcp::acceptor& a = l.acceptor;
    a.open(ep.protocol(), ec);
    if (ec) return io_error("http: socket for " + where + ": " + ec.message());
    a.set_option(tcp::acceptor::reuse_address(true), ec);
    // Beside other addresses, "::" takes IPv6 only (else it would also take 0.0.0.0's port).
    if (several && ep.protocol() == tcp::v6()) a.set_option(asio::ip::v6_only(true), ec);
    a.bind(ep, ec);
    if (ec) return io_error("http: bind " + where + ": " + ec.message());
    a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return io_error("http: listen " + where + ": " + ec.message());
    port_ = a.local_endpoint(ec).port();
    return Status::ok();
}

void HttpServer::Impl::start_threads() {
    for (int i = 0; i < options_.n_io_threads; ++i) {
        threads_.emplace_back([this] {
            t_on_io_thread = true;
            while (true) {
                try {
                    ioc_.run();
                    break;
                } catch (const std::exception& e) {
                    // Last resort only: connection handlers catch their own (guarded()).
                    FERROX_LOG_ERROR("http: I/O thread caught: %s", e.what());
                }
            }
        });
    }
}

void HttpServer::Impl::do_accept(Listener& l) {
    l.acceptor.async_accept(asio::make_strand(ioc_), [this, &l](error_code ec, tcp::socket socket) {
        try {
            on_accept(l, ec, std::move(socket));
        } catch (const std::exception& e) {
            FERROX_LOG_ERROR("http: accept handler caught: %s", e.what());
            retry_accept_later(l);
        } catch (...) {
            FERROX_LOG_ERROR("http: accept handler caught a non-std exception");
            retry_accept_later(l);
        }
    });
}

// Out of descriptors, memory and the like: back off instead of spinning.
void HttpServer::Impl::retry_accept_later(Listener& l) {
    try {
        l.retry.expires_after(std::chrono::milliseconds(100));
        l.retry.async_wait([this, &l](error_code ec) {
            if (ec || !l.acceptor.is_open()) return;
            try {
                do_accept(l);
            } catch (...) {
                retry_accept_later(l);
            }
        });
    } catch (...) {
        FERROX_LOG_ERROR("http: cannot schedule accepting again; no new connections");
    }
}

void HttpServer::Impl::on_accept(Listener& l, error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !l.acceptor.is_open()) return;
    if (ec) {
        FERROX_LOG_WARN("http: accept: %s", ec.message().c_str());
        return retry_accept_later(l);
    }
    try {
        admit(std::move(socket));
    } catch (const std::exception& e) {
        FERROX_LOG_ERROR("http: dropping a new connection: %s", e.what());
    }
    do_accept(l);
}

void HttpServer::Impl::admit(tcp::socket socket) {
    error_code ec;
    tcp::endpoint peer = socket.remote_endpoint(ec);
    std::string client = ec ? std::string() : peer.address().to_string();
    std::shared_ptr<Connection> conn;
    std::string_view rejected;  // why, when over a cap
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        if (stopping()) return;  // the socket closes with us
        const size_t per_client = static_cast<size_t>(options_.max_connections_per_client);
        if (n_counted_ >= static_cast<size_t>(options_.max_connections)) {
            rejected = "too many connections, retry later";
        } else if (per_client > 0 && !client.empty()) {
            auto it = n_by_client_.find(client);
            if (it != n_by_client_.end() && it->second >= per_client) {
                rejected = "too many connections from this client, retry later";
            }
        }
        const bool counted = rejected.empty();
        // Counted per client only when counted at all, and only with a per-client cap.
        std::string key = counted && per_client > 0 ? client : std::string();
        conn = std::make_shared<Connection>(this, std::move(socket), counted, key);
        registry_.emplace(conn.get(), conn);
        if (counted) {
            ++n_counted_;
            if (!key.empty()) ++n_by_client_[key];
        }
    }
    try {
        asio::dispatch(conn->executor(), [conn, rejected] {
            conn->guarded([&] {
                if (!rejected.empty()) {
                    conn->start_rejected(rejected);
                } else {
                    conn->start();
                }
            });
        });
    } catch (...) {
        asio::post(conn->executor(), [conn] { conn->guarded([&] { conn->force_close(); }); });
        throw;
    }
}

void HttpServer::Impl::unregister(Connection* conn, bool counted, const std::string& client) {
    std::shared_ptr<Connection> ref;  // released after the lock: never the last one anyway
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        auto it = registry_.find(conn);
        if (it == registry_.end()) return;
        ref = std::move(it->second);
        registry_.erase(it);
        if (counted) {
            --n_counted_;
            auto c = n_by_client_.find(client);
            if (!client.empty() && c != n_by_client_.end() && --c->second == 0) {
                n_by_client_.erase(c);
            }
        }
    }
    registry_cv_.notify_all();
}

void HttpServer::Impl::shutdown(int grace_ms) {
    CHECK_MSG(!t_on_io_thread, "HttpServer::shutdown() called from an I/O thread");
    std::lock_guard<std::mutex> shutdown_lk(shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;

    using Clock = std::chrono::steady_clock;
    auto post_to_all = [this](auto op) {
        std::vector<std::shared_ptr<Connection>> conns;
        {
            std::lock_guard<std::mutex> lk(registry_mu_);
            for (auto& [ptr, conn] : registry_) conns.push_back(conn);
        }
        for (auto& conn : conns) {
            asio::post(conn->executor(), [conn, op] { conn->guarded([&] { op(*conn); }); });
        }
    };
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        stopping_.store(true, std::memory_order_release);  // admit() checks under this lock
    }
    asio::post(accept_strand_, [this] {
        error_code ignored;
        for (Listener& l : listeners_) {
            l.acceptor.close(ignored);
            l.retry.cancel();
        }
    });
    post_to_all([](Connection& c) { c.begin_shutdown(); });
    {
        std::unique_lock<std::mutex> lk(registry_mu_);
        registry_cv_.wait_until(lk, Clock::now() + std::chrono::milliseconds(std::max(0, grace_ms)),
                                [this] { return registry_.empty(); });
    }
    post_to_all([](Connection& c) { c.force_close(); });
    {
        // Closing takes a strand turn each; only a handler that blocks an I/O thread delays it.
        std::unique_lock<std::mutex> lk(registry_mu_);
        if (!registry_cv_.wait_for(lk, std::chrono::seconds(10),
                                   [this] { return registry_.empty(); })) {
            FERROX_LOG_ERROR("http: %zu connections did not close; is a handler blocking?",
                             registry_.size());
        }
    }
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
    // No handler runs any more: from now on responder calls are dropped at once.
    std::lock_guard<std::mutex> lk(hub_->mu);
    hub_->alive = false;
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() = default;  // Impl's destructor shuts down

Expected<std::unique_ptr<HttpServer>> HttpServer::start(const HttpServerOptions& options,
                                                        HttpHandler handler) {
    if (options.n_io_threads < 1 || options.port < 0 || options.port > 65535 ||
        options.max_connections < 1 || options.max_connections_per_client < 0 ||
        options.idle_timeout_s < 1 || options.header_timeout_s < 1 || options.body_timeout_s < 1 ||
        options.max_header_bytes < 1 || options.max_header_bytes > (1u << 31)) {
        return invalid_argument("http: invalid server options");
    }
    if (!handler) return invalid_argument("http: no handler");
    auto impl = std::make_unique<Impl>(options, std::move(handler));
    FERROX_RETURN_IF_ERROR(impl->listen());
    impl->start_threads();
    FERROX_LOG_INFO("http: listening on %s:%d with %d I/O thread(s)", options.host.c_str(),
                    impl->port(), options.n_io_threads);
    return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

int HttpServer::port() const { return impl_->port(); }
size_t HttpServer::n_connections() const { return impl_->n_connections(); }
void HttpServer::shutdown(int grace_ms) { impl_->shutdown(grace_ms); }

}  // namespace ferrox

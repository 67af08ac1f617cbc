// HttpServer: the only translation unit that includes Boost.Asio/Beast (about 30 s to compile;
// keep it that way). Beast parses requests; responses are formatted here by hand, which keeps
// the write path a plain queue of strings and chunked framing a two-line affair.
//
// Ownership: the server's registry holds every open Connection (shared_ptr) until it closes;
// pending asynchronous operations hold it until they complete. A responder handed to the
// handler holds only a weak_ptr, so a caller that keeps one for long keeps no socket alive, and
// it posts through Hub, whose mutex and flag keep it from posting into a destroyed io_context.
//
// A connection is in one phase at a time, all of it on its strand:
//   kRequest   reading a request (Beast parser), idle timer armed
//   kResponse  the handler has the request; a plain socket read stays pending so that a client
//              that goes away is noticed at once (bytes it pipelines are kept for the next
//              request, up to max_header_bytes); a write stalled for idle_timeout_s closes
//   kLingering the last response is queued: write it, shut down our side, discard input until
//              the client closes or a short timer fires (closing with unread input would reset
//              the connection and could destroy the response before the client reads it)
//   kClosed    socket closed; operations still in flight complete with an error and stop

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
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
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
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
constexpr size_t kReadChunk = 4096;
// After a large request the read buffer is given back rather than kept per idle connection.
constexpr size_t kBufferKeepBytes = 64 << 10;

thread_local bool t_on_io_thread = false;

// Guards posting from non-I/O threads against a stopped or destroyed io_context: `alive` is
// cleared (under `mu`) once the I/O threads are joined, before the io_context is destroyed.
struct Hub {
    std::mutex mu;
    bool alive = true;
    asio::any_io_executor ex;  // the io_context's, for work that has no connection any more
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

std::string endpoint_string(const tcp::endpoint& ep) {
    const auto addr = ep.address();
    std::string host = addr.to_string();
    if (addr.is_v6()) host = "[" + host + "]";
    return host + ":" + std::to_string(ep.port());
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
          acceptor_(accept_strand_),
          accept_retry_(accept_strand_),
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
    void unregister(Connection* conn, bool counted);

  private:
    void do_accept();
    void on_accept(error_code ec, tcp::socket socket);

    // Declaration order is destruction order reversed: the io_context outlives the acceptor
    // and the registry, and whatever its queued handlers still own.
    std::shared_ptr<Hub> hub_ = std::make_shared<Hub>();
    HttpServerOptions options_;
    HttpHandler handler_;
    asio::io_context ioc_;
    asio::strand<asio::io_context::executor_type> accept_strand_;
    tcp::acceptor acceptor_;
    asio::steady_timer accept_retry_;
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
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
  public:
    Connection(HttpServer::Impl* server, tcp::socket socket, bool counted)
        : server_(server),
          socket_(std::move(socket)),
          ex_(socket_.get_executor()),
          timer_(ex_),
          counted_(counted) {}

    // Any thread may post to the connection's strand through this.
    const asio::any_io_executor& executor() const { return ex_; }

    // The rest runs on the strand.
    void start();
    void start_rejected();
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
    void do_abandon(uint64_t seq);

  private:
    enum class Phase { kRequest, kResponse, kLingering, kClosed };

    void read_request();
    void read_header();
    void on_header(error_code ec);
    void on_body(error_code ec);
    void on_read_error(error_code ec);
    void on_request();
    void start_socket_read();
    void maybe_start_socket_read();
    void on_socket_read(error_code ec, size_t n);

    bool accepts(uint64_t seq) const { return phase_ == Phase::kResponse && seq == seq_; }
    std::string build_head(int status, std::string_view content_type, Framing framing,
                           size_t length, const HttpHeaders& extra) const;
    void enqueue(std::string data, size_t counted) {
        out_.push_back(OutItem{{}, std::move(data), {}, counted});
    }
    void flush();
    void on_write(error_code ec);
    void on_drained();
    void response_complete();
    void respond_error_and_close(int status, std::string body);
    void linger_close();
    void close();
    void arm_timer(int seconds);
    void cancel_timer();

    HttpServer::Impl* const server_;
    tcp::socket socket_;
    const asio::any_io_executor ex_;
    asio::steady_timer timer_;
    const bool counted_;
    std::string remote_;

    Phase phase_ = Phase::kRequest;
    beast::flat_buffer buffer_;
    std::optional<http::request_parser<http::string_body>> parser_;
    bool read_pending_ = false;  // a read (Beast's or ours) owns buffer_
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
    bool close_after_flush_ = false;  // lingering: shut down our side once out_ drains
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
                    const asio::any_io_executor& ex = c->executor();
                    asio::post(ex, [c, seq = seq_, fn = std::move(fn)]() mutable {
                        c->do_on_disconnect(seq, std::move(fn));
                    });
                } else if (state_->disconnected.load(std::memory_order_acquire)) {
                    asio::post(hub_->ex, [fn = std::move(fn)] { run_callback(fn); });
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
    // Counts `counted` bytes as pending, then runs op(connection) on its strand; the bytes are
    // uncounted when the op is dropped, or at once when the connection or server is gone.
    template <typename Op>
    void post(size_t counted, Op&& op) {
        if (counted) state_->pending.fetch_add(counted, std::memory_order_acq_rel);
        bool posted = false;
        {
            std::lock_guard<std::mutex> lk(hub_->mu);
            if (hub_->alive) {
                if (std::shared_ptr<Connection> c = conn_.lock()) {
                    const asio::any_io_executor& ex = c->executor();
                    asio::post(ex,
                               [c, state = state_, counted, op = std::forward<Op>(op)]() mutable {
                                   if (!op(*c) && counted) {
                                       state->pending.fetch_sub(counted, std::memory_order_acq_rel);
                                   }
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
    read_request();
}

void Connection::start_rejected() {
    keep_alive_ = false;
    std::string body = http_error_json("too many connections, retry later", "server_error");
    enqueue(
        build_head(503, "application/json", Framing::kLength, body.size(), {{"Retry-After", "1"}}) +
            body,
        0);
    linger_close();
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

// ---- reading requests ----

void Connection::read_request() {
    phase_ = Phase::kRequest;
    const HttpServerOptions& o = server_->options();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
    parser_->body_limit(static_cast<std::uint64_t>(o.max_body_bytes));
    arm_timer(o.idle_timeout_s);
    if (!read_pending_) return read_header();
    // The socket read left pending during the last response owns buffer_; it continues into
    // read_header() when it completes. If a pipelined request is already buffered, don't wait
    // for more bytes: cancel it (nothing is being written now, so only that read is affected).
    if (buffer_.size() > 0) {
        error_code ignored;
        socket_.cancel(ignored);
    }
}

void Connection::read_header() {
    read_pending_ = true;
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(error_code ec) {
    read_pending_ = false;
    if (phase_ == Phase::kClosed) return;
    if (ec) return on_read_error(ec);
    if (!parser_->is_done()) {
        const auto& msg = parser_->get();
        auto expect = msg.find(http::field::expect);
        if (msg.version() >= 11 && expect != msg.end() &&
            iequals(expect->value(), "100-continue")) {
            enqueue("HTTP/1.1 100 Continue\r\n\r\n", 0);
            flush();
        }
        read_pending_ = true;
        http::async_read(
            socket_, buffer_, *parser_,
            [self = shared_from_this()](error_code ec2, size_t) { self->on_body(ec2); });
        return;
    }
    on_request();
}

void Connection::on_body(error_code ec) {
    read_pending_ = false;
    if (phase_ == Phase::kClosed) return;
    if (ec) return on_read_error(ec);
    on_request();
}

void Connection::on_read_error(error_code ec) {
    const HttpServerOptions& o = server_->options();
    if (ec == http::error::body_limit) {
        respond_error_and_close(413, http_error_json("request body exceeds " +
                                                     std::to_string(o.max_body_bytes) + " bytes"));
    } else if (ec == http::error::header_limit) {
        respond_error_and_close(
            431, http_error_json("request headers exceed " + std::to_string(o.max_header_bytes) +
                                 " bytes"));
    } else if (ec.category() == http::make_error_code(http::error::bad_method).category() &&
               ec != http::error::end_of_stream && ec != http::error::partial_message) {
        respond_error_and_close(400, http_error_json("malformed HTTP request: " + ec.message()));
    } else {
        close();  // the client closed (between or inside requests), the idle timer, or I/O error
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
    req.headers.reserve(16);
    for (const auto& field : msg) {
        req.headers.emplace_back(lowercase(field.name_string()), std::string(field.value()));
    }
    req.body = std::move(msg.body());
    req.remote = remote_;

    phase_ = Phase::kResponse;
    keep_alive_ = msg.keep_alive() && !server_->stopping();
    http10_ = msg.version() < 11;
    head_ = msg.method() == http::verb::head;
    resp_started_ = resp_finished_ = streaming_ = chunked_ = false;
    disconnect_fn_ = nullptr;
    ++seq_;
    current_ = std::make_shared<ResponseState>();
    if (buffer_.capacity() > kBufferKeepBytes && buffer_.size() < kBufferKeepBytes) {
        buffer_.shrink_to_fit();
    }
    maybe_start_socket_read();

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

// A plain read kept pending while a response is in progress or the connection lingers: it
// notices a client that goes away, and keeps pipelined bytes for the next request.
void Connection::start_socket_read() {
    read_pending_ = true;
    socket_.async_read_some(
        buffer_.prepare(kReadChunk),
        [self = shared_from_this()](error_code ec, size_t n) { self->on_socket_read(ec, n); });
}

void Connection::maybe_start_socket_read() {
    // Past max_header_bytes of pipelined input we stop reading (and stop noticing a
    // disconnect until a write fails) rather than buffer without bound.
    if (!read_pending_ && buffer_.size() < server_->options().max_header_bytes) {
        start_socket_read();
    }
}

void Connection::on_socket_read(error_code ec, size_t n) {
    read_pending_ = false;
    switch (phase_) {
        case Phase::kClosed:
            return;
        case Phase::kLingering:
            if (ec) return close();
            start_socket_read();  // discard: never committed
            return;
        case Phase::kResponse:
            if (ec) {
                // A client that half-closed after a finished response still gets it.
                if (ec == asio::error::eof && resp_finished_) {
                    keep_alive_ = false;
                    return;
                }
                return close();
            }
            buffer_.commit(n);
            maybe_start_socket_read();
            return;
        case Phase::kRequest:
            // operation_aborted here is read_request()'s cancel (close() sets kClosed first).
            if (ec && ec != asio::error::operation_aborted) return close();
            buffer_.commit(n);
            read_header();
            return;
    }
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
    return true;
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
        do_send(seq, 500, http_error_json("the server did not answer the request", "server_error"),
                "application/json", {}, 0);
    } else {
        FERROX_LOG_WARN("http: %s: stream dropped without end(); closing", remote_.c_str());
        close();  // no terminal chunk: the client sees a truncated stream
    }
}

// ---- writing ----

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
    if (phase_ == Phase::kResponse) arm_timer(server_->options().idle_timeout_s);
    asio::async_write(socket_, write_bufs_,
                      [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
}

void Connection::on_write(error_code ec) {
    writing_ = false;
    if (phase_ == Phase::kResponse) cancel_timer();
    size_t counted = 0;
    for (const OutItem& item : in_flight_) counted += item.counted;
    in_flight_.clear();
    if (counted && current_) current_->pending.fetch_sub(counted, std::memory_order_acq_rel);
    if (phase_ == Phase::kClosed) return;
    if (ec) return close();  // the client is gone
    flush();
}

void Connection::on_drained() {
    if (close_after_flush_) {
        close_after_flush_ = false;
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_send, ignored);
        return;
    }
    if (phase_ == Phase::kResponse && resp_finished_) response_complete();
}

void Connection::response_complete() {
    disconnect_fn_ = nullptr;
    streaming_ = false;
    if (!keep_alive_ || server_->stopping()) return linger_close();
    read_request();
}

void Connection::respond_error_and_close(int status, std::string body) {
    keep_alive_ = false;
    head_ = false;
    enqueue(build_head(status, "application/json", Framing::kLength, body.size(), {}) + body, 0);
    linger_close();
}

void Connection::linger_close() {
    phase_ = Phase::kLingering;
    disconnect_fn_ = nullptr;
    arm_timer(kLingerSeconds);
    if (!read_pending_) start_socket_read();
    close_after_flush_ = true;
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
    error_code ignored;
    socket_.close(ignored);  // operations in flight complete with operation_aborted
    std::function<void()> fn = std::move(disconnect_fn_);
    disconnect_fn_ = nullptr;
    if (unfinished) run_callback(fn);
    server_->unregister(this, counted_);  // our caller's handler still holds a reference
}

void Connection::arm_timer(int seconds) {
    uint64_t gen = ++timer_gen_;
    timer_.expires_after(std::chrono::seconds(seconds));
    timer_.async_wait([self = shared_from_this(), gen](error_code ec) {
        if (ec || gen != self->timer_gen_) return;
        self->close();  // idle keep-alive connection, slow request, or lingering done
    });
}

void Connection::cancel_timer() {
    ++timer_gen_;
    timer_.cancel();
}

}  // namespace

// ---- the server ----

HttpServer::Impl::~Impl() {
    shutdown(0);
    {
        std::lock_guard<std::mutex> lk(hub_->mu);
        hub_->alive = false;
    }
    std::unordered_map<Connection*, std::shared_ptr<Connection>> left;
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        left.swap(registry_);
    }
    left.clear();
    // The io_context is destroyed last; with it, handlers never run and what they own.
}

Status HttpServer::Impl::listen() {
    const HttpServerOptions& o = options_;
    error_code ec;
    tcp::endpoint ep;
    auto addr = asio::ip::make_address(o.host, ec);
    if (!ec) {
        ep = tcp::endpoint(addr, static_cast<unsigned short>(o.port));
    } else {
        tcp::resolver resolver(ioc_);
        auto results = resolver.resolve(o.host, std::to_string(o.port), ec);
        if (ec || results.empty()) {
            return invalid_argument("http: cannot resolve host '" + o.host + "': " + ec.message());
        }
        ep = results.begin()->endpoint();
    }
    std::string where = o.host + ":" + std::to_string(o.port);
    acceptor_.open(ep.protocol(), ec);
    if (ec) return io_error("http: socket for " + where + ": " + ec.message());
    acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    acceptor_.bind(ep, ec);
    if (ec) return io_error("http: bind " + where + ": " + ec.message());
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) return io_error("http: listen " + where + ": " + ec.message());
    port_ = acceptor_.local_endpoint(ec).port();
    do_accept();  // no thread runs yet, so starting it here is not a race
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
                    FERROX_LOG_ERROR("http: I/O thread caught: %s", e.what());
                }
            }
        });
    }
}

void HttpServer::Impl::do_accept() {
    acceptor_.async_accept(asio::make_strand(ioc_), [this](error_code ec, tcp::socket socket) {
        on_accept(ec, std::move(socket));
    });
}

void HttpServer::Impl::on_accept(error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
        // Out of descriptors and the like: back off instead of spinning.
        FERROX_LOG_WARN("http: accept: %s", ec.message().c_str());
        accept_retry_.expires_after(std::chrono::milliseconds(100));
        accept_retry_.async_wait([this](error_code ec2) {
            if (!ec2 && acceptor_.is_open()) do_accept();
        });
        return;
    }
    std::shared_ptr<Connection> conn;
    bool rejected = false;
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        if (!stopping()) {
            rejected = n_counted_ >= static_cast<size_t>(options_.max_connections);
            if (!rejected) ++n_counted_;
            conn = std::make_shared<Connection>(this, std::move(socket), !rejected);
            registry_.emplace(conn.get(), conn);
        }
    }
    if (conn) {
        asio::dispatch(conn->executor(), [conn, rejected] {
            if (rejected) {
                conn->start_rejected();
            } else {
                conn->start();
            }
        });
    }
    do_accept();
}

void HttpServer::Impl::unregister(Connection* conn, bool counted) {
    std::shared_ptr<Connection> ref;  // released after the lock: never the last one anyway
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        auto it = registry_.find(conn);
        if (it == registry_.end()) return;
        ref = std::move(it->second);
        registry_.erase(it);
        if (counted) --n_counted_;
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
        for (auto& conn : conns) asio::post(conn->executor(), [conn, op] { op(*conn); });
    };
    {
        std::lock_guard<std::mutex> lk(registry_mu_);
        stopping_.store(true, std::memory_order_release);  // on_accept checks under this lock
    }
    asio::post(accept_strand_, [this] {
        error_code ignored;
        acceptor_.close(ignored);
        accept_retry_.cancel();
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
        options.max_connections < 1 || options.idle_timeout_s < 1 || options.max_header_bytes < 1 ||
        options.max_header_bytes > (1u << 31)) {
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

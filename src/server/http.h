#pragma once
// The HTTP/1.1 layer of the server: an asynchronous listener (Boost.Asio/Beast, confined to
// http_server.cc) behind ferrox's own request and responder types. Nothing here includes Boost,
// so protocol adapters compile in a second, not ten.
//
// Threading:
// - The HttpHandler runs on an I/O thread and must not block: it parses, hands the work off
//   (engine queue) and returns. I/O threads never run a forward pass.
// - An HttpResponder may be called from any thread. Every call is posted to the connection's
//   strand and returns at once; calls made by one thread are applied in that order.
// - A responder stays valid (shared_ptr) after its connection died or the server was destroyed:
//   calls then do nothing.
//
// Framing: send() answers with Content-Length. start_stream() answers HTTP/1.1 clients with
// Transfer-Encoding: chunked, so that the end of a stream is visible to the client (a truncated
// stream has no terminal chunk) and the connection stays usable after end(); HTTP/1.0 clients
// get the raw body and Connection: close. Each write() becomes one chunk and is flushed at once
// (TCP_NODELAY). HEAD requests get the headers only; writes are then ignored.
//
// Requests: a body comes with Content-Length or "Transfer-Encoding: chunked" (HTTP/1.1 only).
// Any other Transfer-Encoding, or one beside Content-Length, is refused with 400 and the
// connection closed (RFC 9112 6.1: its length cannot be trusted, and guessing it lets a client
// smuggle a second request past a proxy). Trailer fields of a chunked body are dropped.
//
// What the HTTP layer answers by itself, then closing the connection (see HttpServerOptions):
// 400 malformed or unsupported framing, 408 a request that started but did not arrive in time,
// 413 body too large, 431 header (or chunk header, or trailer section) too large, 500 a handler
// that dropped its responder or threw, 503 over a connection cap (with Retry-After: 1). Their
// bodies come from HttpServerOptions::error_body (OpenAI's error shape by default).
//
// Half-close: a client may shut down its sending side (FIN) after its request and still gets the
// whole answer (plain or streamed, and those of requests it pipelined before); the connection
// closes after it. Such a client is not "gone": client_gone() turns true only when the peer
// resets the connection, a write to it fails, or the server closes it. A client that really
// closed is noticed at its reset, or at the latest on the second write after its close (TCP
// answers the first with the reset), so a stream notices within a token or two.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ferrox {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
    std::string method;   // "GET", "POST", any token the client sent
    std::string path;     // the target without the query string, not percent-decoded
    std::string query;    // raw, after '?'; empty if none
    HttpHeaders headers;  // in arrival order; names lowercased, values as sent
    std::string body;     // decoded (Content-Length or chunked)
    std::string remote;   // "ip:port" of the peer

    // The first header of that name, or nullptr. `lowercase_name` must be lowercase.
    const std::string* header(std::string_view lowercase_name) const;
};

// A response in progress. Thread-safe; no call blocks. One response per request: send() once,
// or start_stream() then write()* then end(). Calls out of that order are ignored (and logged).
class HttpResponder {
  public:
    virtual ~HttpResponder() = default;

    // A whole response with Content-Length. extra_headers e.g. {{"Retry-After", "1"}}; headers
    // that carry framing (Content-Length, Transfer-Encoding, Connection) are the server's and
    // are dropped, as are names or values containing CR or LF.
    virtual void send(int status, std::string body, std::string content_type = "application/json",
                      HttpHeaders extra_headers = {}) = 0;

    // Status line and headers of a streamed response (adds Cache-Control: no-cache and
    // X-Accel-Buffering: no). The headers go out at once, before the first write().
    virtual void start_stream(int status, std::string content_type = "text/event-stream",
                              HttpHeaders extra_headers = {}) = 0;
    // One chunk, queued and flushed promptly; empty chunks are ignored. Dropped silently once
    // the client is gone. The caller frames SSE itself (see sse_event()).
    virtual void write(std::string chunk) = 0;
    // Ends the stream (terminal chunk); the connection then serves its next request.
    virtual void end() = 0;

    // True once the peer reset the connection, a write failed, or the server closed the
    // connection (shutdown, a stalled write, after the last response). A half-close (the
    // client's FIN) alone does not count: the answer is still delivered. Never goes back to false.
    virtual bool client_gone() const = 0;
    // `fn` runs once, on an I/O thread, if the client goes away (as client_gone()) before
    // send()/end(), or the server closes the connection (shutdown): use it to cancel the work
    // (post a cancel message; don't block). A later registration replaces an earlier one.
    // Registered after the client already went away, fn runs soon on an I/O thread, or inline on
    // the calling thread once the server has shut down. Never runs if the response was finished
    // first.
    virtual void on_disconnect(std::function<void()> fn) = 0;
    // Bytes handed to send()/write() and not yet written to the socket; 0 once the client is
    // gone. The server buffers without limit: a producer checks this and slows down, or gives
    // up on a client that does not read.
    virtual size_t pending_bytes() const = 0;
};

// Runs on an I/O thread; must not block. Dropping `res` without answering sends a 500 (or
// cuts a started stream short); a handler that throws is treated the same way.
using HttpHandler = std::function<void(HttpRequest&& req, std::shared_ptr<HttpResponder> res)>;

struct HttpServerOptions {
    std::string host = "127.0.0.1";  // an IP address or a name to resolve
    int port = 8080;                 // 0: pick a free port (tests)
    int n_io_threads = 1;
    size_t max_body_bytes = 8 << 20;  // larger -> 413, then close
    // Larger -> 431, then close. Bounds the header section, and each chunk-size line and the
    // trailer section of a chunked body.
    size_t max_header_bytes = 64 << 10;
    // Closes a keep-alive connection idle this long between requests, and a response whose
    // socket write makes no progress this long (a client that stopped reading).
    int idle_timeout_s = 600;
    // A request's header must be complete this long after its first byte arrives, or 408 and
    // close. A new connection that sends nothing this long is closed without an answer (holding
    // idle sockets open is the cheapest way to take every connection slot).
    int header_timeout_s = 10;
    // The whole body must arrive within this long after the header, or 408 and close.
    int body_timeout_s = 60;
    int max_connections = 1024;  // more -> 503 with Retry-After and close
    // More from one client IP address -> 503 with Retry-After and close; 0: no per-client cap.
    // Behind a proxy every client has the proxy's address: raise it or set 0 there.
    int max_connections_per_client = 256;
    // Makes the body of every error the HTTP layer answers by itself (400, 408, 413, 431, 500,
    // 503; sent as application/json). `path` is the request's path when its request line was
    // parsed, else empty. Called on an I/O thread: thread-safe, must not block; if it throws,
    // the default is used. Unset: http_error_json(message, "invalid_request_error" for 4xx,
    // "server_error" for 5xx).
    std::function<std::string(const std::string& path, int status, std::string_view message)>
        error_body;
};

class HttpServer {
  public:
    // Binds and listens, then serves on n_io_threads threads. Fails if the address can't be
    // bound.
    static Expected<std::unique_ptr<HttpServer>> start(const HttpServerOptions& options,
                                                       HttpHandler handler);

    int port() const;  // the bound port (useful with port 0)
    // Connections open now, including those being closed.
    size_t n_connections() const;

    // Stops accepting; idle connections close at once; responses in progress get up to
    // grace_ms to end (their connections close after them), then every socket is closed
    // (on_disconnect runs for unfinished ones) and the I/O threads are joined. Idempotent.
    // Not from an I/O thread (a handler): it waits for them.
    void shutdown(int grace_ms);
    ~HttpServer();  // shutdown(0) if still running

    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    class Impl;

  private:
    explicit HttpServer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// One Server-Sent Events message: an optional "event: <name>" line, then one "data: " line per
// line of `data` (so embedded newlines survive), then the blank line that ends the event.
// `event_name` must not contain a newline.
std::string sse_event(std::string_view data, std::string_view event_name = {});

// The OpenAI-style error body, the default for errors the HTTP layer itself answers (413, 400,
// ...) when HttpServerOptions::error_body is unset:
// {"error":{"message":...,"type":type,"param":null,"code":null}}, the message JSON-escaped.
std::string http_error_json(std::string_view message,
                            std::string_view type = "invalid_request_error");

}  // namespace ferrox

// Fuzz target: raw bytes into the real listener. The real ApiServer runs in-process on
// 127.0.0.1 (port 0) with a tiny random-weight model (testing/tiny_model.h) carrying the GPT-2
// vocabulary, the Qwen3 chat template (reasoning and Hermes tool calls) and the scripted
// stand-in (testing/scripted_model.h) instead of the forward pass, so that every answer is
// short and deterministic. Each input goes down one TCP connection, then a FIN; the reply is
// read until the server closes. Besides crashes, hangs and sanitizer reports it aborts when:
//  - the server neither answers nor closes within 10 s of the FIN;
//  - the reply is not a sequence of HTTP/1.x responses (framing broke: response splitting);
//  - any response has a status >= 500 (nothing a client sends is the server's fault);
//  - a well-formed request afterwards (GET /health; every 16th input also a chat completion)
//    is not answered 200.
//
// Input: byte 0 >= 0x20 (every request line starts so): the bytes are sent as they are.
// Byte 0 < 0x20: the JSON-body mode, faster to mutate: byte 0 picks a route of kJsonRoutes,
// and data[1..] is the body of a well-formed POST to it.
#include "http_fuzz.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/log.h"
#include "engine/model_registry.h"
#include "engine/model_spec.h"
#include "loader/gguf.h"
#include "testing/scripted_model.h"
#include "loader/gguf_writer.h"
#include "testing/tiny_model.h"
#include "server/api_server.h"

#ifndef FERROX_TESTDATA_DIR
#error "FERROX_TESTDATA_DIR must name the shared test data (tests/CMakeLists.txt sets it)"
#endif

namespace ferrox::http_fuzz {

const std::vector<std::string> kJsonRoutes = {
    "/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
    "/v1/messages/count_tokens", "/completion", "/tokenize", "/detokenize", "/apply-template",
};

namespace {

constexpr int kCtx = 2048;  // the tiny model's context_length (its default is 512)

// Scripted answers: a trigger anywhere in the conversation picks the reply (as the e2e tests').
constexpr const char* kScript = R"([
  {"when": "weather", "reply": "<think>The user wants the weather.</think><tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"},
  {"when": "two cities", "reply": "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"},
  {"when": "broken call", "reply": "Let me try. <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": "},
  {"when": "think first", "reply": "<think>Two plus two is four.</think>The answer is 4."},
  {"when": "", "reply": "Scripted default answer, é ü 🦙."}
])";

[[noreturn]] void die(const std::string& what) {
    std::fprintf(stderr, "http_fuzz: %s\n", what.c_str());
    std::abort();
}

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) die("cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// The tiny model's tensors and hyperparameters with the GPT-2 vocabulary's tokenizer.* keys.
Status write_model(const std::string& path) {
    FERROX_ASSIGN_OR_RETURN(auto vocab,
                            GgufFile::open(std::string(FERROX_TESTDATA_DIR) + "/vocab/ggml-vocab-gpt-2.gguf"));
    FERROX_ASSIGN_OR_RETURN(auto tokens, vocab->get_string_array("tokenizer.ggml.tokens"));
    if (!tokens) return vocab->error("no tokenizer.ggml.tokens");
    TinyModelSpec spec;
    spec.n_vocab = static_cast<int>(tokens->size());
    spec.n_embd = 64;
    spec.n_layer = 1;
    spec.n_head = 2;
    spec.n_head_kv = 1;
    spec.head_dim = 32;
    spec.n_ff = 128;
    spec.weight_type = DType::kQ8_0;
    spec.seed = 19;
    const std::vector<uint8_t> image = make_tiny_model(spec);
    FERROX_ASSIGN_OR_RETURN(auto tiny, GgufFile::parse(image.data(), image.size(), "tiny.gguf"));
    GgufWriter w;
    for (const auto& [key, value] : tiny->metadata()) {
        if (key.rfind("tokenizer.", 0) == 0) continue;
        if (key == spec.arch + ".context_length") {
            w.add_u32(key, kCtx);
        } else {
            w.add_value(key, value);
        }
    }
    for (const auto& [key, value] : vocab->metadata()) {
        if (key.rfind("tokenizer.", 0) == 0) w.add_value(key, value);
    }
    for (const TensorView& t : tiny->tensors()) {
        const auto* p = static_cast<const uint8_t*>(t.data);
        w.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                     std::vector<uint8_t>(p, p + t.n_bytes()));
    }
    return w.write_file(path);
}

struct Fixture {
    std::string dir;
    std::shared_ptr<ModelRegistry> registry;
    std::unique_ptr<ApiServer> server;
    int port = 0;
};

Fixture* g_fixture = nullptr;

// At exit, before the statics the server's threads use are destroyed.
void stop_fixture() {
    Fixture* f = g_fixture;
    if (!f) return;
    f->server->shutdown(0);
    f->server.reset();
    f->registry->shutdown();
    std::error_code ec;
    std::filesystem::remove_all(f->dir, ec);
}

Fixture* start_fixture() {
    log_set_level(LogLevel::kError);
    auto* f = new Fixture();
    char dir[] = "/tmp/ferrox-http-fuzz-XXXXXX";
    if (!::mkdtemp(dir)) die("mkdtemp failed");
    f->dir = dir;
    const std::string model_path = f->dir + "/tiny-gpt2.gguf";
    const std::string script_path = f->dir + "/script.json";
    if (Status st = write_model(model_path); !st.is_ok()) die(st.to_string());
    std::ofstream(script_path) << kScript;

    auto defaults = std::make_shared<ModelSpec>();
    defaults->model.n_threads = 1;
    defaults->model.max_ctx = kCtx;
    defaults->engine.n_parallel = 2;
    defaults->engine.n_ctx = kCtx;
    defaults->engine.block_size = 16;
    defaults->engine.max_queue = 16;
    defaults->served.chat_template_override = read_text(std::string(FERROX_TESTDATA_DIR) +
                                                        "/chat_templates/Qwen-Qwen3-0.6B.jinja");
    defaults->test_script = script_path;
    defaults->stand_in = scripted_stand_in;
    RegistryOptions ro;
    ro.defaults = defaults;
    f->registry = std::make_shared<ModelRegistry>(ro);

    ApiServerOptions so;
    so.http.host = "127.0.0.1";
    so.http.port = 0;
    so.http.header_timeout_s = 2;
    so.http.body_timeout_s = 2;
    so.http.idle_timeout_s = 5;
    so.http.max_body_bytes = 1 << 20;
    so.http.max_header_bytes = 16 << 10;
    so.cors_origins = {"*"};
    so.default_max_tokens = 64;
    so.max_tokens_limit = 64;
    so.request_timeout_s = 5;
    so.responses_max_bytes = 8 << 20;
    auto server = ApiServer::start(so, f->registry);
    if (!server.has_value()) die(server.status().to_string());
    f->server = std::move(*server);
    f->port = f->server->port();
    LoadRequest lr;
    lr.path = model_path;
    lr.alias = "tiny";
    if (Status st = f->registry->load(lr, /*replace=*/false); !st.is_ok()) die(st.to_string());
    g_fixture = f;
    std::atexit(stop_fixture);
    return f;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
            return false;
        }
    }
    return true;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

// Splits `s` into responses; false when it is not HTTP/1.x. A body cut short at the end (a
// stream the server ended early) still counts as parsed; a cut status line or header does not.
bool parse_responses(std::string_view s, std::vector<int>* statuses) {
    while (!s.empty()) {
        if (s.size() < 12 || s.substr(0, 7) != "HTTP/1." || s[8] != ' ') return false;
        int status = 0;
        for (size_t i = 9; i < 12; ++i) {
            if (s[i] < '0' || s[i] > '9') return false;
            status = status * 10 + (s[i] - '0');
        }
        statuses->push_back(status);
        const size_t head_end = s.find("\r\n\r\n");
        if (head_end == std::string_view::npos) return false;
        bool chunked = false;
        long long content_length = -1;
        size_t pos = s.find("\r\n") + 2;
        while (pos < head_end + 2) {
            const size_t eol = s.find("\r\n", pos);
            std::string_view line = s.substr(pos, eol - pos);
            pos = eol + 2;
            const size_t colon = line.find(':');
            if (colon == std::string_view::npos) return false;
            std::string_view name = line.substr(0, colon), value = trim(line.substr(colon + 1));
            if (iequals(name, "transfer-encoding")) chunked = iequals(value, "chunked");
            if (iequals(name, "content-length")) content_length = std::atoll(std::string(value).c_str());
        }
        s.remove_prefix(head_end + 4);
        if (status / 100 == 1 || status == 204 || status == 304 || s.substr(0, 7) == "HTTP/1.") {
            continue;  // no body (or a HEAD request's answer: headers only)
        }
        if (chunked) {
            while (true) {
                const size_t eol = s.find("\r\n");
                if (eol == std::string_view::npos) return true;  // cut short
                const unsigned long long n = std::strtoull(std::string(s.substr(0, eol)).c_str(), nullptr, 16);
                s.remove_prefix(eol + 2);
                if (n == 0) {
                    const size_t end = s.find("\r\n");  // the (empty) trailer section
                    if (end == std::string_view::npos) return true;
                    s.remove_prefix(end + 2);
                    break;
                }
                if (s.size() < n + 2) return true;
                s.remove_prefix(n + 2);
            }
        } else if (content_length >= 0) {
            if (s.size() < static_cast<size_t>(content_length)) return true;
            s.remove_prefix(static_cast<size_t>(content_length));
        } else {
            return true;  // the body runs to the close
        }
    }
    return true;
}

std::string printable(std::string_view s, size_t max = 300) {
    std::string out;
    for (size_t i = 0; i < s.size() && i < max; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c == '\r') {
            out += "\\r";
        } else if (c == '\n') {
            out += "\\n";
        } else if (c < 0x20 || c >= 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    if (s.size() > max) out += "...";
    return out;
}

}  // namespace

int port() {
    static Fixture* f = start_fixture();
    return f->port;
}

Exchange exchange(std::string_view request, int timeout_ms) {
    Exchange ex;
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        die(std::string("cannot connect to the server: ") + std::strerror(errno));
    }
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    size_t n_sent = 0;
    bool fin_sent = false;
    while (true) {
        if (n_sent == request.size() && !fin_sent) {
            ::shutdown(fd, SHUT_WR);
            fin_sent = true;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) break;
        pollfd p{fd, static_cast<short>(POLLIN | (fin_sent ? 0 : POLLOUT)), 0};
        if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
        if (p.revents & POLLOUT) {
            const ssize_t n = ::send(fd, request.data() + n_sent, request.size() - n_sent, MSG_NOSIGNAL);
            if (n > 0) {
                n_sent += static_cast<size_t>(n);
            } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
                n_sent = request.size();  // the server closed: read what it said
            }
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[16384];
            const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
            if (n > 0) {
                ex.reply.append(buf, static_cast<size_t>(n));
            } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
                ex.closed = true;  // FIN, or a reset
                break;
            }
        }
    }
    // An abortive close: no TIME_WAIT, so a long fuzzing run never runs out of local ports.
    linger lg{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    ::close(fd);
    ex.parsed = parse_responses(ex.reply, &ex.statuses);
    return ex;
}

std::string request_for(const uint8_t* data, size_t size) {
    if (size == 0 || data[0] >= 0x20) return std::string(reinterpret_cast<const char*>(data), size);
    const std::string& route = kJsonRoutes[data[0] % kJsonRoutes.size()];
    return "POST " + route + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
           "Connection: close\r\nContent-Length: " + std::to_string(size - 1) + "\r\n\r\n" +
           std::string(reinterpret_cast<const char*>(data) + 1, size - 1);
}

}  // namespace ferrox::http_fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace ferrox::http_fuzz;
    static uint64_t n_inputs = 0;
    const std::string request = request_for(data, size);
    const Exchange ex = exchange(request);
    if (!ex.closed) die("the server neither answered nor closed within 10 s of the FIN");
    if (!ex.parsed) die("the reply is not HTTP/1.x responses: " + printable(ex.reply));
    for (int status : ex.statuses) {
        if (status >= 500) {
            die("answered " + std::to_string(status) + " to: " + printable(request) +
                "\nreply: " + printable(ex.reply, 2000));
        }
    }
    const Exchange health = exchange("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    if (health.statuses.empty() || health.statuses[0] != 200) {
        die("GET /health afterwards got: " + printable(health.reply));
    }
    if (++n_inputs % 16 == 0) {
        const std::string body = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4})";
        const Exchange chat = exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                       "Content-Type: application/json\r\nContent-Length: " +
                                       std::to_string(body.size()) + "\r\n\r\n" + body);
        if (chat.statuses.empty() || chat.statuses[0] != 200) {
            die("a chat completion afterwards got: " + printable(chat.reply));
        }
    }
    return 0;
}

// llama-server's POST /slots/{id}?action=save|restore|erase (with --slot-save-path DIR).
//
// ferrox's slots own no KV (slots.h): a slot is the board's view of the request it ran last,
// and with --slot-save-path the board keeps that request's tokens. save writes them to
// DIR/filename (slots.h: slot_file_encode; the file holds tokens, not KV bytes); restore reads
// them back and submits them as a prompt-only request (max_tokens 0), so the prefix cache holds
// their KV again, taken from wherever it still has their blocks (the pool, the --cache-ram tier,
// --cache-dir) and computed for the rest; the slot then shows them. A later request that starts
// with those tokens reuses their KV, as after llama-server's restore (whole KV blocks only: the
// prefix cache shares blocks of kv_block_size tokens). erase makes the slot forget its tokens;
// their KV blocks stay in the shared prefix cache, where other requests may be using them.
//
// Threading: the handler runs on a worker; restore answers from the engine's event callback,
// which only builds a small object and queues the response.

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "core/mmap_file.h"
#include "server/context.h"
#include "server/json_body.h"
#include "server/json_util.h"
#include "server/llamacpp/llamacpp.h"
#include "server/llamacpp/slots.h"
#include "server/router.h"

namespace ferrox {
namespace {

// llama.cpp's fs_validate_filename, a little stricter: a plain name inside the directory.
bool valid_slot_filename(const std::string& name) {
    if (name.empty() || name.size() > 255 || name.front() == '.' || name.front() == ' ' || name.back() == ' ') {
        return false;
    }
    for (unsigned char c : name) {
        if (c < 0x20 || c == 0x7f) return false;
        if (std::string_view("/\\:*?\"<>|").find(static_cast<char>(c)) != std::string_view::npos) return false;
    }
    return true;
}

ApiError slot_error(int status, std::string type, std::string message) {
    ApiError e;
    e.status = status;
    e.type = std::move(type);
    e.message = std::move(message);
    return e;
}

// The slot id of the path, or -1 when it is not a plain decimal integer.
int parse_slot_id(const std::string& s) {
    if (s.empty() || s.size() > 9) return -1;
    int v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return -1;
        v = v * 10 + (c - '0');
    }
    return v;
}

// Writes `bytes` to `path` by a temporary name and a rename, so a reader sees the whole file
// or the previous one.
Status write_whole(const std::string& path, const std::string& bytes) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) return io_error("cannot write " + tmp);
        f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        if (!f) return io_error("cannot write " + tmp);
    }
    std::error_code ec;
    std::filesystem::rename(tmp, path, ec);
    if (ec) {
        std::filesystem::remove(tmp, ec);
        return io_error("cannot write " + path);
    }
    return Status::ok();
}

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void route_slot_action(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    if (ctx.opts.slot_save_path.empty() || !ctx.slots) {
        return fail(slot_error(501, "not_supported_error",
                               "This server does not support slots action. Start it with `--slot-save-path`"));
    }
    const int id = parse_slot_id(req.params.empty() ? "" : req.params[0]);
    if (id < 0) return fail(slot_error(400, "invalid_request_error", "Invalid slot ID"));
    const std::string action = query_param(req.http.query, "action");
    if (action != "save" && action != "restore" && action != "erase") {
        return fail(slot_error(400, "invalid_request_error", "Invalid action"));
    }
    ModelLease m;
    ApiError err;
    if (!ctx.acquire(query_param(req.http.query, "model"), &m, &err, ModelUse::kGenerate)) return fail(err);
    const ModelInfo& info = m->info();
    const int n_parallel = std::max(1, info.n_parallel);
    if (id >= n_parallel) return fail(slot_error(400, "invalid_request_error", "Invalid slot ID"));

    if (action == "erase") {
        auto n = ctx.slots->erase(info.id, n_parallel, id);
        if (!n.has_value()) return fail(from_status(n.status()));
        return res->send(200, dump(json{{"id_slot", id}, {"n_erased", *n}}));
    }

    // save and restore name a file: {"filename": "..."}.
    const std::string& text = req.http.body;
    if (json_nesting_depth(text) > kMaxJsonDepth) return fail(bad_param("", "the body nests too deeply"));
    const json body = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!body.is_object()) return fail(bad_param("", "the body must be a JSON object with \"filename\""));
    const auto fn = body.find("filename");
    if (fn == body.end() || !fn->is_string()) return fail(bad_param("filename", "\"filename\" must be a string"));
    const std::string filename = fn->get<std::string>();
    if (!valid_slot_filename(filename)) return fail(slot_error(400, "invalid_request_error", "Invalid filename"));
    const std::string path = (std::filesystem::path(ctx.opts.slot_save_path) / filename).string();
    const auto t0 = std::chrono::steady_clock::now();

    if (action == "save") {
        auto tokens = ctx.slots->slot_tokens(info.id, n_parallel, id);
        if (!tokens.has_value()) return fail(from_status(tokens.status()));
        const std::string bytes = slot_file_encode(info.n_vocab, *tokens);
        if (Status st = write_whole(path, bytes); !st.is_ok()) {
            return fail(slot_error(500, "server_error", "Unable to save slot: " + st.message()));
        }
        return res->send(200, dump(json{{"id_slot", id},
                                        {"filename", filename},
                                        {"n_saved", tokens->size()},
                                        {"n_written", bytes.size()},
                                        {"timings", {{"save_ms", ms_since(t0)}}}}));
    }

    // restore: a file no larger than a whole context's tokens, of this model's vocabulary.
    auto restore_error = [&](const std::string& why) {
        fail(slot_error(400, "invalid_request_error", "Unable to restore slot: " + why));
    };
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path, ec);
    if (ec) return restore_error("no slot file " + filename);
    if (size > 16 + 4 * static_cast<uintmax_t>(info.n_ctx)) return restore_error("the saved tokens do not fit the context");
    auto bytes = read_file(path);
    if (!bytes.has_value()) return restore_error(bytes.status().message());
    auto tokens = slot_file_decode(*bytes, info.n_vocab);
    if (!tokens.has_value()) return restore_error(tokens.status().message());
    if (static_cast<int>(tokens->size()) > info.n_ctx) return restore_error("the saved tokens do not fit the context");
    // Refuse a busy slot before computing anything (checked again when the KV is back).
    if (auto busy = ctx.slots->slot_tokens(info.id, n_parallel, id); !busy.has_value()) {
        return fail(from_status(busy.status()));
    }
    const size_t n_read = bytes->size();
    auto answer = [ctx_slots = ctx.slots, model = info.id, n_parallel, id, filename, n_read, t0, res](
                      std::vector<int32_t> restored) {
        const size_t n = restored.size();
        if (Status st = ctx_slots->restore(model, n_parallel, id, std::move(restored)); !st.is_ok()) {
            return Router::send_error(*res, Protocol::kLlamaCpp, from_status(st));
        }
        res->send(200, dump(json{{"id_slot", id},
                                 {"filename", filename},
                                 {"n_restored", n},
                                 {"n_read", n_read},
                                 {"timings", {{"restore_ms", ms_since(t0)}}}}));
    };
    if (tokens->empty()) return answer({});
    GenerationParams params;
    params.max_tokens = 0;  // only the prompt: its KV goes into the prefix cache
    auto restored = std::make_shared<std::vector<int32_t>>(*tokens);
    auto handle = m->submit(std::move(*tokens), params, [m, restored, answer, res](EngineEvent&& ev) {
        if (ev.kind != EngineEvent::Kind::kDone) return;
        if (ev.finish == FinishReason::kError) {
            return Router::send_error(*res, Protocol::kLlamaCpp, from_status(ev.error));
        }
        answer(std::move(*restored));
    });
    if (!handle.has_value()) return fail(from_status(handle.status()));
}

}  // namespace

void add_slot_action_route(Router& router, ServerContext& ctx) {
    if (ctx.slots && !ctx.opts.slot_save_path.empty()) ctx.slots->keep_tokens(true);
    router.add({.method = "POST",
                .path = "/slots/{id}",
                .protocol = Protocol::kLlamaCpp,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    route_slot_action(ctx, req, std::move(res));
                }});
}

}  // namespace ferrox

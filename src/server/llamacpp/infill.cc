// llama.cpp's POST /infill: fill-in-the-middle for code editors (llama.vim, llama.vscode).
// input_prefix and input_suffix (strings, or token ids mixed with strings), input_extra (other
// files' chunks, [{filename, text}]) and an optional prompt (the start of the middle) become
// llama-server's repo-level FIM prompt:
//
//   [FIM_REP]myproject\n [FIM_SEP]name\n text ... [FIM_SEP]filename\n
//   [BOS] [FIM_PRE] prefix prompt [FIM_SUF] suffix [FIM_MID]
//
// cut as llama-server cuts it (prefix : suffix = 3 : 1 of a 2048-token batch, the extra
// context's tail in what the context leaves), then answered exactly as /completion is: every
// other field (n_predict, sampling, stream, n_probs, ...) is /completion's.
#include <algorithm>

#include "server/context.h"
#include "server/llamacpp/llamacpp.h"
#include "server/request_fields.h"
#include "server/router.h"

namespace ferrox {

void run_completion(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res);

namespace {

// llama-server's default logical batch: the FIM prompt's prefix and suffix are cut to fit it.
constexpr int kFimBatch = 2048;

struct FimTokens {
    int32_t pre = -1, suf = -1, mid = -1, rep = -1, sep = -1;
};

// The id of a vocabulary token whose text is one of `texts` (the first found), or -1: the
// texts llama.cpp's vocabulary loader recognizes for each FIM role.
int32_t find_token(const ServedModel& m, std::initializer_list<const char*> texts) {
    for (const char* t : texts) {
        const std::vector<int32_t> ids = m.tokenize(t, false, true);
        if (ids.size() == 1 && m.token_piece(ids[0], true) == t) return ids[0];
    }
    return -1;
}

FimTokens fim_tokens(const ServedModel& m) {
    FimTokens f;
    f.pre = find_token(m, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>",
                           "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"});
    f.suf = find_token(m, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>",
                           "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"});
    f.mid = find_token(m, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>",
                           "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"});
    f.rep = find_token(m, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
    f.sep = find_token(m, {"<|file_sep|>"});
    return f;
}

// A string (tokenized without special tokens, as llama-server does for FIM inputs) or an
// array of token ids and strings.
bool read_fim_text(const json& v, const std::string& param, const ServedModel& m, std::vector<int32_t>* out,
                   ApiError* err) {
    if (v.is_string()) {
        *out = m.tokenize(v.get<std::string>(), false, false);
        return true;
    }
    if (v.is_array()) {
        for (size_t i = 0; i < v.size(); ++i) {
            const json& e = v[i];
            const std::string where = param + "[" + std::to_string(i) + "]";
            if (e.is_string()) {
                const auto ids = m.tokenize(e.get<std::string>(), false, false);
                out->insert(out->end(), ids.begin(), ids.end());
            } else if (!read_token_ids(json::array({e}), where, m, out, err)) {
                return false;
            }
        }
        return true;
    }
    *err = bad_param(param, "\"" + param + "\" must be a string or an array of token ids and strings");
    return false;
}

void route_infill(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    json& body = req.body;
    const Fields f{body, ""};
    ApiError err;
    auto fail = [&](const ApiError& e) { Router::send_error(*res, Protocol::kLlamaCpp, e); };
    std::string model_name;
    ModelLease m;
    if (!f.string("model", &model_name, &err) || !ctx.acquire(model_name, &m, &err)) return fail(err);
    const FimTokens fim = fim_tokens(*m);
    std::string missing;
    if (fim.pre < 0) missing += "prefix token is missing. ";
    if (fim.suf < 0) missing += "suffix token is missing. ";
    if (fim.mid < 0) missing += "middle token is missing. ";
    if (!missing.empty()) {
        ApiError e;
        e.status = 501;
        e.type = "not_supported_error";
        e.message = "Infill is not supported by this model: " + missing;
        return fail(e);
    }
    const json* prompt = f.find("prompt");
    if (prompt && !prompt->is_string()) return fail(bad_param("prompt", "\"prompt\" must be a string"));
    const json* prefix = f.find("input_prefix");
    const json* suffix = f.find("input_suffix");
    if (!prefix) return fail(bad_param("input_prefix", "\"input_prefix\" is required"));
    if (!suffix) return fail(bad_param("input_suffix", "\"input_suffix\" is required"));
    const json* extra = f.find("input_extra");
    if (extra && !extra->is_array()) {
        return fail(bad_param("input_extra",
                              "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}"));
    }
    int64_t n_predict = ctx.opts.default_max_tokens;
    if (!f.integer("n_predict", -1, 1 << 24, &n_predict, &err)) return fail(err);

    std::vector<int32_t> tok_prefix, tok_suffix;
    if (!read_fim_text(*prefix, "input_prefix", *m, &tok_prefix, &err) ||
        !read_fim_text(*suffix, "input_suffix", *m, &tok_suffix, &err))
        return fail(err);
    const std::vector<int32_t> tok_prompt =
        prompt ? m->tokenize(prompt->get<std::string>(), false, true) : std::vector<int32_t>{};
    auto append = [&](std::vector<int32_t>* v, const std::string& text) {
        const auto ids = m->tokenize(text, false, false);
        v->insert(v->end(), ids.begin(), ids.end());
    };
    std::vector<int32_t> tok_extra;
    if (fim.rep >= 0) {
        tok_extra.push_back(fim.rep);
        append(&tok_extra, "myproject\n");
    }
    if (extra) {
        for (size_t i = 0; i < extra->size(); ++i) {
            const json& chunk = (*extra)[i];
            const json* text = chunk.is_object() && chunk.contains("text") ? &chunk["text"] : nullptr;
            if (!text || !text->is_string()) {
                return fail(bad_param("input_extra[" + std::to_string(i) + "]",
                                      "extra_context chunk must contain a \"text\" field with a string value"));
            }
            std::string filename = "tmp";
            if (chunk.contains("filename")) {
                if (!chunk["filename"].is_string()) {
                    return fail(bad_param("input_extra[" + std::to_string(i) + "]",
                                          "extra_context chunk's \"filename\" field must be a string"));
                }
                filename = chunk["filename"].get<std::string>();
            }
            if (fim.sep >= 0) {
                tok_extra.push_back(fim.sep);
                append(&tok_extra, filename + "\n");
            } else {
                append(&tok_extra, "\n\n--- snippet ---\n\n");
            }
            append(&tok_extra, text->get<std::string>());
        }
    }
    if (fim.sep >= 0) {
        tok_extra.push_back(fim.sep);
        append(&tok_extra, "filename\n");
    }
    // llama-server's cut: the prefix's last 3/4 of a batch, the suffix's first quarter less the
    // prompt and the two FIM tokens, the extra context's tail in what the context leaves.
    const int n_prefix = std::min<int>(static_cast<int>(tok_prefix.size()), 3 * (kFimBatch / 4));
    const int n_suffix = std::min<int>(static_cast<int>(tok_suffix.size()),
                                       std::max<int>(0, kFimBatch / 4 - (2 + static_cast<int>(tok_prompt.size()))));
    const int n_extra = std::min<int>(std::max<int>(0, m->info().n_ctx - kFimBatch - 2 * static_cast<int>(n_predict)),
                                      static_cast<int>(tok_extra.size()));
    std::vector<int32_t> ids(tok_extra.end() - n_extra, tok_extra.end());
    const std::vector<int32_t> bos = m->tokenize("", true, false);  // [BOS] when the vocabulary adds one
    ids.insert(ids.end(), bos.begin(), bos.end());
    ids.push_back(fim.pre);
    ids.insert(ids.end(), tok_prefix.end() - n_prefix, tok_prefix.end());
    ids.insert(ids.end(), tok_prompt.begin(), tok_prompt.end());
    ids.push_back(fim.suf);
    ids.insert(ids.end(), tok_suffix.begin(), tok_suffix.begin() + n_suffix);
    ids.push_back(fim.mid);
    body["prompt"] = ids;
    run_completion(ctx, req, std::move(res));
}

}  // namespace

void add_infill_route(Router& router, ServerContext& ctx) {
    router.add({.method = "POST",
                .path = "/infill",
                .protocol = Protocol::kLlamaCpp,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) { route_infill(ctx, req, std::move(res)); },
                .json_body = true});
}

}  // namespace ferrox

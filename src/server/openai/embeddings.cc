// Embeddings: OpenAI's POST /v1/embeddings (and /embeddings) and llama.cpp's POST /embedding,
// on one path: the inputs are read and tokenized on the worker, checked against the model's
// longest input (a 400 with the numbers, or cut when truncate_prompt_tokens asks), embedded by
// the model's embedder (which batches concurrent requests into one forward), and answered in
// the route's shape. The answer is built on the embedder's thread and sent from there (a
// responder may be called from any thread), so nothing waits on a worker.
//
// Token-id inputs are embedded as given (no [CLS]/[SEP] added), as vLLM and llama.cpp do.
// truncate_prompt_tokens = k keeps the first k tokens of an input, or, for text whose
// tokenization ends with a special token ([SEP]), the first k - 1 and that token, as
// sentence-transformers truncates; -1 means the model's maximum.
#include <charconv>
#include <cmath>

#include "server/context.h"
#include "server/openai/openai.h"
#include "server/request_fields.h"
#include "server/router.h"

namespace ferrox {

namespace {

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

struct EmbedJob {
    ModelLease model;
    std::vector<std::vector<int32_t>> inputs;
    bool base64 = false;
    int dimensions = 0;  // 0: the model's
    int64_t n_tokens = 0;
};

// The `input` of OpenAI (or `content` of llama.cpp): a string, strings, token ids, or lists of
// token ids. Text is tokenized with the model's specials ([CLS] ... [SEP]), and special tokens
// written in the text are matched, as HF tokenizers (and so sentence-transformers) do.
bool read_inputs(const json& v, const std::string& param, EmbedJob* job, int64_t truncate, ApiError* err) {
    const ServedModel& m = *job->model;
    const std::vector<int32_t> empty_ids = m.tokenize("", true, false);
    auto add_text = [&](const std::string& text) {
        std::vector<int32_t> ids = m.tokenize(text, /*add_special=*/true, /*parse_special=*/true);
        if (truncate > 0 && static_cast<int64_t>(ids.size()) > truncate) {
            const bool keep_last = !empty_ids.empty() && ids.back() == empty_ids.back() && truncate >= 2;
            const int32_t last = ids.back();
            ids.resize(static_cast<size_t>(keep_last ? truncate - 1 : truncate));
            if (keep_last) ids.push_back(last);
        }
        job->inputs.push_back(std::move(ids));
    };
    auto add_ids = [&](const json& arr, const std::string& where) {
        std::vector<int32_t> ids;
        if (!read_token_ids(arr, where, m, &ids, err)) return false;
        if (ids.empty()) {
            *err = bad_param(where, "'" + where + "' is an empty list of token ids.");
            return false;
        }
        if (truncate > 0 && static_cast<int64_t>(ids.size()) > truncate) ids.resize(static_cast<size_t>(truncate));
        job->inputs.push_back(std::move(ids));
        return true;
    };
    if (v.is_string()) {
        add_text(v.get<std::string>());
        return true;
    }
    if (!v.is_array()) {
        *err = wrong_type(param, "a string, an array of strings or an array of token ids", v);
        return false;
    }
    if (v.empty()) {
        *err = bad_param(param, "'" + param + "' must not be empty.");
        return false;
    }
    if (v.size() > kMaxInputs) {
        *err = bad_param(param, "'" + param + "' holds " + std::to_string(v.size()) + " inputs; at most " +
                                    std::to_string(kMaxInputs) + " are allowed.");
        return false;
    }
    if (v[0].is_number()) return add_ids(v, param);  // one input of token ids
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string where = param + "[" + std::to_string(i) + "]";
        if (v[i].is_string()) {
            add_text(v[i].get<std::string>());
        } else if (v[i].is_array()) {
            if (!add_ids(v[i], where)) return false;
        } else {
            *err = wrong_type(where, "a string or an array of token ids", v[i]);
            return false;
        }
    }
    return true;
}

// What both routes read: model, input, truncate_prompt_tokens, dimensions; the length check.
bool read_job(ServerContext& ctx, const Fields& f, const char* input_key, EmbedJob* job, ApiError* err) {
    std::string name;
    if (!f.string("model", &name, err) || !ctx.acquire(name, &job->model, err, ModelUse::kEmbed)) return false;
    const ModelInfo& info = job->model->info();
    int64_t truncate = 0;
    if (!f.integer("truncate_prompt_tokens", -1, INT32_MAX, &truncate, err)) return false;
    if (truncate == -1 || truncate > info.n_ctx) truncate = info.n_ctx;
    if (f.find("truncate_prompt_tokens") && truncate == 0) {
        *err = bad_param("truncate_prompt_tokens", "'truncate_prompt_tokens' must be -1 or at least 1.");
        return false;
    }
    int64_t dims = 0;
    if (!f.integer("dimensions", 1, INT32_MAX, &dims, err)) return false;
    if (dims > 0 && dims != info.n_embd) {
        if (!info.matryoshka || dims > info.n_embd) {
            *err = bad_param("dimensions", "The model '" + info.id + "' gives vectors of " +
                                               std::to_string(info.n_embd) + " dimensions" +
                                               (info.matryoshka ? " (at most)." : " and does not support other sizes (it is not a Matryoshka model)."));
            return false;
        }
        job->dimensions = static_cast<int>(dims);
    }
    const json* in = f.find(input_key);
    if (!in) {
        *err = bad_param(input_key, std::string("'") + input_key + "' is required.");
        return false;
    }
    if (!read_inputs(*in, input_key, job, truncate, err)) return false;
    for (size_t i = 0; i < job->inputs.size(); ++i) {
        const size_t n = job->inputs[i].size();
        if (static_cast<int64_t>(n) > info.n_ctx) {
            *err = bad_param(input_key, "This model's maximum context length is " + std::to_string(info.n_ctx) +
                                            " tokens, however you requested " + std::to_string(n) + " tokens in " +
                                            input_key + "[" + std::to_string(i) +
                                            "]. Shorten it, or give truncate_prompt_tokens to cut it.");
            err->code = "context_length_exceeded";
            return false;
        }
        job->n_tokens += static_cast<int64_t>(n);
    }
    return true;
}

// Vector i of `all` (n_embd wide), cut to `dims` and renormalized when asked.
std::span<float> vector_of(std::vector<float>& all, size_t i, int n_embd, int dims, bool normalize) {
    std::span<float> v(all.data() + i * n_embd, static_cast<size_t>(dims > 0 ? dims : n_embd));
    if (dims > 0 && dims < n_embd && normalize) {
        double ss = 0;
        for (float x : v) ss += static_cast<double>(x) * x;
        const float inv = static_cast<float>(1.0 / std::max(std::sqrt(ss), 1e-12));
        for (float& x : v) x *= inv;
    }
    return v;
}

// Shortest round-trip text of each float (std::to_chars), e.g. [0.0123,-0.5].
void append_floats(std::string& out, std::span<const float> v) {
    out += '[';
    char buf[32];
    for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ',';
        const float x = std::isfinite(v[i]) ? v[i] : 0.0f;
        out.append(buf, std::to_chars(buf, buf + sizeof buf, x).ptr);
    }
    out += ']';
}

// Little-endian float32 bytes, base64 (what the openai SDK decodes).
void append_base64(std::string& out, std::span<const float> v) {
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());  // x86-64 / aarch64: little-endian
    const size_t n = v.size() * sizeof(float);
    out += '"';
    for (size_t i = 0; i < n; i += 3) {
        const uint32_t b = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out += kAlphabet[(b >> 18) & 63];
        out += kAlphabet[(b >> 12) & 63];
        out += i + 1 < n ? kAlphabet[(b >> 6) & 63] : '=';
        out += i + 2 < n ? kAlphabet[b & 63] : '=';
    }
    out += '"';
}

void submit(std::shared_ptr<EmbedJob> job, std::shared_ptr<HttpResponder> res, Protocol protocol,
            std::function<std::string(EmbedJob&, std::vector<float>&)> render) {
    ModelLease model = job->model;
    Status st = model->embed(std::move(job->inputs), [job, res, protocol, render](Status s, std::vector<float> v) {
        if (!s.is_ok()) return Router::send_error(*res, protocol, from_status(s));
        res->send(200, render(*job, v));
    });
    if (!st.is_ok()) Router::send_error(*res, protocol, from_status(st));
}

void route_openai(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    auto job = std::make_shared<EmbedJob>();
    std::string format = "float", user;
    if (!read_job(ctx, f, "input", job.get(), &err) || !f.string("encoding_format", &format, &err) ||
        !f.string("user", &user, &err)) {
        return Router::send_error(*res, Protocol::kOpenAI, err);
    }
    if (format != "float" && format != "base64") {
        return Router::send_error(*res, Protocol::kOpenAI,
                                  bad_param("encoding_format", "'encoding_format' must be 'float' or 'base64'."));
    }
    job->base64 = format == "base64";
    const size_t n_inputs = job->inputs.size();
    submit(job, res, Protocol::kOpenAI, [n_inputs](EmbedJob& j, std::vector<float>& all) {
        const ModelInfo& info = j.model->info();
        std::string out = "{\"object\":\"list\",\"data\":[";
        for (size_t i = 0; i < n_inputs; ++i) {
            if (i) out += ',';
            out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
            const auto v = vector_of(all, i, info.n_embd, j.dimensions, info.normalize);
            j.base64 ? append_base64(out, v) : append_floats(out, v);
            out += '}';
        }
        out += "],\"model\":" + dump(json(info.id)) + ",\"usage\":{\"prompt_tokens\":" + std::to_string(j.n_tokens) +
               ",\"total_tokens\":" + std::to_string(j.n_tokens) + "}}";
        return out;
    });
}

// llama.cpp's /embedding: {"content": ...} (or "input"), answered as
// [{"index": i, "embedding": [[...]]}, ...] (one pooled vector per input, wrapped as llama-server
// wraps it). Its embd_normalize other than 2 (euclidean, the default) is not offered.
void route_llamacpp(ServerContext& ctx, RouteRequest& req, std::shared_ptr<HttpResponder> res) {
    const Fields f{req.body, ""};
    ApiError err;
    auto job = std::make_shared<EmbedJob>();
    const char* key = f.find("content") ? "content" : "input";
    int64_t norm = 2;
    if (!f.integer("embd_normalize", -1, 1000, &norm, &err) || !read_job(ctx, f, key, job.get(), &err)) {
        return Router::send_error(*res, Protocol::kLlamaCpp, err);
    }
    if (norm != 2 || !job->model->info().normalize) {
        return Router::send_error(*res, Protocol::kLlamaCpp,
                                  bad_param("embd_normalize", "Only embd_normalize 2 (euclidean) is supported, with a "
                                                              "model whose vectors are normalized."));
    }
    const size_t n_inputs = job->inputs.size();
    submit(job, res, Protocol::kLlamaCpp, [n_inputs](EmbedJob& j, std::vector<float>& all) {
        const ModelInfo& info = j.model->info();
        std::string out = "[";
        for (size_t i = 0; i < n_inputs; ++i) {
            if (i) out += ',';
            out += "{\"index\":" + std::to_string(i) + ",\"embedding\":[";
            append_floats(out, vector_of(all, i, info.n_embd, 0, info.normalize));
            out += "]}";
        }
        return out + "]";
    });
}

}  // namespace

void add_embeddings_routes(Router& router, ServerContext& ctx) {
    for (const char* path : {"/v1/embeddings", "/embeddings"}) {
        router.add({.method = "POST",
                    .path = path,
                    .protocol = Protocol::kOpenAI,
                    .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                        route_openai(ctx, req, std::move(res));
                    },
                    .json_body = true});
    }
    router.add({.method = "POST",
                .path = "/embedding",
                .protocol = Protocol::kLlamaCpp,
                .fn = [&ctx](RouteRequest& req, std::shared_ptr<HttpResponder> res) {
                    route_llamacpp(ctx, req, std::move(res));
                },
                .json_body = true});
}

}  // namespace ferrox

#include "server/responder.h"

#include "server/json_util.h"

namespace ferrox {

std::unique_ptr<AccessLog> AccessLog::open(const std::string& path, std::string* error) {
    if (path == "-") return std::unique_ptr<AccessLog>(new AccessLog(stderr, false));
    std::FILE* f = std::fopen(path.c_str(), "a");
    if (!f) {
        *error = path + ": cannot open the access log for appending";
        return nullptr;
    }
    return std::unique_ptr<AccessLog>(new AccessLog(f, true));
}

AccessLog::~AccessLog() {
    if (owned_) std::fclose(f_);
}

void AccessLog::write(const std::string& line) {
    std::lock_guard<std::mutex> lk(mu_);
    std::fwrite(line.data(), 1, line.size(), f_);
    std::fputc('\n', f_);
    std::fflush(f_);
}

ObservedResponder::ObservedResponder(std::shared_ptr<HttpResponder> inner, HttpHeaders cors, AccessLog* log,
                                     const HttpRequest& req, std::shared_ptr<AccessRecord> record)
    : inner_(std::move(inner)), cors_(std::move(cors)), log_(log), method_(req.method), path_(req.path),
      remote_(req.remote), record_(std::move(record)), t_start_(std::chrono::steady_clock::now()) {}

ObservedResponder::~ObservedResponder() { finish(); }

void ObservedResponder::send(int status, std::string body, std::string content_type, HttpHeaders extra) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (status_ == 0) status_ = status;
    }
    extra.insert(extra.end(), cors_.begin(), cors_.end());
    inner_->send(status, std::move(body), std::move(content_type), std::move(extra));
    {
        std::lock_guard<std::mutex> lk(mu_);
        ended_ = true;
    }
    finish();
}

void ObservedResponder::start_stream(int status, std::string content_type, HttpHeaders extra) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (status_ == 0) status_ = status;
    }
    extra.insert(extra.end(), cors_.begin(), cors_.end());
    inner_->start_stream(status, std::move(content_type), std::move(extra));
}

void ObservedResponder::end() {
    const bool gone = inner_->client_gone();  // a stream cut short before its end
    inner_->end();
    {
        std::lock_guard<std::mutex> lk(mu_);
        ended_ = !gone;
    }
    finish();
}

void ObservedResponder::on_disconnect(std::function<void()> fn) {
    std::weak_ptr<ObservedResponder> weak = weak_from_this();
    inner_->on_disconnect([fn = std::move(fn), weak] {
        if (auto self = weak.lock()) {
            std::lock_guard<std::mutex> lk(self->mu_);
            self->gone_ = true;
        }
        if (fn) fn();
    });
}

void ObservedResponder::finish() {
    int status = 0;
    bool gone = false;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (logged_) return;
        logged_ = true;
        status = status_;
        gone = !ended_ && (gone_ || inner_->client_gone());
    }
    if (!log_) return;
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start_).count();
    json line = {{"ts", unix_now()}, {"remote", remote_}, {"method", method_}, {"route", path_}};
    // 499: the client went away before the answer ended (nginx's convention); 0: unanswered.
    line["status"] = gone && (status == 0 || status == 200) ? 499 : status;
    if (record_) {
        std::lock_guard<std::mutex> lk(record_->mu);
        if (!record_->model.empty()) line["model"] = record_->model;
        line["prompt_tokens"] = record_->n_prompt;
        line["cached_tokens"] = record_->n_cached;
        line["generated_tokens"] = record_->n_generated;
        line["ttft_ms"] = record_->ttft_ms >= 0 ? json(record_->ttft_ms) : json(nullptr);
        if (!record_->cache_key.empty()) line["cache_key"] = record_->cache_key;
        if (const CacheMiss& m = record_->cache_miss; !m.reason.empty()) {
            line["cache_miss"] = {{"reason", m.reason}, {"at", m.at}, {"missed", m.missed}};
        }
        if (!record_->prompt.empty()) line["prompt"] = record_->prompt;
    }
    line["total_ms"] = ms;
    log_->write(dump(line));
}

}  // namespace ferrox

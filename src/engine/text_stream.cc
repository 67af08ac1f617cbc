#include "engine/text_stream.h"

#include <algorithm>

namespace ferrox {

size_t stop_prefix_holdback(const std::string& text, const std::vector<std::string>& stop) {
    size_t best = 0;
    for (const std::string& s : stop) {
        const size_t max_len = std::min(text.size(), s.size() - 1);
        for (size_t len = max_len; len > best; --len) {
            if (text.compare(text.size() - len, len, s, 0, len) == 0) {
                best = len;
                break;
            }
        }
    }
    return best;
}

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stop, bool special)
    : decoder_(tok, IncrementalDecoder::Options{.special = special}), stop_(std::move(stop)) {
    stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

TextStream::Delta TextStream::release() {
    Delta d;
    // The earliest complete stop string wins.
    size_t first = std::string::npos;
    for (const std::string& s : stop_) {
        const size_t at = pending_.find(s);
        if (at != std::string::npos && (first == std::string::npos || at < first)) {
            first = at;
            d.matched = s;
        }
    }
    if (first != std::string::npos) {
        d.text = pending_.substr(0, first);
        d.stopped = true;
        stopped_ = true;
        pending_.clear();
        return d;
    }
    const size_t hold = stop_prefix_holdback(pending_, stop_);
    d.text = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
    return d;
}

TextStream::Delta TextStream::push(int32_t token) {
    if (stopped_) return {};
    decoder_.push(token, pending_);
    return release();
}

std::string TextStream::finish() {
    if (stopped_) return {};
    decoder_.flush(pending_);
    Delta d = release();
    if (d.stopped) return d.text;
    std::string out = std::move(d.text);
    out += pending_;
    pending_.clear();
    return out;
}

}  // namespace ferrox

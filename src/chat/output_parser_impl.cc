#include "chat/output_parser_impl.h"

#include <algorithm>

namespace ferrox::output_detail {

size_t count_leading_space(std::string_view s) {
    size_t n = 0;
    while (n < s.size() && is_space(s[n])) ++n;
    return n;
}

size_t trimmed_length(std::string_view s) {
    size_t n = s.size();
    while (n > 0 && is_space(s[n - 1])) --n;
    return n;
}

std::string_view trim(std::string_view s) {
    s.remove_prefix(count_leading_space(s));
    return s.substr(0, trimmed_length(s));
}

void Emitter::add(ChatDelta::Kind kind, std::string_view s) {
    if (s.empty()) return;
    if (out_->size() > base_ && out_->back().kind == kind) {
        out_->back().text.append(s);
        return;
    }
    ChatDelta d;
    d.kind = kind;
    d.text = std::string(s);
    out_->push_back(std::move(d));
}

void Emitter::tool_call(ToolCall call) {
    ChatDelta d;
    d.kind = ChatDelta::Kind::kToolCall;
    d.name = std::move(call.name);
    d.arguments = std::move(call.arguments);
    out_->push_back(std::move(d));
    ++n_calls_;
}

void TextSink::text(std::string_view s, Emitter& e) {
    if (skip_space_) {
        s.remove_prefix(count_leading_space(s));
        if (s.empty()) return;
        skip_space_ = false;
    }
    size_t n_body = trimmed_length(s);
    if (n_body == 0) {
        pending_.append(s);
        return;
    }
    if (!pending_.empty()) {
        e.text(pending_);
        pending_.clear();
    }
    e.text(s.substr(0, n_body));
    pending_.assign(s.substr(n_body));
}

void TextSink::markup(std::string_view s) {
    pending_.append(s);
    skip_space_ = false;
}

void TextSink::reasoning(std::string_view s, Emitter& e) {
    if (s.empty()) return;
    flush(e);
    e.reasoning(s);
}

void TextSink::call(ToolCall c, Emitter& e) {
    pending_.clear();
    skip_space_ = true;
    e.tool_call(std::move(c));
}

void TextSink::flush(Emitter& e) {
    e.text(pending_);
    pending_.clear();
    skip_space_ = false;
}

MarkerHit find_marker(std::string_view s, std::span<const std::string_view> markers, size_t from) {
    MarkerHit best;
    for (size_t i = 0; i < markers.size(); ++i) {
        size_t p = s.find(markers[i], from);
        if (p == std::string_view::npos) continue;
        if (p < best.pos || (p == best.pos && markers[i].size() > markers[best.which].size())) {
            best.pos = p;
            best.which = i;
        }
    }
    return best;
}

size_t held_suffix_start(std::string_view s, std::span<const std::string_view> markers) {
    size_t start = s.size();
    for (std::string_view m : markers) {
        if (m.empty()) continue;
        for (size_t len = std::min(m.size() - 1, s.size()); len > 0; --len) {
            if (s.size() - len >= start) break;  // no longer than the best found
            if (s.substr(s.size() - len) == m.substr(0, len)) {
                start = s.size() - len;
                break;
            }
        }
    }
    return start;
}

TextScan scan_text(std::string_view s, std::span<const std::string_view> markers, bool eof) {
    MarkerHit hit = find_marker(s, markers);
    if (hit.pos != std::string_view::npos) {
        return {hit.pos, hit.pos == 0 ? static_cast<int>(hit.which) : -1};
    }
    return {eof ? s.size() : held_suffix_start(s, markers), -1};
}

void BracketScanner::reset() {
    closers_.clear();
    pos_ = 0;
    end_ = 0;
    quote_ = 0;
    escape_ = false;
    state_ = State::kOpen;
}

BracketScanner::State BracketScanner::feed(std::string_view s) {
    while (state_ == State::kOpen && pos_ < s.size()) {
        char c = s[pos_++];
        if (quote_ != 0) {
            if (escape_) {
                escape_ = false;
            } else if (c == '\\') {
                escape_ = true;
            } else if (c == quote_) {
                quote_ = 0;
            }
            continue;
        }
        switch (c) {
            case '"':
                quote_ = c;
                break;
            case '\'':
                if (python_) quote_ = c;
                break;
            case '{':
                closers_.push_back('}');
                break;
            case '[':
                closers_.push_back(']');
                break;
            case '(':
                if (python_) closers_.push_back(')');
                break;
            case '}':
            case ']':
            case ')':
                if (c == ')' && !python_) break;
                if (closers_.empty() || closers_.back() != c) {
                    state_ = State::kBad;
                    return state_;
                }
                closers_.pop_back();
                if (closers_.empty()) {
                    end_ = pos_;
                    state_ = State::kDone;
                }
                break;
            default:
                break;
        }
        // A value starts with its bracket, and its depth is bounded.
        if ((pos_ == 1 && closers_.empty()) || closers_.size() > kMaxJsonDepth + 1) {
            state_ = State::kBad;
        }
    }
    return state_;
}

void StreamBuffer::compact() {
    if (pos_ == buf_.size()) {
        clear();
    } else if (pos_ > 4096 && pos_ > buf_.size() / 2) {
        buf_.erase(0, pos_);
        pos_ = 0;
    }
}

void FormatParser::push(std::string_view text, Emitter& e) {
    buf_.append(text);
    while (step(false, e)) {
    }
    buf_.compact();
}

void FormatParser::end_run(Emitter& e) {
    while (step(true, e)) {
    }
    // Every state drains at eof; should one not, its text is still not lost.
    sink_.text(buf_.rest(), e);
    buf_.clear();
    sink_.flush(e);
    restart();
}

}  // namespace ferrox::output_detail

#include "tokenizer/incremental_decoder.h"

namespace ferrox {

namespace {

constexpr const char* kReplacement = "\xEF\xBF\xBD";

// Valid range of the second byte of a sequence led by `lead` (Unicode Table 3-7).
bool valid_second(uint8_t lead, uint8_t b) {
    switch (lead) {
        case 0xE0:
            return b >= 0xA0 && b <= 0xBF;
        case 0xED:
            return b >= 0x80 && b <= 0x9F;
        case 0xF0:
            return b >= 0x90 && b <= 0xBF;
        case 0xF4:
            return b >= 0x80 && b <= 0x8F;
        default:
            return b >= 0x80 && b <= 0xBF;
    }
}

size_t lead_length(uint8_t b) {
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;  // not a valid lead byte
}

}  // namespace

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, Options options)
    : tokenizer_(tokenizer), options_(options), pipeline_(tokenizer.has_hf_pipeline()) {}

void IncrementalDecoder::reset() {
    first_ = true;
    prev_ = kNone;
    n_pending_ = 0;
    n_needed_ = 0;
}

void IncrementalDecoder::push_byte(uint8_t b, std::string& out) {
    if (n_pending_ > 0) {
        const bool ok = n_pending_ == 1 ? valid_second(pending_[0], b) : (b >= 0x80 && b <= 0xBF);
        if (ok) {
            pending_[n_pending_++] = b;
            if (n_pending_ == n_needed_) {
                out.append(reinterpret_cast<const char*>(pending_), n_pending_);
                n_pending_ = 0;
            }
            return;
        }
        // The pending prefix can never complete: one U+FFFD for it, then `b` starts afresh.
        out.append(kReplacement);
        n_pending_ = 0;
    }
    if (b < 0x80) {
        out.push_back(static_cast<char>(b));
        return;
    }
    const size_t len = lead_length(b);
    if (len == 0) {
        out.append(kReplacement);
        return;
    }
    pending_[0] = b;
    n_pending_ = 1;
    n_needed_ = len;
}

void IncrementalDecoder::push(int32_t id, std::string& out) {
    std::string owned;  // an HF pipeline's piece
    std::string_view piece;
    if (pipeline_) {
        // With strip_leading_space off, the first token continues a prompt: its usual piece.
        const int32_t prev = prev_ == kNone && !options_.strip_leading_space ? Tokenizer::kStreamContinues : prev_;
        std::optional<std::string> p = tokenizer_.hf_stream_piece(prev, id, options_.special);
        if (!p) return;  // decode() skips it
        owned = std::move(*p);
        piece = owned;
        prev_ = id;
    } else {
        piece = tokenizer_.token_to_piece(id, options_.special);
        if (first_ && options_.strip_leading_space && tokenizer_.add_space_prefix() && !piece.empty() &&
            piece.front() == ' ') {
            piece.remove_prefix(1);
        }
    }
    first_ = false;
    // Fast path: nothing pending and the whole piece is ASCII.
    size_t i = 0;
    if (n_pending_ == 0) {
        while (i < piece.size() && static_cast<uint8_t>(piece[i]) < 0x80) ++i;
        out.append(piece.data(), i);
    }
    for (; i < piece.size(); ++i) push_byte(static_cast<uint8_t>(piece[i]), out);
}

void IncrementalDecoder::flush(std::string& out) {
    if (n_pending_ > 0) out.append(kReplacement);
    reset();
}

}  // namespace ferrox

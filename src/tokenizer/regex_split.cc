#include "tokenizer/regex_split.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace ferrox {

struct RegexSplitter::Stage {
    pcre2_code* code = nullptr;
    ~Stage() {
        if (code) pcre2_code_free(code);
    }
};

RegexSplitter::~RegexSplitter() = default;

Expected<std::unique_ptr<RegexSplitter>> RegexSplitter::create(
    const std::vector<std::string>& regexes) {
    std::unique_ptr<RegexSplitter> s(new RegexSplitter());
    for (const std::string& re : regexes) {
        int err = 0;
        PCRE2_SIZE err_off = 0;
        auto stage = std::make_unique<Stage>();
        stage->code =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(re.data()), re.size(),
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, nullptr);
        if (!stage->code) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof(msg));
            return invalid_argument("pre-tokenizer regex '" + re + "' at " +
                                    std::to_string(err_off) + ": " +
                                    reinterpret_cast<const char*>(msg));
        }
        pcre2_jit_compile(stage->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
        s->stages_.push_back(std::move(stage));
    }
    return s;
}

void RegexSplitter::split(std::string_view text,
                          std::vector<std::pair<size_t, size_t>>& out) const {
    out.clear();
    if (text.empty()) return;
    out.emplace_back(0, text.size());
    std::vector<std::pair<size_t, size_t>> next;
    for (const auto& stage : stages_) {
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(stage->code, nullptr);
        next.clear();
        next.reserve(out.size() * 2);
        for (const auto& [base, len] : out) {
            const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + base);
            size_t pos = 0;   // search start within the piece
            size_t emit = 0;  // start of the not yet emitted gap
            while (pos < len) {
                const int rc = pcre2_match(stage->code, subject, len, pos, 0, md, nullptr);
                if (rc < 0) break;  // no match (or an error: keep the rest as one gap)
                const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
                const size_t ms = ov[0], me = ov[1];
                if (me == ms) {
                    // Empty match: split nothing here, step one character.
                    pos = ms + 1;
                    while (pos < len && (static_cast<uint8_t>(text[base + pos]) & 0xC0) == 0x80)
                        ++pos;
                    continue;
                }
                if (ms > emit) next.emplace_back(base + emit, ms - emit);
                next.emplace_back(base + ms, me - ms);
                emit = pos = me;
            }
            if (emit < len) next.emplace_back(base + emit, len - emit);
        }
        pcre2_match_data_free(md);
        out.swap(next);
    }
}

}  // namespace ferrox

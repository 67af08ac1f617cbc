// Fuzz target: arbitrary bytes as model output for an arbitrary format, fed whole, one byte
// at a time and at data-derived split points. Besides crashes, hangs and sanitizer reports it
// aborts when the contracts break: the three results must agree once adjacent text and
// reasoning deltas are merged, and every tool call must carry a JSON object.
//
// Input: byte 0 picks the format (% 11); byte 1 the options (bit 0: reasoning not split,
// bit 1: starts in reasoning, bit 2: tools off with the format as family only, bit 3:
// Command R7B think markers); the rest is the model output.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"

namespace {

using ferrox::ChatDelta;

std::vector<ChatDelta> run(const ferrox::OutputFormat& f, std::string_view text, size_t seed,
                           size_t mode) {
    ferrox::OutputParser p(f);
    std::vector<ChatDelta> out;
    size_t at = 0;
    while (at < text.size()) {
        size_t n = text.size() - at;
        if (mode == 1) n = 1;
        if (mode == 2) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            n = std::min(n, 1 + static_cast<size_t>(seed >> 60));
        }
        p.push(text.substr(at, n), &out);
        at += n;
    }
    p.finish(&out);
    int n_calls = 0;
    std::vector<ChatDelta> merged;
    for (const ChatDelta& d : out) {
        if (d.kind == ChatDelta::Kind::kToolCall) {
            ++n_calls;
            if (d.name.empty()) std::abort();
            if (!nlohmann::json::parse(d.arguments, nullptr, false).is_object()) std::abort();
        } else if (d.text.empty()) {
            std::abort();
        }
        if (!merged.empty() && d.kind != ChatDelta::Kind::kToolCall &&
            merged.back().kind == d.kind) {
            merged.back().text += d.text;
        } else {
            merged.push_back(d);
        }
    }
    if (n_calls != p.n_tool_calls()) std::abort();
    return merged;
}

bool same(const std::vector<ChatDelta>& a, const std::vector<ChatDelta>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i].kind != b[i].kind || a[i].text != b[i].text || a[i].name != b[i].name ||
            a[i].arguments != b[i].arguments) {
            return false;
        }
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    auto format = static_cast<ferrox::ToolCallFormat>(data[0] % 11);
    uint8_t opts = data[1];
    ferrox::OutputFormat f;
    f.tools = (opts & 4) ? ferrox::ToolCallFormat::kNone : format;
    f.family = format;
    f.split_reasoning = (opts & 1) == 0;
    f.starts_in_reasoning = (opts & 2) != 0;
    if (opts & 8) {
        f.think_start = "<|START_THINKING|>";
        f.think_end = "<|END_THINKING|>";
    }
    std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
    size_t seed = size;
    for (size_t i = 0; i < size; ++i) seed = seed * 31 + data[i];
    auto whole = run(f, text, seed, 0);
    if (!same(whole, run(f, text, seed, 1))) std::abort();
    if (!same(whole, run(f, text, seed, 2))) std::abort();
    return 0;
}

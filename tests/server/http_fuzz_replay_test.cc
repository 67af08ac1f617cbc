// Replays the committed HTTP fuzz corpus (tests/server/fuzz_corpus, made by
// make_fuzz_corpus.py plus the inputs the fuzzer found) and mutations of it through the fuzz
// target, whose checks abort on a crash, a 5xx, a broken framing or a server that stops
// answering; each seed's name also says what it must get (NAME.2xx-N / NAME.4xx-N).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "http_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Seed {
    std::string name;
    std::vector<uint8_t> data;
};

std::vector<Seed> load_corpus() {
    std::vector<Seed> out;
    const std::filesystem::path dir =
        std::filesystem::path(FERROX_SOURCE_DIR) / "tests/server/fuzz_corpus";
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        std::ifstream in(e.path(), std::ios::binary);
        out.push_back({e.path().filename().string(),
                       {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()}});
    }
    std::sort(out.begin(), out.end(), [](const Seed& a, const Seed& b) { return a.name < b.name; });
    return out;
}

TEST(HttpFuzz, SeedsGetTheAnswersTheirNamesSay) {
    const auto corpus = load_corpus();
    ASSERT_GE(corpus.size(), 40u);
    size_t n_checked = 0;
    for (const Seed& s : corpus) {
        LLVMFuzzerTestOneInput(s.data.data(), s.data.size());
        const size_t dot = s.name.rfind('.');
        if (dot == std::string::npos || s.name.size() < dot + 6) continue;  // a found input
        const std::string want = s.name.substr(dot + 1, 3);
        const size_t n_want = std::stoul(s.name.substr(dot + 5));
        const auto ex = ferrox::http_fuzz::exchange(
            ferrox::http_fuzz::request_for(s.data.data(), s.data.size()));
        EXPECT_TRUE(ex.closed && ex.parsed) << s.name;
        std::vector<int> finals;  // 100 Continue is an interim answer
        for (int status : ex.statuses) {
            if (status / 100 != 1) finals.push_back(status);
        }
        ASSERT_EQ(finals.size(), n_want) << s.name << ": " << ex.reply.substr(0, 500);
        for (int status : finals) {
            EXPECT_EQ(std::to_string(status / 100) + "xx", want)
                << s.name << " got " << status << ": " << ex.reply.substr(0, 500);
        }
        if (s.name.find("-tools") != std::string::npos) {
            // The scripted model answers "weather" with a tool call: the parsers must find it.
            EXPECT_NE(ex.reply.find("get_weather"), std::string::npos) << s.name << ": " << ex.reply;
            EXPECT_EQ(ex.reply.find("<tool_call>"), std::string::npos) << s.name << ": " << ex.reply;
            EXPECT_TRUE(ex.reply.find("tool_calls") != std::string::npos ||
                        ex.reply.find("tool_use") != std::string::npos)
                << s.name << ": " << ex.reply;
        }
        ++n_checked;
    }
    EXPECT_GE(n_checked, 40u);
}

TEST(HttpFuzz, RandomMutationsNeverFail) {
    const auto corpus = load_corpus();
    std::mt19937 rng(1234);
    static const char* kPieces[] = {"\r\n", "\r\n\r\n", "{", "}", "[", "\"", ":", ",", "null",
                                    "-1", "1e999", "\\u0000", "Transfer-Encoding: chunked\r\n",
                                    "Content-Length: 3\r\n", "\"stream\":true,", "\xc3"};
    for (const Seed& seed : corpus) {
        for (int i = 0; i < 3; ++i) {
            std::vector<uint8_t> m = seed.data;
            const int n_edits = 1 + static_cast<int>(rng() % 3);
            for (int k = 0; k < n_edits && m.size() > 1; ++k) {
                const size_t pos = 1 + rng() % (m.size() - 1);
                switch (rng() % 4) {
                    case 0:
                        m[pos] = static_cast<uint8_t>(rng());
                        break;
                    case 1:
                        m.erase(m.begin() + static_cast<long>(pos));
                        break;
                    case 2: {
                        const char* p = kPieces[rng() % (sizeof(kPieces) / sizeof(kPieces[0]))];
                        m.insert(m.begin() + static_cast<long>(pos), p, p + std::strlen(p));
                        break;
                    }
                    default:
                        m.resize(pos);
                        break;
                }
            }
            LLVMFuzzerTestOneInput(m.data(), m.size());
        }
    }
}

}  // namespace

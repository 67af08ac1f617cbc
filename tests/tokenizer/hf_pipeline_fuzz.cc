// Fuzz target: the general HF tokenizer.json pipeline (src/tokenizer/hf_pipeline.h), two ways.
//  - Text through the committed component tokenizers (tests/tokenizer/golden/hf_components:
//    every normalizer, pre-tokenizer, model, decoder and added-token flag that ferrox
//    implements, one file each): the contracts of fuzz_checks.h on encode and decode.
//  - A tokenizer.json document itself, when the input starts with '{' (so the component files
//    are seeds as they are): loading must give a tokenizer or a one-line error (a model file is
//    user input too), and a tokenizer that loads must keep the contracts on a few texts.
//
// Text input: byte 0 picks the tokenizer (% the manifest's count) and the flags (bit 6:
// add_special, bit 7: parse_special); the rest is the text. Byte 0 is never '{'.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_checks.h"
#include "tokenizer/tokenizer.h"

#ifndef FERROX_SOURCE_DIR
#error "FERROX_SOURCE_DIR must name the source tree (tests/CMakeLists.txt sets it)"
#endif

namespace {

using ferrox::Tokenizer;

const std::string kDir = std::string(FERROX_SOURCE_DIR) + "/tests/tokenizer/golden/hf_components/";

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        std::fprintf(stderr, "hf_pipeline_fuzz: cannot read %s\n", path.c_str());
        std::abort();
    }
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct Component {
    std::string name;
    std::unique_ptr<Tokenizer> tok;
};

// Loaded on first use, in the manifest's order (the corpus's byte 0 counts on it).
const std::vector<Component>& components() {
    static const auto* all = [] {
        auto* v = new std::vector<Component>();
        const std::string manifest = read_all(kDir + "MANIFEST");
        size_t pos = 0;
        while (pos < manifest.size()) {
            size_t end = manifest.find('\n', pos);
            if (end == std::string::npos) end = manifest.size();
            std::string line = manifest.substr(pos, end - pos);
            pos = end + 1;
            if (line.empty() || line[0] == '#') continue;
            auto tok = Tokenizer::from_hf_json(kDir + line + ".json");
            if (!tok.has_value()) {
                std::fprintf(stderr, "hf_pipeline_fuzz: %s: %s\n", line.c_str(), tok.status().to_string().c_str());
                std::abort();
            }
            v->push_back({line, std::move(*tok)});
        }
        if (v->empty()) std::abort();
        return v;
    }();
    return *all;
}

// Texts a loaded document is tried on: words, spaces, accents, CJK, emoji, markup, bytes that
// are not UTF-8.
constexpr std::string_view kProbes[] = {
    "Hello world! It's 2026.", "  leading  and trailing  ", "Ça déjà vu, naïve café",
    "東京は晴れ 🦙🎉", "<s>[INST] hi [/INST]</s><|endoftext|>", "tab\there\nnewline\r\n",
    std::string_view("\xff\xfe\xc3", 3), "",
};

void load_document(std::string_view doc) {
    auto tok = Tokenizer::from_hf_json_text(doc, "");
    if (!tok.has_value()) {
        const std::string msg = tok.status().to_string();
        if (msg.empty() || msg.find('\n') != std::string::npos) {
            ferrox::fuzz::fail("tokenizer.json", "a load error is not one non-empty line", doc);
        }
        return;
    }
    for (std::string_view text : kProbes) {
        for (int flags = 0; flags < 4; ++flags) {
            ferrox::fuzz::check_encode_decode("tokenizer.json", **tok, text, flags & 1, flags & 2);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    std::string_view in(reinterpret_cast<const char*>(data), size);
    if (in[0] == '{') {
        load_document(in);
        return 0;
    }
    const auto& comps = components();
    const Component& c = comps[(data[0] & 63) % comps.size()];
    const bool add_special = (data[0] & 64) != 0;
    const bool parse_special = (data[0] & 128) != 0;
    ferrox::fuzz::check_encode_decode(c.name.c_str(), *c.tok, in.substr(1), add_special, parse_special);
    return 0;
}

// libFuzzer target for the GGUF reader. Built as a libFuzzer binary when the compiler is
// clang (FERROX_FUZZ=ON); otherwise linked into the corpus replay test below.
#include <cstddef>
#include <cstdint>

#include "loader/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = ferrox::GgufFile::parse(data, size, "fuzz.gguf");
    if (r.has_value()) {
        // Touch every tensor's first and last byte: they must lie inside the image.
        for (const auto& t : (*r)->tensors()) {
            const auto* p = static_cast<const uint8_t*>(t.data);
            volatile uint8_t x = p[0];
            x = p[t.n_bytes() - 1];
            (void)x;
        }
    }
    return 0;
}

// libFuzzer target for the safetensors reader (FERROX_FUZZ=ON with clang); otherwise linked
// into safetensors_fuzz_replay_test.
#include <cstddef>
#include <cstdint>

#include "loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    auto r = ferrox::SafetensorsFile::parse(data, size, "fuzz.safetensors");
    if (r.has_value()) {
        // Every tensor's bytes must lie inside the image.
        for (const auto& t : (*r)->tensors()) {
            if (t.n_bytes == 0) continue;
            volatile uint8_t x = t.data[0];
            x = t.data[t.n_bytes - 1];
            (void)x;
            auto v = t.view("fuzz.safetensors");
            if (v.has_value() && v->n_bytes() != static_cast<int64_t>(t.n_bytes)) __builtin_trap();
        }
    }
    return 0;
}

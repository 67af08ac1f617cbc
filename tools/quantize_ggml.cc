// ferrox-quantize-ggml TYPE N_PER_ROW < rows.f32 > rows.q: quantizes little-endian float32 rows
// (stdin, a whole number of rows of N_PER_ROW) to TYPE with llama.cpp's own quantizer, byte for
// byte (kernels/quants.h: quantize_row_ggml; TYPE a ggml type id or name: q2_K, q3_K, iq4_nl,
// iq4_xs, mxfp4), and writes the rows' bytes to stdout. Rows are split over the CPU's threads
// (FERROX_THREADS to choose). scripts/golden/quant_types_llamacpp.py --models-only uses it to
// write the re-quantized test models that llama.cpp's answers were made on.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "kernels/quants.h"
#include "tensor/dtype.h"

namespace {

bool parse_type(const std::string& s, ferrox::DType* out) {
    for (uint32_t id = 0; id < 64; ++id) {
        auto info = ferrox::dtype_info(id);
        if (!info || !ferrox::has_ggml_quantizer(info->type)) continue;
        if (s == std::to_string(id) || s == info->name) {
            *out = info->type;
            return true;
        }
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    ferrox::DType type;
    if (argc != 3 || !parse_type(argv[1], &type) || std::atoll(argv[2]) <= 0) {
        std::fprintf(stderr, "usage: ferrox-quantize-ggml q2_K|q3_K|iq4_nl|iq4_xs|mxfp4 N_PER_ROW < f32 > bytes\n");
        return 2;
    }
    const int64_t n = std::atoll(argv[2]);
    if (n % ferrox::dtype_info(type).block_elems != 0) {
        std::fprintf(stderr, "error: %lld is not a multiple of the block size of %s\n", static_cast<long long>(n),
                     argv[1]);
        return 2;
    }
    std::vector<float> src;
    float buf[4096];
    size_t got;
    while ((got = std::fread(buf, sizeof(float), 4096, stdin)) > 0) src.insert(src.end(), buf, buf + got);
    if (src.size() % static_cast<size_t>(n) != 0) {
        std::fprintf(stderr, "error: %zu floats are not whole rows of %lld\n", src.size(), static_cast<long long>(n));
        return 1;
    }
    const int64_t rows = static_cast<int64_t>(src.size()) / n;
    const int64_t row_bytes = ferrox::dtype_row_bytes(type, n);
    std::vector<uint8_t> dst(static_cast<size_t>(rows * row_bytes));
    int n_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* t = std::getenv("FERROX_THREADS")) n_threads = std::atoi(t);
    if (n_threads < 1) n_threads = 1;
    std::vector<std::thread> pool;
    for (int t = 0; t < n_threads; ++t)
        pool.emplace_back([&, t] {
            for (int64_t r = t; r < rows; r += n_threads)
                ferrox::quantize_row_ggml(type, src.data() + r * n, dst.data() + r * row_bytes, n);
        });
    for (auto& th : pool) th.join();
    if (std::fwrite(dst.data(), 1, dst.size(), stdout) != dst.size()) {
        std::fprintf(stderr, "error: cannot write the output\n");
        return 1;
    }
    return 0;
}

// ferrox-make-tiny OUT_DIR: writes every tiny test model (testing/tiny_model.h) as
// OUT_DIR/<variant>.gguf, for the golden script that runs llama.cpp on them.
#include <cstdio>
#include <string>

#include "loader/gguf_writer.h"
#include "testing/tiny_model.h"

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: ferrox-make-tiny OUT_DIR\n");
        return 1;
    }
    for (const auto& [name, spec] : ferrox::tiny_model_variants()) {
        std::vector<uint8_t> bytes = ferrox::make_tiny_model(spec);
        std::string path = std::string(argv[1]) + "/" + name + ".gguf";
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) {
            std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
            return 1;
        }
        std::fclose(f);
        std::printf("%s\n", path.c_str());
    }
    return 0;
}

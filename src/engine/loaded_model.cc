#include "engine/loaded_model.h"

#include <unistd.h>

#include <chrono>

#include "core/log.h"

#include "engine/tokenizer_gguf.h"

namespace ferrox {

Expected<std::shared_ptr<LoadedModel>> load_model(const std::string& path, const ModelOptions& opts) {
    const auto t0 = std::chrono::steady_clock::now();
    auto m = std::make_shared<LoadedModel>();
    m->path = path;
    const size_t slash = path.find_last_of('/');
    m->name = path.substr(slash == std::string::npos ? 0 : slash + 1);
    if (m->name.size() > 5 && m->name.compare(m->name.size() - 5, 5, ".gguf") == 0) {
        m->name.resize(m->name.size() - 5);
    }
    FERROX_ASSIGN_OR_RETURN(m->gguf, GgufFile::open(path));
    FERROX_ASSIGN_OR_RETURN(VocabSpec spec, vocab_from_gguf(*m->gguf));
    auto tok = Tokenizer::create(std::move(spec));
    if (!tok.has_value()) return Status(tok.status().code(), path + ": " + tok.status().message());
    m->tokenizer = std::move(*tok);
    ModelOptions mo = opts;
    if (mo.mmap_auto && !mo.mmap) {
        // A file that would take most of the memory copied stays mapped (its experts too).
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
        const double file_bytes = static_cast<double>(m->gguf->data_offset());
        double tensor_bytes = 0;
        for (const TensorView& t : m->gguf->tensors()) tensor_bytes += static_cast<double>(t.n_bytes());
        if (pages > 0 && page > 0 && file_bytes + tensor_bytes > 0.75 * static_cast<double>(pages) * page) {
            mo.mmap = true;
            FERROX_LOG_INFO("%s: %.1f GiB of weights is over 3/4 of this machine's memory: mapped, not copied (--no-mmap copies)",
                            path.c_str(), tensor_bytes / (1 << 30));
        }
    }
    FERROX_ASSIGN_OR_RETURN(m->model, Model::load(*m->gguf, mo));
    if (m->model->n_vocab() < m->tokenizer->n_vocab()) {
        return invalid_argument(path + ": the vocabulary has " + std::to_string(m->tokenizer->n_vocab()) +
                                " tokens but the model only " + std::to_string(m->model->n_vocab()));
    }
    FERROX_ASSIGN_OR_RETURN(auto tmpl, m->gguf->get_string("tokenizer.chat_template"));
    if (tmpl) m->chat_template = *tmpl;
    m->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return m;
}

}  // namespace ferrox

#include "loader/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/json_depth.h"

namespace ferrox {

namespace {

using nlohmann::json;

// The format's own cap on the header (the reference implementation refuses more).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr int kMaxJsonDepth = 16;
constexpr size_t kMaxRank = 8;

struct DTypeEntry {
    const char* name;
    int64_t bytes;
    std::optional<DType> type;
};

constexpr DTypeEntry kDTypes[] = {
    {"BOOL", 1, std::nullopt}, {"U8", 1, std::nullopt},      {"I8", 1, std::nullopt},
    {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt}, {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},  {"F16", 2, DType::kF16},      {"BF16", 2, DType::kBF16},
    {"I32", 4, std::nullopt},  {"U32", 4, std::nullopt},     {"F32", 4, DType::kF32},
    {"F64", 8, std::nullopt},  {"I64", 8, std::nullopt},     {"U64", 8, std::nullopt},
};

const DTypeEntry* find_dtype(const std::string& s) {
    for (const DTypeEntry& e : kDTypes) {
        if (s == e.name) return &e;
    }
    return nullptr;
}

// Parses a JSON object and fails on a key repeated in the top-level object (nlohmann keeps
// the last silently; a checkpoint with two entries for one tensor is corrupt).
bool parse_object_unique(std::string_view text, json* out, std::string* why) {
    if (json_nesting_depth(text, kMaxJsonDepth) > kMaxJsonDepth) {
        *why = "JSON nested deeper than " + std::to_string(kMaxJsonDepth);
        return false;
    }
    std::set<std::string> seen;
    std::string dup;
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (ev == json::parse_event_t::key && depth == 1) {
            const std::string& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second && dup.empty()) dup = k;
        }
        return true;
    };
    *out = json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/false);
    if (out->is_discarded()) {
        *why = "invalid JSON";
        return false;
    }
    if (!out->is_object()) {
        *why = "JSON is not an object";
        return false;
    }
    if (!dup.empty()) {
        *why = "duplicate key '" + dup + "'";
        return false;
    }
    return true;
}

bool valid_utf8(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<uint8_t>(s[i]);
        const int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
        if (n < 0 || s.size() - i <= static_cast<size_t>(n)) return false;
        for (int k = 1; k <= n; ++k) {
            if ((static_cast<uint8_t>(s[i + k]) & 0xC0) != 0x80) return false;
        }
        i += n + 1;
    }
    return true;
}

}  // namespace

int64_t SafetensorsTensor::n_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

Expected<TensorView> SafetensorsTensor::view(const std::string& file) const {
    if (!type) {
        return unimplemented(file + ": tensor '" + name + "': dtype " + dtype +
                             " is not supported (F32, F16, BF16)");
    }
    if (shape.size() > static_cast<size_t>(kMaxDims)) {
        return unimplemented(file + ": tensor '" + name + "': " + std::to_string(shape.size()) +
                             " dimensions (at most " + std::to_string(kMaxDims) + ")");
    }
    TensorView v;
    v.name = name;
    v.type = *type;
    v.n_dims = std::max<int>(1, static_cast<int>(shape.size()));
    for (size_t i = 0; i < shape.size(); ++i) {
        if (shape[i] == 0) return invalid_argument(file + ": tensor '" + name + "' is empty");
        v.ne[i] = shape[shape.size() - 1 - i];
    }
    v.data = data;
    return v;
}

Status SafetensorsFile::error(const std::string& message) const {
    return invalid_argument(path_ + ": " + message);
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    FERROX_ASSIGN_OR_RETURN(auto file, MmapFile::open(path));
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->file_ = std::move(file);
    FERROX_RETURN_IF_ERROR(f->parse_all(f->file_->data(), f->file_->size()));
    return f;
}

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::parse(const uint8_t* data, size_t size,
                                                                  const std::string& name) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = name;
    FERROX_RETURN_IF_ERROR(f->parse_all(data, size));
    return f;
}

Status SafetensorsFile::parse_all(const uint8_t* data, size_t size) {
    if (size < 8) return error("file too short to be safetensors (" + std::to_string(size) + " bytes)");
    uint64_t n_header = 0;
    std::memcpy(&n_header, data, 8);  // little-endian hosts only (x86-64, aarch64)
    if (n_header > kMaxHeaderBytes) {
        return error("header length " + std::to_string(n_header) + " exceeds the 100 MiB limit");
    }
    if (n_header > size - 8) {
        return error("header length " + std::to_string(n_header) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes): truncated or not safetensors");
    }
    if (n_header < 2 || data[8] != '{') return error("header does not start with '{': not safetensors");
    const std::string_view text(reinterpret_cast<const char*>(data + 8), n_header);
    if (!valid_utf8(text)) return error("header is not valid UTF-8");
    json h;
    std::string why;
    if (!parse_object_unique(text, &h, &why)) return error("header: " + why);

    const uint8_t* buf = data + 8 + n_header;
    const uint64_t n_buf = size - 8 - n_header;
    std::vector<std::pair<uint64_t, uint64_t>> spans;
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& key = it.key();
        const json& v = it.value();
        if (key == "__metadata__") {
            if (!v.is_object()) return error("__metadata__ is not an object");
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string()) {
                    return error("__metadata__ '" + m.key() + "' is not a string");
                }
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        const std::string what = "tensor '" + key + "'";
        if (!v.is_object()) return error(what + ": entry is not an object");
        const auto dt = v.find("dtype");
        const auto sh = v.find("shape");
        const auto off = v.find("data_offsets");
        if (dt == v.end() || !dt->is_string()) return error(what + ": missing or non-string dtype");
        if (sh == v.end() || !sh->is_array()) return error(what + ": missing or non-array shape");
        if (off == v.end() || !off->is_array() || off->size() != 2) {
            return error(what + ": data_offsets must be [begin, end]");
        }
        SafetensorsTensor t;
        t.name = key;
        t.dtype = dt->get<std::string>();
        const DTypeEntry* e = find_dtype(t.dtype);
        if (!e) return error(what + ": unknown dtype '" + t.dtype + "'");
        t.elem_bytes = e->bytes;
        t.type = e->type;
        if (sh->size() > kMaxRank) return error(what + ": " + std::to_string(sh->size()) + " dimensions");
        uint64_t n_elems = 1;
        for (const json& d : *sh) {
            if (!d.is_number_unsigned()) return error(what + ": shape holds a non-natural number");
            const uint64_t ne = d.get<uint64_t>();
            if (ne > (1ull << 40) || (ne != 0 && n_elems > (1ull << 42) / ne)) {
                return error(what + ": shape too large");
            }
            n_elems *= ne;
            t.shape.push_back(static_cast<int64_t>(ne));
        }
        for (const json& o : *off) {
            if (!o.is_number_unsigned()) return error(what + ": data_offsets hold a non-natural number");
        }
        const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
        if (begin > end) return error(what + ": data_offsets [" + std::to_string(begin) + ", " +
                                      std::to_string(end) + ") run backwards");
        if (end > n_buf) {
            return error(what + ": data [" + std::to_string(begin) + ", " + std::to_string(end) +
                         ") runs past the end of the data (" + std::to_string(n_buf) +
                         " bytes): truncated?");
        }
        const uint64_t want = n_elems * static_cast<uint64_t>(e->bytes);
        if (end - begin != want) {
            return error(what + ": " + std::to_string(end - begin) + " bytes for a " + t.dtype +
                         " shape of " + std::to_string(n_elems) + " elements (" + std::to_string(want) +
                         " bytes)");
        }
        t.data = buf + begin;
        t.n_bytes = want;
        index_.emplace(t.name, tensors_.size());
        tensors_.push_back(std::move(t));
        spans.emplace_back(begin, end);
    }
    // The format requires the data to be covered exactly: no overlap, no hole, nothing after.
    std::vector<size_t> order(spans.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return spans[a] < spans[b];
    });
    uint64_t at = 0;
    for (size_t k = 0; k < order.size(); ++k) {
        const auto& s = spans[order[k]];
        if (s.first < at) {
            return error("tensors '" + tensors_[order[k - 1]].name + "' and '" +
                         tensors_[order[k]].name + "' overlap");
        }
        if (s.first > at) {
            return error("hole of " + std::to_string(s.first - at) + " bytes before tensor '" +
                         tensors_[order[k]].name + "'");
        }
        at = s.second;
    }
    if (at != n_buf) {
        return error(std::to_string(n_buf - at) + " bytes after the last tensor are not indexed");
    }
    return Status::ok();
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

// ---- sharded checkpoints ----

Expected<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::open(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    std::string p = path;
    if (fs::is_directory(p, ec)) {
        const fs::path dir(p);
        if (fs::exists(dir / "model.safetensors.index.json", ec)) {
            p = (dir / "model.safetensors.index.json").string();
        } else if (fs::exists(dir / "model.safetensors", ec)) {
            p = (dir / "model.safetensors").string();
        } else {
            return not_found(path + ": no model.safetensors or model.safetensors.index.json");
        }
    }
    std::unique_ptr<SafetensorsCheckpoint> c(new SafetensorsCheckpoint());
    c->path_ = p;
    if (!p.ends_with(".json")) {
        FERROX_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(p));
        c->files_.push_back(std::move(f));
        return c;
    }
    FERROX_ASSIGN_OR_RETURN(std::string text, read_file(p));
    json idx;
    std::string why;
    if (!parse_object_unique(text, &idx, &why)) return invalid_argument(p + ": " + why);
    const auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object() || wm->empty()) {
        return invalid_argument(p + ": missing or empty weight_map");
    }
    // Shards in first-mention order; each must be a plain file name beside the index.
    std::vector<std::string> shard_names;
    std::map<std::string, std::string> tensor_shard;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
        if (!it.value().is_string()) {
            return invalid_argument(p + ": weight_map['" + it.key() + "'] is not a string");
        }
        const std::string s = it.value().get<std::string>();
        if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..") {
            return invalid_argument(p + ": weight_map['" + it.key() + "'] = '" + s +
                                    "' is not a file name beside the index");
        }
        if (std::find(shard_names.begin(), shard_names.end(), s) == shard_names.end()) {
            shard_names.push_back(s);
        }
        tensor_shard[it.key()] = s;
    }
    const fs::path dir = fs::path(p).parent_path();
    std::map<std::string, const SafetensorsFile*> by_name;
    for (const std::string& s : shard_names) {
        FERROX_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open((dir / s).string()));
        by_name[s] = f.get();
        c->files_.push_back(std::move(f));
    }
    // Every mapped tensor in its shard; no tensor in two shards.
    std::map<std::string, std::string> seen;
    for (const auto& f : c->files_) {
        for (const SafetensorsTensor& t : f->tensors()) {
            auto [it, fresh] = seen.emplace(t.name, f->path());
            if (!fresh) {
                return invalid_argument(p + ": tensor '" + t.name + "' is in both " + it->second + " and " +
                                        f->path());
            }
        }
    }
    for (const auto& [name, shard] : tensor_shard) {
        if (!by_name[shard]->find(name)) {
            return invalid_argument(p + ": tensor '" + name + "' is mapped to " + shard + ", which lacks it");
        }
    }
    return c;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(std::string_view name, const SafetensorsFile** file) const {
    for (const auto& f : files_) {
        if (const SafetensorsTensor* t = f->find(name)) {
            if (file) *file = f.get();
            return t;
        }
    }
    return nullptr;
}

size_t SafetensorsCheckpoint::n_tensors() const {
    size_t n = 0;
    for (const auto& f : files_) n += f->tensors().size();
    return n;
}

uint64_t SafetensorsCheckpoint::n_bytes() const {
    uint64_t n = 0;
    for (const auto& f : files_) {
        for (const auto& t : f->tensors()) n += t.n_bytes;
    }
    return n;
}

// ---- config.json ----

Status HfConfig::error(const std::string& message) const { return invalid_argument(path_ + ": " + message); }

Expected<HfConfig> HfConfig::open(const std::string& path) {
    FERROX_ASSIGN_OR_RETURN(std::string text, read_file(path));
    return parse(text, path);
}

Expected<HfConfig> HfConfig::parse(std::string_view text, const std::string& name) {
    HfConfig c;
    c.path_ = name;
    json j;
    std::string why;
    if (!parse_object_unique(text, &j, &why)) return c.error(why);
    for (auto it = j.begin(); it != j.end(); ++it) {
        const json& v = it.value();
        if (v.is_boolean()) c.values_[it.key()] = v.get<bool>();
        else if (v.is_number_integer()) {
            if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) continue;
            c.values_[it.key()] = v.get<int64_t>();
        } else if (v.is_number_float()) c.values_[it.key()] = v.get<double>();
        else if (v.is_string()) c.values_[it.key()] = v.get<std::string>();
        else if (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& e) { return e.is_string(); })) {
            c.values_[it.key()] = v.get<std::vector<std::string>>();
        }
        // Objects, nulls and mixed arrays are not hyperparameters: left out.
    }
    return c;
}

Expected<std::optional<int64_t>> HfConfig::get_int(std::string_view key) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return std::optional<int64_t>();
    if (auto* i = std::get_if<int64_t>(&it->second)) return std::optional<int64_t>(*i);
    return error("'" + std::string(key) + "' is not an integer");
}

Expected<std::optional<double>> HfConfig::get_float(std::string_view key) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return std::optional<double>();
    if (auto* d = std::get_if<double>(&it->second)) return std::optional<double>(*d);
    if (auto* i = std::get_if<int64_t>(&it->second)) return std::optional<double>(static_cast<double>(*i));
    return error("'" + std::string(key) + "' is not a number");
}

Expected<std::optional<std::string>> HfConfig::get_string(std::string_view key) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return std::optional<std::string>();
    if (auto* s = std::get_if<std::string>(&it->second)) return std::optional<std::string>(*s);
    return error("'" + std::string(key) + "' is not a string");
}

Expected<std::optional<bool>> HfConfig::get_bool(std::string_view key) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return std::optional<bool>();
    if (auto* b = std::get_if<bool>(&it->second)) return std::optional<bool>(*b);
    return error("'" + std::string(key) + "' is not a bool");
}

Expected<std::optional<std::vector<std::string>>> HfConfig::get_strings(std::string_view key) const {
    auto it = values_.find(std::string(key));
    if (it == values_.end()) return std::optional<std::vector<std::string>>();
    if (auto* s = std::get_if<std::vector<std::string>>(&it->second)) {
        return std::optional<std::vector<std::string>>(*s);
    }
    return error("'" + std::string(key) + "' is not an array of strings");
}

}  // namespace ferrox

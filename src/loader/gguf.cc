#include "loader/gguf.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ferrox {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr size_t kMaxAlignment = 1u << 20;

// Bounds-checked little-endian cursor over the file image. Every read either succeeds
// inside [0, size) or sets a failure message; no read ever touches memory past the end.
class Cursor {
public:
    Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }
    const std::string& failure() const { return failure_; }
    bool failed() const { return !failure_.empty(); }

    template <typename T>
    bool read(T* out, const char* what) {
        if (failed()) return false;
        if (remaining() < sizeof(T)) return fail(std::string("truncated while reading ") + what);
        std::memcpy(out, data_ + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }

    bool read_string(std::string* out, const char* what) {
        uint64_t len;
        if (!read(&len, what)) return false;
        if (len > kMaxStringBytes || len > remaining()) {
            return fail(std::string(what) + ": string length " + std::to_string(len) +
                        " exceeds the file");
        }
        out->assign(reinterpret_cast<const char*>(data_ + pos_), len);
        pos_ += len;
        return true;
    }

    bool fail(std::string message) {
        if (failure_.empty()) failure_ = std::move(message) + " (at byte " + std::to_string(pos_) + ")";
        return false;
    }

private:
    const uint8_t* data_;
    size_t size_;
    size_t pos_ = 0;
    std::string failure_;
};

// Smallest number of bytes one value of `type` occupies in the file, so that a count can be
// checked against the bytes left before anything is allocated for it.
uint64_t min_value_bytes(GgufType type) {
    switch (type) {
        case GgufType::kUint8:
        case GgufType::kInt8:
        case GgufType::kBool: return 1;
        case GgufType::kUint16:
        case GgufType::kInt16: return 2;
        case GgufType::kUint32:
        case GgufType::kInt32:
        case GgufType::kFloat32: return 4;
        case GgufType::kString: return 8;
        case GgufType::kArray: return 12;
        case GgufType::kUint64:
        case GgufType::kInt64:
        case GgufType::kFloat64: return 8;
    }
    return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

bool read_value(Cursor& c, GgufType type, GgufValue* out, int depth, const std::string& key) {
    out->type = type;
    switch (type) {
        case GgufType::kUint8: { uint8_t v; if (!c.read(&v, "u8")) return false; out->v = uint64_t{v}; return true; }
        case GgufType::kInt8: { int8_t v; if (!c.read(&v, "i8")) return false; out->v = int64_t{v}; return true; }
        case GgufType::kUint16: { uint16_t v; if (!c.read(&v, "u16")) return false; out->v = uint64_t{v}; return true; }
        case GgufType::kInt16: { int16_t v; if (!c.read(&v, "i16")) return false; out->v = int64_t{v}; return true; }
        case GgufType::kUint32: { uint32_t v; if (!c.read(&v, "u32")) return false; out->v = uint64_t{v}; return true; }
        case GgufType::kInt32: { int32_t v; if (!c.read(&v, "i32")) return false; out->v = int64_t{v}; return true; }
        case GgufType::kUint64: { uint64_t v; if (!c.read(&v, "u64")) return false; out->v = v; return true; }
        case GgufType::kInt64: { int64_t v; if (!c.read(&v, "i64")) return false; out->v = v; return true; }
        case GgufType::kFloat32: { float v; if (!c.read(&v, "f32")) return false; out->v = double{v}; return true; }
        case GgufType::kFloat64: { double v; if (!c.read(&v, "f64")) return false; out->v = v; return true; }
        case GgufType::kBool: {
            uint8_t v;
            if (!c.read(&v, "bool")) return false;
            if (v > 1) return c.fail("metadata '" + key + "': bool value " + std::to_string(v));
            out->v = uint64_t{v};
            return true;
        }
        case GgufType::kString: {
            std::string s;
            if (!c.read_string(&s, "string value")) return false;
            out->v = std::move(s);
            return true;
        }
        case GgufType::kArray: {
            if (depth >= kMaxArrayDepth) return c.fail("metadata '" + key + "': arrays nested too deep");
            uint32_t et;
            uint64_t n;
            if (!c.read(&et, "array type") || !c.read(&n, "array length")) return false;
            if (!valid_type(et)) {
                return c.fail("metadata '" + key + "': unknown array element type " + std::to_string(et));
            }
            out->elem_type = static_cast<GgufType>(et);
            if (n > c.remaining() / min_value_bytes(out->elem_type)) {
                return c.fail("metadata '" + key + "': array length " + std::to_string(n) +
                              " exceeds the file");
            }
            std::vector<GgufValue> items(n);
            for (uint64_t i = 0; i < n; ++i) {
                if (!read_value(c, out->elem_type, &items[i], depth + 1, key)) return false;
            }
            out->v = std::move(items);
            return true;
        }
    }
    return c.fail("metadata '" + key + "': unknown value type");
}

}  // namespace

bool GgufValue::is_integer() const {
    return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}
bool GgufValue::is_float() const { return std::holds_alternative<double>(v); }

std::optional<int64_t> GgufValue::as_int() const {
    if (auto* u = std::get_if<uint64_t>(&v)) {
        if (*u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
        return static_cast<int64_t>(*u);
    }
    if (auto* i = std::get_if<int64_t>(&v)) return *i;
    return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
    if (auto* d = std::get_if<double>(&v)) return *d;
    if (auto i = as_int()) return static_cast<double>(*i);
    return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&v); }
const std::vector<GgufValue>* GgufValue::as_array() const {
    return std::get_if<std::vector<GgufValue>>(&v);
}

Status GgufFile::error(const std::string& message) const {
    return invalid_argument(path_ + ": " + message);
}

Expected<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
    FERROX_ASSIGN_OR_RETURN(auto file, MmapFile::open(path));
    std::unique_ptr<GgufFile> g(new GgufFile());
    g->path_ = path;
    g->file_ = std::move(file);
    FERROX_RETURN_IF_ERROR(g->parse_all(g->file_->data(), g->file_->size()));
    return g;
}

Expected<std::unique_ptr<GgufFile>> GgufFile::parse(const uint8_t* data, size_t size,
                                                    const std::string& name) {
    std::unique_ptr<GgufFile> g(new GgufFile());
    g->path_ = name;
    FERROX_RETURN_IF_ERROR(g->parse_all(data, size));
    return g;
}

Status GgufFile::parse_all(const uint8_t* data, size_t size) {
    Cursor c(data, size);
    uint32_t magic = 0;
    if (!c.read(&magic, "magic") || magic != kGgufMagic) {
        return error(size < 4 ? "file too short to be GGUF" : "not a GGUF file (bad magic)");
    }
    if (!c.read(&version_, "version")) return error(c.failure());
    if (version_ != 2 && version_ != 3) {
        return error("unsupported GGUF version " + std::to_string(version_) + " (need 2 or 3)");
    }
    uint64_t n_tensors = 0, n_kv = 0;
    if (!c.read(&n_tensors, "tensor count") || !c.read(&n_kv, "metadata count")) {
        return error(c.failure());
    }
    // Each metadata pair needs at least 8 (key length) + 4 (type) + 1 bytes; each tensor
    // info at least 8 + 4 + 4 + 8 bytes.
    const std::string left = " (" + std::to_string(c.remaining()) + " bytes left): truncated or corrupt";
    if (n_kv > c.remaining() / 13) {
        return error("metadata count " + std::to_string(n_kv) + " cannot fit in the file" + left);
    }
    if (n_tensors > c.remaining() / 24) {
        return error("tensor count " + std::to_string(n_tensors) + " cannot fit in the file" + left);
    }

    kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
        std::string key;
        uint32_t t;
        if (!c.read_string(&key, "metadata key") || !c.read(&t, "metadata type")) {
            return error(c.failure());
        }
        if (!valid_type(t)) {
            return error("metadata '" + key + "': unknown value type " + std::to_string(t));
        }
        GgufValue v;
        if (!read_value(c, static_cast<GgufType>(t), &v, 0, key)) return error(c.failure());
        if (kv_index_.count(key)) return error("duplicate metadata key '" + key + "'");
        kv_index_.emplace(key, kv_.size());
        kv_.emplace_back(std::move(key), std::move(v));
    }

    if (const GgufValue* a = find("general.alignment")) {
        auto n = a->as_int();
        if (!n || *n <= 0 || static_cast<size_t>(*n) > kMaxAlignment || (*n & (*n - 1)) != 0) {
            return error("general.alignment must be a power of two up to 1 MiB");
        }
        alignment_ = static_cast<size_t>(*n);
    }

    struct RawInfo {
        uint64_t offset;
    };
    std::vector<RawInfo> raw;
    raw.reserve(n_tensors);
    tensors_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        TensorView tv;
        uint32_t n_dims, type;
        if (!c.read_string(&tv.name, "tensor name") || !c.read(&n_dims, "tensor dims")) {
            return error(c.failure());
        }
        if (n_dims == 0 || n_dims > kMaxDims) {
            return error("tensor '" + tv.name + "': " + std::to_string(n_dims) + " dimensions");
        }
        tv.n_dims = static_cast<int>(n_dims);
        uint64_t n_total = 1;
        for (uint32_t d = 0; d < n_dims; ++d) {
            uint64_t ne;
            if (!c.read(&ne, "tensor shape")) return error(c.failure());
            if (ne == 0 || ne > (1ull << 40) || n_total > (1ull << 42) / ne) {
                return error("tensor '" + tv.name + "': bad dimension " + std::to_string(ne));
            }
            n_total *= ne;
            tv.ne[d] = static_cast<int64_t>(ne);
        }
        uint64_t offset;
        if (!c.read(&type, "tensor type") || !c.read(&offset, "tensor offset")) {
            return error(c.failure());
        }
        auto info = dtype_info(type);
        if (!info || type == static_cast<uint32_t>(DType::kQ8_1) ||
            type == static_cast<uint32_t>(DType::kQ8_K)) {
            const std::string_view name = ggml_type_name(type);
            return unimplemented(path_ + ": tensor '" + tv.name + "': unsupported tensor type " +
                                 (name.empty() ? std::to_string(type) : std::string(name) + " (ggml type " + std::to_string(type) + ")"));
        }
        tv.type = info->type;
        if (tv.ne[0] % info->block_elems != 0) {
            return error("tensor '" + tv.name + "': row of " + std::to_string(tv.ne[0]) +
                         " elements is not a multiple of the " + std::string(info->name) +
                         " block size " + std::to_string(info->block_elems));
        }
        if (tensor_index_.count(tv.name)) return error("duplicate tensor '" + tv.name + "'");
        tensor_index_.emplace(tv.name, tensors_.size());
        tensors_.push_back(std::move(tv));
        raw.push_back({offset});
    }

    data_offset_ = (c.pos() + alignment_ - 1) / alignment_ * alignment_;
    if (n_tensors > 0 && data_offset_ > size) return error("tensor data section starts past the end of the file");

    // Place every tensor and check it lies inside the file and overlaps no other.
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) relative to data_offset_
    spans.reserve(n_tensors);
    for (size_t i = 0; i < tensors_.size(); ++i) {
        TensorView& tv = tensors_[i];
        const uint64_t off = raw[i].offset;
        const uint64_t bytes = static_cast<uint64_t>(tv.n_bytes());
        if (off % alignment_ != 0) {
            return error("tensor '" + tv.name + "': offset " + std::to_string(off) +
                         " is not aligned to " + std::to_string(alignment_));
        }
        const uint64_t avail = size - data_offset_;
        if (off > avail || bytes > avail - off) {
            return error("tensor '" + tv.name + "': data [" + std::to_string(off) + ", +" +
                         std::to_string(bytes) + ") runs past the end of the file (truncated?)");
        }
        tv.data = data + data_offset_ + off;
        spans.emplace_back(off, off + bytes);
    }
    std::vector<size_t> order(spans.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return spans[a].first < spans[b].first; });
    for (size_t k = 1; k < order.size(); ++k) {
        const auto& prev = spans[order[k - 1]];
        const auto& cur = spans[order[k]];
        if (cur.first < prev.second) {
            return error("tensors '" + tensors_[order[k - 1]].name + "' and '" +
                         tensors_[order[k]].name + "' overlap");
        }
    }
    return Status::ok();
}

const GgufValue* GgufFile::find(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorView* GgufFile::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Expected<std::optional<std::string>> GgufFile::get_string(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<std::string>();
    if (!v->is_string()) return error("metadata '" + std::string(key) + "' is not a string");
    return std::optional<std::string>(*v->as_string());
}

Expected<std::optional<int64_t>> GgufFile::get_int(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<int64_t>();
    auto i = v->as_int();
    if (!v->is_integer() || !i) return error("metadata '" + std::string(key) + "' is not an integer");
    return std::optional<int64_t>(*i);
}

Expected<std::optional<double>> GgufFile::get_float(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<double>();
    auto d = v->as_float();
    if (!d || v->is_array() || v->is_string()) {
        return error("metadata '" + std::string(key) + "' is not a number");
    }
    return std::optional<double>(*d);
}

Expected<std::optional<bool>> GgufFile::get_bool(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<bool>();
    auto i = v->as_int();
    if (!v->is_integer() || !i) return error("metadata '" + std::string(key) + "' is not a bool");
    return std::optional<bool>(*i != 0);
}

Expected<std::optional<std::vector<std::string>>> GgufFile::get_string_array(
    std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<std::vector<std::string>>();
    if (!v->is_array() || v->elem_type != GgufType::kString) {
        return error("metadata '" + std::string(key) + "' is not an array of strings");
    }
    std::vector<std::string> out;
    out.reserve(v->as_array()->size());
    for (const auto& e : *v->as_array()) out.push_back(*e.as_string());
    return std::optional<std::vector<std::string>>(std::move(out));
}

Expected<std::optional<std::vector<int64_t>>> GgufFile::get_int_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<std::vector<int64_t>>();
    if (!v->is_array()) return error("metadata '" + std::string(key) + "' is not an array");
    std::vector<int64_t> out;
    out.reserve(v->as_array()->size());
    for (const auto& e : *v->as_array()) {
        auto i = e.as_int();
        if (!e.is_integer() || !i) {
            return error("metadata '" + std::string(key) + "' is not an array of integers");
        }
        out.push_back(*i);
    }
    return std::optional<std::vector<int64_t>>(std::move(out));
}

Expected<std::optional<std::vector<float>>> GgufFile::get_float_array(std::string_view key) const {
    const GgufValue* v = find(key);
    if (!v) return std::optional<std::vector<float>>();
    if (!v->is_array()) return error("metadata '" + std::string(key) + "' is not an array");
    std::vector<float> out;
    out.reserve(v->as_array()->size());
    for (const auto& e : *v->as_array()) {
        auto d = e.as_float();
        if (!d || e.is_array() || e.is_string()) {
            return error("metadata '" + std::string(key) + "' is not an array of numbers");
        }
        out.push_back(static_cast<float>(*d));
    }
    return std::optional<std::vector<float>>(std::move(out));
}

void GgufFile::discard(const void* p, size_t n) const {
    if (!file_ || n == 0) return;
    const auto lo = reinterpret_cast<uintptr_t>(p);
    const auto hi = lo + n;
    const auto base = reinterpret_cast<uintptr_t>(file_->data());
    if (lo < base || hi > base + file_->size()) return;
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (lo + page - 1) / page * page;
    const uintptr_t last = hi / page * page;
    if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace ferrox

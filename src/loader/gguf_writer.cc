#include "loader/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "core/check.h"

namespace ferrox {

namespace {
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
    put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
}

void put_value(std::vector<uint8_t>& out, const GgufValue& v) {
    switch (v.type) {
        case GgufType::kUint8: put<uint8_t>(out, static_cast<uint8_t>(*v.as_int())); break;
        case GgufType::kInt8: put<int8_t>(out, static_cast<int8_t>(*v.as_int())); break;
        case GgufType::kUint16: put<uint16_t>(out, static_cast<uint16_t>(*v.as_int())); break;
        case GgufType::kInt16: put<int16_t>(out, static_cast<int16_t>(*v.as_int())); break;
        case GgufType::kUint32: put<uint32_t>(out, static_cast<uint32_t>(*v.as_int())); break;
        case GgufType::kInt32: put<int32_t>(out, static_cast<int32_t>(*v.as_int())); break;
        case GgufType::kUint64: put<uint64_t>(out, std::get<uint64_t>(v.v)); break;
        case GgufType::kInt64: put<int64_t>(out, *v.as_int()); break;
        case GgufType::kFloat32: put<float>(out, static_cast<float>(*v.as_float())); break;
        case GgufType::kFloat64: put<double>(out, *v.as_float()); break;
        case GgufType::kBool: put<uint8_t>(out, *v.as_int() ? 1 : 0); break;
        case GgufType::kString: put_string(out, *v.as_string()); break;
        case GgufType::kArray:
            put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
            put<uint64_t>(out, v.as_array()->size());
            for (const auto& e : *v.as_array()) put_value(out, e);
            break;
    }
}
}  // namespace

void GgufWriter::add_value(const std::string& key, const GgufValue& value) {
    put_string(kv_bytes_, key);
    put<uint32_t>(kv_bytes_, static_cast<uint32_t>(value.type));
    put_value(kv_bytes_, value);
    ++n_kv_;
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
    add_value(key, GgufValue{GgufType::kString, GgufType::kUint8, value});
}
void GgufWriter::add_u32(const std::string& key, uint32_t value) {
    add_value(key, GgufValue{GgufType::kUint32, GgufType::kUint8, uint64_t{value}});
}
void GgufWriter::add_i32(const std::string& key, int32_t value) {
    add_value(key, GgufValue{GgufType::kInt32, GgufType::kUint8, int64_t{value}});
}
void GgufWriter::add_f32(const std::string& key, float value) {
    add_value(key, GgufValue{GgufType::kFloat32, GgufType::kUint8, double{value}});
}
void GgufWriter::add_bool(const std::string& key, bool value) {
    add_value(key, GgufValue{GgufType::kBool, GgufType::kUint8, uint64_t{value ? 1u : 0u}});
}
void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (const auto& s : values) items.push_back(GgufValue{GgufType::kString, GgufType::kUint8, s});
    add_value(key, GgufValue{GgufType::kArray, GgufType::kString, std::move(items)});
}
void GgufWriter::add_f32_array(const std::string& key, const std::vector<float>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (float f : values) items.push_back(GgufValue{GgufType::kFloat32, GgufType::kUint8, double{f}});
    add_value(key, GgufValue{GgufType::kArray, GgufType::kFloat32, std::move(items)});
}
void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& values) {
    std::vector<GgufValue> items;
    items.reserve(values.size());
    for (int32_t i : values) items.push_back(GgufValue{GgufType::kInt32, GgufType::kUint8, int64_t{i}});
    add_value(key, GgufValue{GgufType::kArray, GgufType::kInt32, std::move(items)});
}

void GgufWriter::add_tensor(const std::string& name, DType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
    int64_t n_rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) n_rows *= ne[i];
    CHECK(static_cast<int64_t>(data.size()) == dtype_row_bytes(type, ne[0]) * n_rows);
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
}

std::vector<uint8_t> GgufWriter::finish() const {
    std::vector<uint8_t> out;
    put<uint32_t>(out, 0x46554747);
    put<uint32_t>(out, 3);
    put<uint64_t>(out, tensors_.size());
    put<uint64_t>(out, n_kv_);
    out.insert(out.end(), kv_bytes_.begin(), kv_bytes_.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
        put_string(out, t.name);
        put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
        for (int64_t n : t.ne) put<uint64_t>(out, static_cast<uint64_t>(n));
        put<uint32_t>(out, static_cast<uint32_t>(t.type));
        put<uint64_t>(out, offset);
        offsets.push_back(offset);
        offset += (t.data.size() + alignment_ - 1) / alignment_ * alignment_;
    }
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
    const size_t base = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
        out.resize(base + offsets[i], 0);
        out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return out;
}

Status GgufWriter::write_file(const std::string& path) const {
    std::vector<uint8_t> bytes = finish();
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return io_error(path + ": cannot create");
    size_t n = std::fwrite(bytes.data(), 1, bytes.size(), f);
    int rc = std::fclose(f);
    if (n != bytes.size() || rc != 0) return io_error(path + ": write failed");
    return Status::ok();
}

}  // namespace ferrox

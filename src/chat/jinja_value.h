#pragma once
// The value type of ferrox's Jinja engine: a Python-like dynamic value (None, bool, int, float,
// str, list/tuple, dict with insertion order, plus jinja's Undefined, namespace(), callables and
// the `loop` object). Internal to src/chat; the public API is jinja.h.
//
// Values are immutable once built (HF renders chat templates in jinja's ImmutableSandbox, where
// lists and dicts cannot be mutated), so copies share their payload through one shared_ptr:
// copying a Value is a refcount increment, never a deep copy. The one mutable payload is a
// Namespace, which is what `{% set ns.x = ... %}` exists for.
//
// Thread safety: a Value tree built by one render is used by that render's thread only; the
// literals inside a parsed template are shared read-only between threads (refcounts are atomic).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ferrox::jinja {

struct Array;
struct Object;
struct Namespace;
struct Callable;
struct LoopInfo;

class Value {
  public:
    enum class Kind : uint8_t {
        kUndefined,
        kNone,
        kBool,
        kInt,
        kFloat,
        kString,
        kArray,   // list or tuple (Array::is_tuple)
        kObject,  // dict with string keys, insertion-ordered
        kNamespace,
        kCallable,  // global function, macro or bound method
        kLoop,      // the `loop` variable of a for block
    };
    // Why a value is undefined, for the error message when it is used.
    enum class UndefinedWhy : uint8_t {
        kName,
        kDictAttr,
        kListAttr,
        kStrAttr,
        kOtherAttr,
        kUnsafe,  // a mutating method the sandbox refuses (list.append, dict.update...)
        kIndex,
    };

    Value() : kind_(Kind::kUndefined), why_(UndefinedWhy::kName), i_(0) {}
    // An undefined value remembering the (AST-owned, so stable) name that produced it.
    static Value undefined(const std::string* name, UndefinedWhy why = UndefinedWhy::kName) {
        Value v;
        v.name_ = name;
        v.why_ = why;
        return v;
    }
    // Same, for a name owned by a string value (a computed key).
    static Value undefined_owned(std::shared_ptr<const std::string> name, UndefinedWhy why) {
        Value v;
        v.why_ = why;
        v.p_ = std::move(name);
        return v;
    }
    static Value none() {
        Value v;
        v.kind_ = Kind::kNone;
        return v;
    }
    static Value boolean(bool b) {
        Value v;
        v.kind_ = Kind::kBool;
        v.b_ = b;
        return v;
    }
    static Value integer(int64_t i) {
        Value v;
        v.kind_ = Kind::kInt;
        v.i_ = i;
        return v;
    }
    static Value number(double f) {
        Value v;
        v.kind_ = Kind::kFloat;
        v.f_ = f;
        return v;
    }
    static Value string(std::string s);
    static Value string(std::shared_ptr<const std::string> s) {
        Value v;
        v.kind_ = Kind::kString;
        v.p_ = std::move(s);
        return v;
    }
    static Value array(std::shared_ptr<Array> a);
    static Value object(std::shared_ptr<Object> o);
    static Value ns(std::shared_ptr<Namespace> n);
    static Value callable(std::shared_ptr<Callable> c);
    static Value loop(std::shared_ptr<LoopInfo> l);

    Kind kind() const { return kind_; }
    bool is_undefined() const { return kind_ == Kind::kUndefined; }
    bool is_none() const { return kind_ == Kind::kNone; }
    bool is_bool() const { return kind_ == Kind::kBool; }
    bool is_int() const { return kind_ == Kind::kInt; }  // excludes bool (check is_bool too)
    bool is_float() const { return kind_ == Kind::kFloat; }
    // Python's numbers: bool is an int subclass.
    bool is_number() const {
        return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool;
    }
    bool is_string() const { return kind_ == Kind::kString; }
    bool is_array() const { return kind_ == Kind::kArray; }
    bool is_object() const { return kind_ == Kind::kObject; }
    bool is_namespace() const { return kind_ == Kind::kNamespace; }
    bool is_callable() const { return kind_ == Kind::kCallable; }
    bool is_loop() const { return kind_ == Kind::kLoop; }

    bool as_bool() const { return b_; }
    int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
    double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
    const std::string& str() const { return *static_cast<const std::string*>(p_.get()); }
    const Array& arr() const { return *static_cast<const Array*>(p_.get()); }
    const Object& obj() const { return *static_cast<const Object*>(p_.get()); }
    // The one mutable payload (see the file comment).
    Namespace& nspace() const {
        return *const_cast<Namespace*>(static_cast<const Namespace*>(p_.get()));
    }
    const Callable& fn() const { return *static_cast<const Callable*>(p_.get()); }
    const LoopInfo& loop_info() const { return *static_cast<const LoopInfo*>(p_.get()); }
    const std::shared_ptr<const void>& payload() const { return p_; }

    const std::string* undefined_name() const {
        return p_ ? static_cast<const std::string*>(p_.get()) : name_;
    }
    UndefinedWhy undefined_why() const { return why_; }

  private:
    Kind kind_;
    UndefinedWhy why_;
    union {
        bool b_;
        int64_t i_;
        double f_;
        const std::string* name_;
    };
    std::shared_ptr<const void> p_;
};

struct Array {
    std::vector<Value> items;
    bool is_tuple = false;
    uint32_t depth = 1;  // nesting depth of lists/dicts, capped to keep recursion bounded
};

struct Object {
    std::vector<std::pair<std::string, Value>> items;
    uint32_t depth = 1;
    const Value* find(std::string_view key) const {
        for (const auto& kv : items)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
    // Python dict assignment: replaces in place, or appends a new key.
    void set(std::string key, Value v) {
        for (auto& kv : items)
            if (kv.first == key) {
                kv.second = std::move(v);
                return;
            }
        items.emplace_back(std::move(key), std::move(v));
    }
};

struct Namespace {
    std::vector<std::pair<std::string, Value>> attrs;
    const Value* find(std::string_view key) const {
        for (const auto& kv : attrs)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
    void set(std::string_view key, Value v) {
        for (auto& kv : attrs)
            if (kv.first == key) {
                kv.second = std::move(v);
                return;
            }
        attrs.emplace_back(std::string(key), std::move(v));
    }
};

// Nesting depth of a value for the container-depth cap (0 for scalars).
inline uint32_t value_depth(const Value& v) {
    if (v.is_array()) return v.arr().depth;
    if (v.is_object()) return v.obj().depth;
    return 0;
}

Value make_list(std::vector<Value> items, bool is_tuple = false);
Value make_object(std::vector<std::pair<std::string, Value>> items);

// Python truthiness (Undefined is falsy, a namespace or callable truthy).
bool truthy(const Value& v);

// Python's type name as jinja's messages show it ("str", "int", "dict", "list", "NoneType").
const char* type_name(const Value& v);

// Python's float repr ("1.0", "0.1", "1e-05", "1e+16", "inf", "nan").
void append_float_repr(std::string& out, double d);
// str(v) as Python prints it: strings as they are, None -> "None", containers as their repr.
// Undefined prints as "" (jinja's default Undefined).
void append_str(std::string& out, const Value& v);
std::string to_str(const Value& v);
// repr(v) (strings quoted as Python does).
void append_repr(std::string& out, const Value& v);

// Python ==. Numbers compare by value (True == 1), containers deeply, dicts ignore order.
bool equals(const Value& a, const Value& b);

// Length of a UTF-8 string in code points (Python's len on str).
size_t utf8_length(std::string_view s);
bool is_ascii(std::string_view s);
// Decodes the code point at s[i] and advances i; a byte that does not start valid UTF-8
// decodes as itself (so arbitrary bytes never stall or crash a loop). Precondition: i < size.
uint32_t utf8_next(std::string_view s, size_t& i);
void utf8_append(std::string& out, uint32_t cp);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...), as the
// `tojson` filter HF installs. indent < 0 means None; indent_str, when non-null, overrides it
// (json.dumps accepts a string indent). Returns false (with *error set) for values JSON cannot
// represent (Undefined, callables, namespaces...).
struct JsonDumpOptions {
    int indent = -1;
    const std::string* indent_str = nullptr;
    std::string item_sep;  // default: ", " or "," when indented
    std::string key_sep = ": ";
    bool sort_keys = false;
    bool ensure_ascii = false;
};
bool json_dump(std::string& out, const Value& v, const JsonDumpOptions& opts, std::string* error);

// Parses JSON text into a Value (objects keep their key order). max_depth bounds nesting.
bool json_parse(std::string_view text, Value* out, std::string* error, int max_depth = 256);

}  // namespace ferrox::jinja

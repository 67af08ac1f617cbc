#include <cmath>
#include <cstring>

#include "chat/jinja_runtime.h"

namespace ferrox::jinja {

namespace {
constexpr uint32_t kMaxValueDepth = 128;
const std::string kLoopName = "loop";

bool py_floor_div(int64_t a, int64_t b, int64_t* q) {
    if (b == -1 && a == INT64_MIN) return false;
    int64_t d = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --d;
    *q = d;
    return true;
}
int64_t py_mod(int64_t a, int64_t b) {
    if (b == -1) return 0;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    return m;
}
double py_fmod(double a, double b) {
    double m = std::fmod(a, b);
    if (m != 0 && ((m < 0) != (b < 0))) m += b;
    if (m == 0) m = std::copysign(0.0, b);
    return m;
}
}  // namespace

Interp::Interp(const JinjaOptions& options, const Value& context) : opts_(options) {
    root_ = std::make_shared<Scope>();
    if (context.is_object())
        for (const auto& kv : context.obj().items) root_->vars.emplace_back(kv.first, kv.second);
    scope_ = root_;
}

Interp::~Interp() {
    // Namespaces may hold lists holding themselves; clearing them frees such cycles.
    for (auto& ns : namespaces_) ns->attrs.clear();
    for (auto& scope : macro_scopes_) scope->vars.clear();
    if (root_) root_->vars.clear();
}

void Interp::fail(int line, const std::string& msg) {
    if (failed_) return;
    failed_ = true;
    status_ = invalid_argument("jinja error at line " + std::to_string(line) + ": " + msg);
}

void Interp::fail_limit(int line, const std::string& msg) {
    if (failed_) return;
    failed_ = true;
    status_ = Status(StatusCode::kResourceExhausted,
                     "jinja limit at line " + std::to_string(line) + ": " + msg);
}

void Interp::fail_undefined(int line, const Value& v) {
    const std::string* n = v.undefined_name();
    std::string name = n ? *n : "value";
    switch (v.undefined_why()) {
        case Value::UndefinedWhy::kName:
            fail(line, "'" + name + "' is undefined");
            return;
        case Value::UndefinedWhy::kDictAttr:
            fail(line, "'dict object' has no attribute '" + name + "'");
            return;
        case Value::UndefinedWhy::kListAttr:
            fail(line, "'list object' has no attribute '" + name + "'");
            return;
        case Value::UndefinedWhy::kStrAttr:
            fail(line, "'str object' has no attribute '" + name + "'");
            return;
        case Value::UndefinedWhy::kIndex:
            fail(line, "index or key is undefined");
            return;
        case Value::UndefinedWhy::kUnsafe:
            fail(line, "access to attribute '" + name + "' is unsafe");
            return;
        default:
            fail(line, "object has no attribute '" + name + "'");
            return;
    }
}

bool Interp::charge(size_t bytes, int line) {
    alloc_ += bytes;
    if (alloc_ > opts_.max_alloc_bytes) {
        fail_limit(line, "template allocated more than " + std::to_string(opts_.max_alloc_bytes) +
                             " bytes");
        return false;
    }
    return true;
}

Value Interp::new_string(std::string s, int line) {
    if (s.size() > opts_.max_output_bytes) {
        fail_limit(line, "string longer than " + std::to_string(opts_.max_output_bytes) + " bytes");
        return Value();
    }
    if (!charge(s.size(), line)) return Value();
    return Value::string(std::move(s));
}

Value Interp::new_list(std::vector<Value> items, int line, bool is_tuple) {
    if (!charge(items.size() * sizeof(Value), line)) return Value();
    Value v = make_list(std::move(items), is_tuple);
    if (v.arr().depth > kMaxValueDepth) {
        fail_limit(line, "lists nested too deeply");
        return Value();
    }
    return v;
}

Value Interp::new_object(std::vector<std::pair<std::string, Value>> items, int line) {
    if (!charge(items.size() * (sizeof(Value) + 32), line)) return Value();
    Value d = make_object(std::move(items));
    if (d.obj().depth > kMaxValueDepth) {
        fail_limit(line, "dicts nested too deeply");
        return Value();
    }
    return d;
}

Value Interp::new_namespace() {
    auto ns = std::make_shared<Namespace>();
    namespaces_.push_back(ns);
    return Value::ns(std::move(ns));
}

bool Interp::charge_steps(uint64_t n, int line) {
    steps_ += n;
    return step(line);
}

bool Interp::step(int line) {
    if (++steps_ > opts_.max_steps) {
        fail_limit(line, "template ran more than " + std::to_string(opts_.max_steps) + " steps");
        return false;
    }
    return !failed_;
}

bool Interp::append_out(std::string_view s, int line) {
    if (out_->size() + s.size() > opts_.max_output_bytes) {
        fail_limit(line, "output longer than " + std::to_string(opts_.max_output_bytes) + " bytes");
        return false;
    }
    out_->append(s);
    return true;
}

Status Interp::render(const StmtList& body, std::string* out) {
    out_ = out;
    exec(body);
    if (failed_) return status_;
    return Status::ok();
}

Value Interp::lookup(const std::string& name) const {
    for (const Scope* s = scope_.get(); s; s = s->parent.get())
        for (const auto& kv : s->vars)
            if (kv.first == name) return kv.second;
    if (GlobalFn g = find_global(name)) {
        auto c = std::make_shared<Callable>();
        c->type = Callable::Type::kGlobal;
        c->name = name;
        c->global = g;
        return Value::callable(std::move(c));
    }
    return Value::undefined(&name);
}

// ---------------------------------------------------------------------------------------------
// Expressions

Value Interp::eval(const Expr& e) {
    if (!step(e.line)) return Value();
    switch (e.kind) {
        case ExprKind::kLiteral:
            return e.value;
        case ExprKind::kName:
            return lookup(e.name);
        case ExprKind::kPlaceholder:
            return placeholder_;
        case ExprKind::kList:
        case ExprKind::kTuple: {
            std::vector<Value> items;
            items.reserve(e.args.size());
            for (const auto& a : e.args) {
                items.push_back(eval(*a));
                if (failed_) return Value();
            }
            return new_list(std::move(items), e.line, e.kind == ExprKind::kTuple);
        }
        case ExprKind::kDict: {
            std::vector<std::pair<std::string, Value>> items;
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value k = eval(*e.args[i]);
                if (failed_) return Value();
                if (!k.is_string()) {
                    fail(e.line, "only string keys are supported in dict literals");
                    return Value();
                }
                Value v = eval(*e.args[i + 1]);
                if (failed_) return Value();
                bool replaced = false;
                for (auto& kv : items)
                    if (kv.first == k.str()) {
                        kv.second = std::move(v);
                        replaced = true;
                        break;
                    }
                if (!replaced) items.emplace_back(k.str(), std::move(v));
            }
            return new_object(std::move(items), e.line);
        }
        case ExprKind::kGetAttr: {
            Value obj = eval(*e.args[0]);
            if (failed_) return Value();
            if (obj.is_undefined()) {
                fail_undefined(e.line, obj);
                return Value();
            }
            return getattr(obj, e.name, e);
        }
        case ExprKind::kGetItem: {
            Value obj = eval(*e.args[0]);
            if (failed_) return Value();
            Value key = eval(*e.args[1]);
            if (failed_) return Value();
            if (obj.is_undefined()) {
                fail_undefined(e.line, obj);
                return Value();
            }
            return getitem(obj, key, e);
        }
        case ExprKind::kSlice:
            return eval_slice(e);
        case ExprKind::kCall:
            return eval_call(e);
        case ExprKind::kFilter: {
            Value subject = e.args[0] ? eval(*e.args[0]) : placeholder_;
            if (failed_) return Value();
            CallArgs args;
            if (!eval_args(e, 1, &args)) return Value();
            return e.filter(*this, e, std::move(subject), args);
        }
        case ExprKind::kTest: {
            Value subject = eval(*e.args[0]);
            if (failed_) return Value();
            CallArgs args;
            if (!eval_args(e, 1, &args)) return Value();
            bool r = e.test(*this, e, subject, args);
            if (failed_) return Value();
            return Value::boolean(e.negated ? !r : r);
        }
        case ExprKind::kUnary: {
            Value v = eval(*e.args[0]);
            if (failed_) return Value();
            if (e.unary_op == 'n') return Value::boolean(!truthy(v));
            if (v.is_undefined()) {
                fail_undefined(e.line, v);
                return Value();
            }
            if (!v.is_number()) {
                fail(e.line, std::string("bad operand type for unary ") + e.unary_op + ": '" +
                                 type_name(v) + "'");
                return Value();
            }
            if (e.unary_op == '+') return v.is_bool() ? Value::integer(v.as_int()) : v;
            if (v.is_float()) return Value::number(-v.as_double());
            if (v.as_int() == INT64_MIN) {
                fail(e.line, "integer overflow");
                return Value();
            }
            return Value::integer(-v.as_int());
        }
        case ExprKind::kAnd: {
            Value a = eval(*e.args[0]);
            if (failed_ || !truthy(a)) return a;
            return eval(*e.args[1]);
        }
        case ExprKind::kOr: {
            Value a = eval(*e.args[0]);
            if (failed_ || truthy(a)) return a;
            return eval(*e.args[1]);
        }
        case ExprKind::kBinary:
            return eval_binary(e);
        case ExprKind::kCompare:
            return eval_compare(e);
        case ExprKind::kCond: {
            Value c = eval(*e.args[0]);
            if (failed_) return Value();
            if (truthy(c)) return eval(*e.args[1]);
            if (e.args[2]) return eval(*e.args[2]);
            return Value();
        }
    }
    return Value();
}

bool Interp::eval_args(const Expr& e, size_t first, CallArgs* args) {
    args->pos.reserve(e.args.size() - first);
    for (size_t i = first; i < e.args.size(); ++i) {
        args->pos.push_back(eval(*e.args[i]));
        if (failed_) return false;
    }
    for (const auto& kv : e.kwargs) {
        args->kw.emplace_back(kv.first, eval(*kv.second));
        if (failed_) return false;
    }
    return true;
}

Value Interp::eval_binary(const Expr& e) {
    Value a = eval(*e.args[0]);
    if (failed_) return Value();
    Value b = eval(*e.args[1]);
    if (failed_) return Value();
    BinOp op = e.bin_op;
    if (op == BinOp::kConcat) {
        std::string s = to_str(a);
        append_str(s, b);
        return new_string(std::move(s), e.line);
    }
    if (a.is_undefined()) {
        fail_undefined(e.line, a);
        return Value();
    }
    if (op == BinOp::kMod && a.is_string()) {
        // Before the Undefined check below: Python's str % Undefined formats it (as "" for
        // %s), since str.__mod__ runs first.
        std::string s;
        if (!py_percent_format(*this, e, a.str(), b, &s)) return Value();
        return new_string(std::move(s), e.line);
    }
    if (b.is_undefined()) {
        fail_undefined(e.line, b);
        return Value();
    }
    static const char* const kSym[] = {"+", "-", "*", "/", "//", "%", "**", "~"};
    auto type_error = [&] {
        fail(e.line, std::string("unsupported operand type(s) for ") + kSym[static_cast<int>(op)] +
                         ": '" + type_name(a) + "' and '" + type_name(b) + "'");
        return Value();
    };
    if (a.is_number() && b.is_number()) {
        bool fl = a.is_float() || b.is_float();
        if (op == BinOp::kDiv) {
            if (b.as_double() == 0) {
                fail(e.line, "division by zero");
                return Value();
            }
            return Value::number(a.as_double() / b.as_double());
        }
        if (fl) {
            double x = a.as_double(), y = b.as_double();
            switch (op) {
                case BinOp::kAdd:
                    return Value::number(x + y);
                case BinOp::kSub:
                    return Value::number(x - y);
                case BinOp::kMul:
                    return Value::number(x * y);
                case BinOp::kFloorDiv:
                    if (y == 0) break;
                    return Value::number(std::floor(x / y));
                case BinOp::kMod:
                    if (y == 0) break;
                    return Value::number(py_fmod(x, y));
                case BinOp::kPow:
                    return Value::number(std::pow(x, y));
                default:
                    break;
            }
            fail(e.line, "float division by zero");
            return Value();
        }
        int64_t x = a.as_int(), y = b.as_int(), r = 0;
        bool ok = true;
        switch (op) {
            case BinOp::kAdd:
                ok = !__builtin_add_overflow(x, y, &r);
                break;
            case BinOp::kSub:
                ok = !__builtin_sub_overflow(x, y, &r);
                break;
            case BinOp::kMul:
                ok = !__builtin_mul_overflow(x, y, &r);
                break;
            case BinOp::kFloorDiv:
                if (y == 0) {
                    fail(e.line, "integer division or modulo by zero");
                    return Value();
                }
                ok = py_floor_div(x, y, &r);
                break;
            case BinOp::kMod:
                if (y == 0) {
                    fail(e.line, "integer division or modulo by zero");
                    return Value();
                }
                r = py_mod(x, y);
                break;
            case BinOp::kPow: {
                if (y < 0)
                    return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
                r = 1;
                int64_t base = x;
                int64_t n = y;
                while (n > 0 && ok) {
                    if (n & 1) ok = !__builtin_mul_overflow(r, base, &r);
                    n >>= 1;
                    if (n > 0 && ok) ok = !__builtin_mul_overflow(base, base, &base);
                }
                break;
            }
            default:
                break;
        }
        if (!ok) {
            fail(e.line, "integer overflow");
            return Value();
        }
        return Value::integer(r);
    }
    if (op == BinOp::kAdd) {
        if (a.is_string() && b.is_string()) {
            std::string s;
            s.reserve(a.str().size() + b.str().size());
            s += a.str();
            s += b.str();
            return new_string(std::move(s), e.line);
        }
        if (a.is_array() && b.is_array() && a.arr().is_tuple == b.arr().is_tuple) {
            std::vector<Value> items = a.arr().items;
            items.insert(items.end(), b.arr().items.begin(), b.arr().items.end());
            return new_list(std::move(items), e.line, a.arr().is_tuple);
        }
        if (a.is_string() && !b.is_string()) {
            fail(e.line,
                 std::string("can only concatenate str (not \"") + type_name(b) + "\") to str");
            return Value();
        }
        return type_error();
    }
    if (op == BinOp::kMul) {
        const Value* seq = nullptr;
        const Value* n = nullptr;
        if ((a.is_string() || a.is_array()) && (b.is_int() || b.is_bool())) {
            seq = &a;
            n = &b;
        } else if ((b.is_string() || b.is_array()) && (a.is_int() || a.is_bool())) {
            seq = &b;
            n = &a;
        }
        if (!seq) return type_error();
        int64_t count = std::max<int64_t>(0, n->as_int());
        size_t unit =
            seq->is_string() ? seq->str().size() : seq->arr().items.size() * sizeof(Value);
        if (unit != 0 && static_cast<uint64_t>(count) > (opts_.max_output_bytes / unit) + 1) {
            fail_limit(e.line, "sequence repetition too large");
            return Value();
        }
        if (seq->is_string()) {
            std::string s;
            s.reserve(unit * static_cast<size_t>(count));
            for (int64_t i = 0; i < count; ++i) s += seq->str();
            return new_string(std::move(s), e.line);
        }
        std::vector<Value> items;
        for (int64_t i = 0; i < count; ++i)
            items.insert(items.end(), seq->arr().items.begin(), seq->arr().items.end());
        return new_list(std::move(items), e.line, seq->arr().is_tuple);
    }
    return type_error();
}

int Interp::compare(const Value& a, const Value& b, const Expr& at, bool* ok) {
    *ok = true;
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) {
            double x = a.as_double(), y = b.as_double();
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = a.as_int(), y = b.as_int();
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.is_string() && b.is_string()) {
        int c = a.str().compare(b.str());
        return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (a.is_array() && b.is_array() && a.arr().is_tuple == b.arr().is_tuple) {
        const auto& x = a.arr().items;
        const auto& y = b.arr().items;
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (equals(x[i], y[i])) continue;
            return compare(x[i], y[i], at, ok);
        }
        return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
    }
    if (a.is_undefined() || b.is_undefined()) {
        fail_undefined(at.line, a.is_undefined() ? a : b);
    } else {
        fail(at.line, std::string("'<' not supported between instances of '") + type_name(a) +
                          "' and '" + type_name(b) + "'");
    }
    *ok = false;
    return 0;
}

bool Interp::contains(const Value& c, const Value& item, const Expr& at) {
    if (c.is_string() && !charge_steps(c.str().size() / 8, at.line)) return false;
    if (c.is_array() && !charge_steps(c.arr().items.size(), at.line)) return false;
    if (c.is_object() && !charge_steps(c.obj().items.size(), at.line)) return false;
    switch (c.kind()) {
        case Value::Kind::kString:
            if (!item.is_string()) {
                if (item.is_undefined()) {
                    fail_undefined(at.line, item);
                    return false;
                }
                fail(at.line, std::string("'in <string>' requires string as left operand, not ") +
                                  type_name(item));
                return false;
            }
            return c.str().find(item.str()) != std::string::npos;
        case Value::Kind::kArray:
            for (const auto& v : c.arr().items)
                if (equals(v, item)) return true;
            return false;
        case Value::Kind::kObject:
            return item.is_string() && c.obj().find(item.str()) != nullptr;
        case Value::Kind::kUndefined:
            return false;
        default:
            fail(at.line, std::string("argument of type '") + type_name(c) + "' is not iterable");
            return false;
    }
}

Value Interp::eval_compare(const Expr& e) {
    Value left = eval(*e.args[0]);
    if (failed_) return Value();
    for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        if (failed_) return Value();
        bool r = false;
        CmpOp op = e.cmp_ops[i];
        switch (op) {
            case CmpOp::kEq:
                r = equals(left, right);
                break;
            case CmpOp::kNe:
                r = !equals(left, right);
                break;
            case CmpOp::kIn:
                r = contains(right, left, e);
                break;
            case CmpOp::kNotIn:
                r = !contains(right, left, e);
                break;
            default: {
                bool ok;
                int c = compare(left, right, e, &ok);
                if (!ok) return Value();
                r = op == CmpOp::kLt   ? c < 0
                    : op == CmpOp::kLe ? c <= 0
                    : op == CmpOp::kGt ? c > 0
                                       : c >= 0;
            }
        }
        if (failed_) return Value();
        if (!r) return Value::boolean(false);
        left = std::move(right);
    }
    return Value::boolean(true);
}

namespace {
// Python slice indices for a sequence of length n.
void slice_indices(int64_t n, const Value* start, const Value* stop, int64_t step, int64_t* lo,
                   int64_t* hi) {
    auto clamp = [&](const Value* v, int64_t dflt, bool is_start) {
        if (!v || v->is_none()) return dflt;
        int64_t x = v->as_int();
        if (x < 0) {
            x += n;
            if (x < 0) x = step < 0 ? -1 : 0;
        } else if (x >= n) {
            x = step < 0 ? n - 1 : n;
        }
        (void)is_start;
        return x;
    };
    if (step > 0) {
        *lo = clamp(start, 0, true);
        *hi = clamp(stop, n, false);
    } else {
        *lo = clamp(start, n - 1, true);
        *hi = clamp(stop, -1, false);
    }
}
}  // namespace

Value Interp::eval_slice(const Expr& e) {
    Value obj = eval(*e.args[0]);
    if (failed_) return Value();
    Value parts[3];
    for (int i = 0; i < 3; ++i) {
        if (e.args[static_cast<size_t>(i) + 1]) {
            parts[i] = eval(*e.args[static_cast<size_t>(i) + 1]);
            if (failed_) return Value();
            if (!parts[i].is_none() && !parts[i].is_int() && !parts[i].is_bool()) {
                fail(e.line, "slice indices must be integers or None");
                return Value();
            }
        } else {
            parts[i] = Value::none();
        }
    }
    if (obj.is_undefined()) {
        fail_undefined(e.line, obj);
        return Value();
    }
    int64_t step = parts[2].is_none() ? 1 : parts[2].as_int();
    if (step == 0) {
        fail(e.line, "slice step cannot be zero");
        return Value();
    }
    auto pick = [&](int64_t n, auto&& emit) {
        int64_t lo, hi;
        slice_indices(n, &parts[0], &parts[1], step, &lo, &hi);
        if (step > 0)
            for (int64_t i = lo; i < hi; i += step) emit(i);
        else
            for (int64_t i = lo; i > hi; i += step) emit(i);
    };
    if (obj.is_array()) {
        const auto& items = obj.arr().items;
        std::vector<Value> out;
        pick(static_cast<int64_t>(items.size()),
             [&](int64_t i) { out.push_back(items[static_cast<size_t>(i)]); });
        return new_list(std::move(out), e.line, obj.arr().is_tuple);
    }
    if (obj.is_string()) {
        const std::string& s = obj.str();
        std::string out;
        if (is_ascii(s)) {
            pick(static_cast<int64_t>(s.size()),
                 [&](int64_t i) { out += s[static_cast<size_t>(i)]; });
        } else {
            std::vector<uint32_t> offs;  // byte offset of each code point, plus the end
            for (size_t i = 0; i < s.size();) {
                offs.push_back(static_cast<uint32_t>(i));
                utf8_next(s, i);
            }
            offs.push_back(static_cast<uint32_t>(s.size()));
            pick(static_cast<int64_t>(offs.size() - 1), [&](int64_t i) {
                size_t k = static_cast<size_t>(i);
                out.append(s, offs[k], offs[k + 1] - offs[k]);
            });
        }
        return new_string(std::move(out), e.line);
    }
    return Value();  // jinja: slicing an unsliceable value gives Undefined
}

Value Interp::eval_call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == ExprKind::kGetAttr) {
        // obj.method(...) without materializing a bound method.
        Value self = eval(*callee.args[0]);
        if (failed_) return Value();
        if (self.is_undefined()) {
            fail_undefined(e.line, self);
            return Value();
        }
        CallArgs args;
        if (!eval_args(e, 1, &args)) return Value();
        bool found = false;
        Value r = call_method(self, callee.name, args, e, &found);
        if (found || failed_) return r;
        Value fn = getattr(self, callee.name, callee);
        if (failed_) return Value();
        return call(fn, args, e);
    }
    Value fn = eval(callee);
    if (failed_) return Value();
    CallArgs args;
    if (!eval_args(e, 1, &args)) return Value();
    return call(fn, args, e);
}

Value Interp::call(const Value& callee, CallArgs& args, const Expr& at) {
    if (callee.is_undefined()) {
        fail_undefined(at.line, callee);
        return Value();
    }
    if (!callee.is_callable()) {
        fail(at.line, std::string("'") + type_name(callee) + "' object is not callable");
        return Value();
    }
    const Callable& c = callee.fn();
    switch (c.type) {
        case Callable::Type::kGlobal:
            return c.global(*this, at, args);
        case Callable::Type::kMacro:
            return call_macro(c, args, at);
        case Callable::Type::kMethod: {
            bool found = false;
            Value r = call_method(c.self, c.name, args, at, &found);
            if (!found && !failed_) fail(at.line, "'" + c.name + "' is not callable");
            return r;
        }
    }
    return Value();
}

Value Interp::call_macro(const Callable& m, CallArgs& args, const Expr& at) {
    if (depth_ + 1 > opts_.max_depth) {
        fail_limit(at.line, "macro calls nested deeper than " + std::to_string(opts_.max_depth));
        return Value();
    }
    const Stmt& def = *m.macro;
    auto scope = std::make_shared<Scope>();
    scope->parent = m.closure;
    size_t n_params = def.params.size();
    std::vector<Value> extra;
    for (size_t i = 0; i < args.pos.size(); ++i) {
        if (i < n_params)
            scope->vars.emplace_back(def.params[i].name, args.pos[i]);
        else
            extra.push_back(args.pos[i]);
    }
    std::vector<std::pair<std::string, Value>> extra_kw;
    for (auto& kv : args.kw) {
        bool is_param = false;
        for (size_t i = 0; i < n_params; ++i)
            if (def.params[i].name == kv.first) {
                if (i < args.pos.size()) {
                    fail(at.line, "macro '" + m.name + "' got multiple values for argument '" +
                                      kv.first + "'");
                    return Value();
                }
                is_param = true;
            }
        if (is_param || kv.first == "caller")
            scope->set(kv.first, kv.second);
        else
            extra_kw.emplace_back(kv.first, kv.second);
    }
    // Defaults are evaluated in the macro's own scope, so they may use earlier parameters.
    std::shared_ptr<Scope> saved = scope_;
    scope_ = scope;
    for (size_t i = 0; i < n_params; ++i) {
        const MacroParam& p = def.params[i];
        if (scope->find_local(p.name)) continue;
        Value v;
        if (p.default_value) {
            v = eval(*p.default_value);
            if (failed_) {
                scope_ = saved;
                return Value();
            }
        } else {
            v = Value::undefined(&p.name);
        }
        scope->vars.emplace_back(p.name, std::move(v));
    }
    scope_ = saved;
    if (!extra.empty() || !extra_kw.empty()) {
        // Through the depth-capped constructors: a macro can store varargs in a namespace and
        // be called with it again, nesting one level per call.
        Value varargs = new_list(std::move(extra), at.line, /*is_tuple=*/true);
        if (failed_) return Value();
        Value kwargs = new_object(std::move(extra_kw), at.line);
        if (failed_) return Value();
        scope->vars.emplace_back("varargs", std::move(varargs));
        scope->vars.emplace_back("kwargs", std::move(kwargs));
    }
    ++depth_;
    std::string buf;
    Flow flow;
    render_body_to(def.body, scope, &buf, &flow);
    --depth_;
    if (failed_) return Value();
    return new_string(std::move(buf), at.line);
}

bool Interp::render_body_to(const StmtList& body, std::shared_ptr<Scope> scope, std::string* out,
                            Flow* flow) {
    std::string* saved_out = out_;
    std::shared_ptr<Scope> saved_scope = scope_;
    out_ = out;
    scope_ = std::move(scope);
    *flow = exec(body);
    out_ = saved_out;
    scope_ = std::move(saved_scope);
    return !failed_;
}

bool Interp::iterate(const Value& v, const Expr& at, std::shared_ptr<const Array>* out) {
    switch (v.kind()) {
        case Value::Kind::kArray:
            *out = std::static_pointer_cast<const Array>(v.payload());
            return true;
        case Value::Kind::kObject: {
            auto a = std::make_shared<Array>();
            a->items.reserve(v.obj().items.size());
            for (const auto& kv : v.obj().items) a->items.push_back(Value::string(kv.first));
            if (!charge(a->items.size() * sizeof(Value), at.line)) return false;
            *out = std::move(a);
            return true;
        }
        case Value::Kind::kString: {
            auto a = std::make_shared<Array>();
            const std::string& s = v.str();
            for (size_t i = 0; i < s.size();) {
                size_t start = i;
                utf8_next(s, i);
                a->items.push_back(Value::string(s.substr(start, i - start)));
            }
            if (!charge(a->items.size() * (sizeof(Value) + 32), at.line)) return false;
            *out = std::move(a);
            return true;
        }
        case Value::Kind::kUndefined:
            *out = std::make_shared<Array>();
            return true;
        default:
            fail(at.line, std::string("'") + type_name(v) + "' object is not iterable");
            return false;
    }
}

// ---------------------------------------------------------------------------------------------
// Statements

Flow Interp::exec(const StmtList& body) {
    for (const auto& s : body) {
        Flow f = exec_one(*s);
        if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
}

bool Interp::bind_targets(Scope& scope, const Stmt& s, const Value& item, int line) {
    if (!s.target_tuple && s.targets.size() == 1) {
        scope.set(s.targets[0], item);
        return true;
    }
    std::shared_ptr<const Array> parts;
    if (item.is_string() || item.is_object()) {
        if (!iterate(item, *s.expr, &parts)) return false;
    } else if (item.is_array()) {
        parts = std::static_pointer_cast<const Array>(item.payload());
    } else {
        fail(line, std::string("cannot unpack non-iterable ") + type_name(item) + " object");
        return false;
    }
    if (parts->items.size() != s.targets.size()) {
        fail(line,
             parts->items.size() > s.targets.size()
                 ? "too many values to unpack (expected " + std::to_string(s.targets.size()) + ")"
                 : "not enough values to unpack (expected " + std::to_string(s.targets.size()) +
                       ", got " + std::to_string(parts->items.size()) + ")");
        return false;
    }
    for (size_t i = 0; i < s.targets.size(); ++i) scope.set(s.targets[i], parts->items[i]);
    return true;
}

Flow Interp::exec_for(const Stmt& s) {
    Value iterable = eval(*s.expr);
    if (failed_) return Flow::kError;
    std::shared_ptr<const Array> items;
    if (!iterate(iterable, *s.expr, &items)) return Flow::kError;
    std::shared_ptr<Scope> parent = scope_;
    if (s.cond) {
        // The loop filter sees the loop variables but not `loop`.
        auto filtered = std::make_shared<Array>();
        auto tmp = std::make_shared<Scope>();
        tmp->parent = parent;
        scope_ = tmp;
        for (const auto& item : items->items) {
            tmp->vars.clear();
            if (!bind_targets(*tmp, s, item, s.line)) break;
            Value c = eval(*s.cond);
            if (failed_) break;
            if (truthy(c)) filtered->items.push_back(item);
        }
        scope_ = parent;
        if (failed_) return Flow::kError;
        items = std::move(filtered);
    }
    if (items->items.empty()) {
        if (s.else_body.empty()) return Flow::kNormal;
        return exec(s.else_body);
    }
    auto info = std::make_shared<LoopInfo>();
    info->items = items;
    Value loop_value = Value::loop(info);
    std::shared_ptr<Scope> scope;
    Flow result = Flow::kNormal;
    for (size_t i = 0; i < items->items.size(); ++i) {
        if (!step(s.line)) return Flow::kError;
        // A fresh scope per iteration (jinja semantics); reuse it unless a macro captured it.
        if (!scope || scope.use_count() > 1) {
            scope = std::make_shared<Scope>();
            scope->parent = parent;
        } else {
            scope->vars.clear();
        }
        info->index0 = i;
        if (!s.target_tuple && s.targets.size() == 1 && s.targets[0] != "loop") {
            scope->vars.emplace_back(s.targets[0], items->items[i]);
            scope->vars.emplace_back(kLoopName, loop_value);
        } else {
            scope->vars.emplace_back(kLoopName, loop_value);
            if (!bind_targets(*scope, s, items->items[i], s.line)) return Flow::kError;
        }
        scope_ = scope;
        Flow f = exec(s.body);
        scope_ = parent;
        if (f == Flow::kError || failed_) return Flow::kError;
        if (f == Flow::kBreak) break;
    }
    return result;
}

Flow Interp::exec_set(const Stmt& s) {
    Value v = eval(*s.expr);
    if (failed_) return Flow::kError;
    if (s.target_attr) {
        Value target = lookup(s.targets[0]);
        if (!target.is_namespace()) {
            fail(s.line, "cannot assign attribute on non-namespace object");
            return Flow::kError;
        }
        target.nspace().set(s.text, std::move(v));
        return Flow::kNormal;
    }
    if (!bind_targets(*scope_, s, v, s.line)) return Flow::kError;
    return Flow::kNormal;
}

Flow Interp::exec_one(const Stmt& s) {
    if (!step(s.line)) return Flow::kError;
    switch (s.kind) {
        case StmtKind::kText:
            return append_out(s.text, s.line) ? Flow::kNormal : Flow::kError;
        case StmtKind::kOutput: {
            Value v = eval(*s.expr);
            if (failed_) return Flow::kError;
            if (v.is_string()) return append_out(v.str(), s.line) ? Flow::kNormal : Flow::kError;
            std::string tmp;
            append_str(tmp, v);
            return append_out(tmp, s.line) ? Flow::kNormal : Flow::kError;
        }
        case StmtKind::kIf: {
            Value c = eval(*s.expr);
            if (failed_) return Flow::kError;
            return exec(truthy(c) ? s.body : s.else_body);
        }
        case StmtKind::kFor:
            return exec_for(s);
        case StmtKind::kSet:
            return exec_set(s);
        case StmtKind::kSetBlock:
        case StmtKind::kFilterBlock: {
            auto scope = std::make_shared<Scope>();
            scope->parent = scope_;
            std::string buf;
            Flow f;
            if (!render_body_to(s.body, scope, &buf, &f)) return Flow::kError;
            Value text = Value::string(std::move(buf));
            if (s.expr) {
                Value saved = placeholder_;
                placeholder_ = text;
                text = eval(*s.expr);
                placeholder_ = saved;
                if (failed_) return Flow::kError;
            }
            if (s.kind == StmtKind::kSetBlock) {
                scope_->set(s.targets[0], std::move(text));
                return Flow::kNormal;
            }
            std::string tmp;
            append_str(tmp, text);
            return append_out(tmp, s.line) ? Flow::kNormal : Flow::kError;
        }
        case StmtKind::kMacro: {
            auto c = std::make_shared<Callable>();
            c->type = Callable::Type::kMacro;
            c->name = s.text;
            c->macro = &s;
            c->closure = scope_;
            if (scope_ != root_) macro_scopes_.push_back(scope_);
            scope_->set(s.text, Value::callable(std::move(c)));
            return Flow::kNormal;
        }
        case StmtKind::kCallBlock: {
            auto caller = std::make_shared<Callable>();
            caller->type = Callable::Type::kMacro;
            caller->name = "caller";
            caller->macro = &s;
            caller->closure = scope_;
            const Expr& call_expr = *s.expr;
            Value fn = eval(*call_expr.args[0]);
            if (failed_) return Flow::kError;
            CallArgs args;
            if (!eval_args(call_expr, 1, &args)) return Flow::kError;
            args.kw.emplace_back("caller", Value::callable(std::move(caller)));
            Value r = call(fn, args, call_expr);
            if (failed_) return Flow::kError;
            std::string tmp;
            append_str(tmp, r);
            return append_out(tmp, s.line) ? Flow::kNormal : Flow::kError;
        }
        case StmtKind::kBreak:
            return Flow::kBreak;
        case StmtKind::kContinue:
            return Flow::kContinue;
        case StmtKind::kScopedBody: {
            auto scope = std::make_shared<Scope>();
            scope->parent = scope_;
            std::shared_ptr<Scope> saved = scope_;
            scope_ = scope;
            Flow f = exec(s.body);
            scope_ = saved;
            return f == Flow::kError ? f : Flow::kNormal;
        }
    }
    return Flow::kNormal;
}

}  // namespace ferrox::jinja

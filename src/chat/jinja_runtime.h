#pragma once
// The tree-walking interpreter behind JinjaTemplate (internal to src/chat): scopes, the
// render state and its limits, and the built-in filters, tests, globals and methods.
//
// Errors: the first failure is recorded in the Interp (failed() turns true) and every caller
// unwinds by checking failed(); values returned after a failure are meaningless.
// One Interp renders one template once, on one thread.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "chat/jinja.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace ferrox::jinja {

struct Program {
    StmtList body;
    JinjaOptions options;
};

struct CallArgs {
    std::vector<Value> pos;
    std::vector<std::pair<std::string, Value>> kw;

    // Argument `i` given positionally, else keyword `name`, else null.
    const Value* get(size_t i, std::string_view name) const {
        if (i < pos.size()) return &pos[i];
        for (const auto& kv : kw)
            if (kv.first == name) return &kv.second;
        return nullptr;
    }
};

struct Scope {
    std::shared_ptr<Scope> parent;
    std::vector<std::pair<std::string, Value>> vars;

    Value* find_local(std::string_view name) {
        for (auto& kv : vars)
            if (kv.first == name) return &kv.second;
        return nullptr;
    }
    void set(std::string_view name, Value v) {
        if (Value* p = find_local(name)) {
            *p = std::move(v);
            return;
        }
        vars.emplace_back(std::string(name), std::move(v));
    }
};

class Interp;
using GlobalFn = Value (*)(Interp&, const Expr& at, CallArgs&);

struct Callable {
    enum class Type : uint8_t { kGlobal, kMacro, kMethod };
    Type type = Type::kGlobal;
    std::string name;
    GlobalFn global = nullptr;       // kGlobal
    const Stmt* macro = nullptr;     // kMacro: a kMacro statement, or a kCallBlock (caller)
    std::shared_ptr<Scope> closure;  // kMacro
    Value self;                      // kMethod: the bound object
};

struct LoopInfo {
    std::shared_ptr<const Array> items;
    size_t index0 = 0;
    Value last_changed;  // loop.changed() state
    bool has_changed = false;
};

enum class Flow : uint8_t { kNormal, kBreak, kContinue, kError };

class Interp {
  public:
    Interp(const JinjaOptions& options, const Value& context);
    ~Interp();

    Status render(const StmtList& body, std::string* out);

    // ---- used by builtins ----
    bool failed() const { return failed_; }
    // Records a template error (kInvalidArgument) at `line`; the first one wins.
    void fail(int line, const std::string& msg);
    void fail_limit(int line, const std::string& msg);
    // The error for using an Undefined value.
    void fail_undefined(int line, const Value& v);
    // Charges `bytes` of new strings/lists to the allocation budget; false (failed) when over.
    bool charge(size_t bytes, int line);
    // Charges `n` steps of work done inside one operation (scans, sorts) to the step budget.
    bool charge_steps(uint64_t n, int line);
    Value new_string(std::string s, int line);
    Value new_list(std::vector<Value> items, int line, bool is_tuple = false);
    // A dict: charged like a list, and failing past the container-depth cap.
    Value new_object(std::vector<std::pair<std::string, Value>> items, int line);
    Value new_namespace();

    // Python/jinja operations.
    Value getattr(const Value& obj, const std::string& name, const Expr& at);
    Value getitem(const Value& obj, const Value& key, const Expr& at);
    Value call(const Value& callee, CallArgs& args, const Expr& at);
    Value call_method(const Value& self, const std::string& name, CallArgs& args, const Expr& at,
                      bool* found);
    // Items of an iterable as Python iterates them (dict: keys; str: characters).
    bool iterate(const Value& v, const Expr& at, std::shared_ptr<const Array>* out);
    // Python `<` etc. on two values; false + failed() on unorderable types.
    int compare(const Value& a, const Value& b, const Expr& at, bool* ok);
    bool contains(const Value& container, const Value& item, const Expr& at);
    Value apply_filter(const std::string& name, Value subject, CallArgs& args, const Expr& at);
    bool apply_test(const std::string& name, const Value& subject, CallArgs& args, const Expr& at);

    const JinjaOptions& options() const { return opts_; }

  private:
    friend struct InterpAccess;
    Value eval(const Expr& e);
    Value eval_binary(const Expr& e);
    Value eval_compare(const Expr& e);
    Value eval_call(const Expr& e);
    Value eval_slice(const Expr& e);
    bool eval_args(const Expr& e, size_t first, CallArgs* args);
    Flow exec(const StmtList& body);
    Flow exec_one(const Stmt& s);
    Flow exec_for(const Stmt& s);
    Flow exec_set(const Stmt& s);
    bool render_body_to(const StmtList& body, std::shared_ptr<Scope> scope, std::string* out,
                        Flow* flow);
    Value call_macro(const Callable& m, CallArgs& args, const Expr& at);
    Value lookup(const std::string& name) const;
    bool bind_targets(Scope& scope, const Stmt& s, const Value& item, int line);
    bool step(int line);
    bool append_out(std::string_view s, int line);

    const JinjaOptions& opts_;
    std::shared_ptr<Scope> root_;
    std::shared_ptr<Scope> scope_;  // current innermost scope
    std::string* out_ = nullptr;
    Value placeholder_;
    uint64_t steps_ = 0;
    size_t alloc_ = 0;
    int depth_ = 0;
    bool failed_ = false;
    Status status_;
    // Cleared at the end of the render: a namespace may hold a list holding itself, and a scope
    // holds the macros defined in it while each macro holds that scope.
    std::vector<std::shared_ptr<Namespace>> namespaces_;
    std::vector<std::shared_ptr<Scope>> macro_scopes_;
};

// Built-in tables (jinja_builtins.cc). Null when the name is unknown.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
GlobalFn find_global(std::string_view name);

// Python str helpers shared by filters and methods.
bool py_isspace(uint32_t cp);
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
// Python's `fmt % args` (printf-style: flags, width, precision, `*`, %(key)s), appended to
// *out. args is a tuple of values, a mapping for %(key)s, or a single value, exactly as the
// right operand of Python's `%`. False (and in.failed()) where Python raises.
bool py_percent_format(Interp& in, const Expr& at, std::string_view fmt, const Value& args,
                       std::string* out);

}  // namespace ferrox::jinja

#pragma once
// The syntax tree of a parsed Jinja template (internal to src/chat). Built once by the parser,
// then only read: one tree may be rendered by many threads at once.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_value.h"

namespace ferrox::jinja {

class Interp;
struct Expr;
struct CallArgs;

// A filter or test implementation: receives the evaluated subject and arguments.
using FilterFn = Value (*)(Interp&, const Expr&, Value, CallArgs&);
using TestFn = bool (*)(Interp&, const Expr&, const Value&, CallArgs&);

enum class ExprKind : uint8_t {
    kLiteral,  // value
    kName,     // name
    kList,     // args: items
    kTuple,    // args: items
    kDict,     // args: key0, value0, key1, value1, ...
    kGetAttr,  // args[0].name
    kGetItem,  // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]] (null children are omitted bounds)
    kCall,     // args[0](args[1:], kwargs)
    kFilter,   // args[0] | name(args[1:], kwargs)  (args[0] null inside a filter block)
    kTest,     // args[0] is [not] name(args[1:], kwargs)
    kUnary,    // op args[0]  ('-', '+', 'n' for not)
    kBinary,   // args[0] op args[1]
    kAnd,
    kOr,
    kCompare,      // args[0] ops[0] args[1] ops[1] args[2] ... (Python chaining)
    kCond,         // args[1] if args[0] else args[2]  (args[2] may be null)
    kPlaceholder,  // the body text of a {% filter %} block
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
    ExprKind kind;
    int line = 0;
    Value value;       // kLiteral
    std::string name;  // kName, kGetAttr, kFilter, kTest
    std::vector<std::unique_ptr<Expr>> args;
    std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
    BinOp bin_op = BinOp::kAdd;
    char unary_op = 0;
    bool negated = false;  // kTest: `is not`
    std::vector<CmpOp> cmp_ops;
    FilterFn filter = nullptr;
    TestFn test = nullptr;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind : uint8_t {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // expr; body; else_body (elif: a single nested kIf)
    kFor,          // targets in expr [if cond]; body; else_body
    kSet,          // targets (or target.attr) = expr
    kSetBlock,     // {% set target %}body{% endset %} (expr: optional filter chain)
    kMacro,        // name(params) body
    kCallBlock,    // {% call(params) expr %}body{% endcall %}
    kFilterBlock,  // {% filter f %}body{% endfilter %}: expr is the filter chain
    kBreak,
    kContinue,
    kScopedBody,  // {% generation %}body{% endgeneration %}: renders body as is
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using StmtList = std::vector<StmtPtr>;

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null: required
};

struct Stmt {
    StmtKind kind;
    int line = 0;
    std::string text;  // kText; kMacro name; kSet attribute (when target is ns.attr)
    ExprPtr expr;
    ExprPtr cond;                      // kFor filter
    std::vector<std::string> targets;  // kFor / kSet names (tuple unpacking if > 1)
    bool target_attr = false;          // kSet: targets[0].text = expr
    bool target_tuple = false;         // unpack even a single name (`for a, in ...`)
    StmtList body;
    StmtList else_body;
    std::vector<MacroParam> params;  // kMacro, kCallBlock
};

}  // namespace ferrox::jinja

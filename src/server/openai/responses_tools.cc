#include "server/openai/responses_tools.h"

#include <set>

#include "grammar/json_schema.h"
#include "grammar/lark.h"
#include "grammar/regex.h"
#include "server/structured.h"

namespace ferrox {
namespace {

constexpr const char* kLocalShellDescription =
    "Runs a command on the user's machine and returns its output. `command` is the argument "
    "vector, e.g. [\"bash\", \"-lc\", \"ls -la\"].";

const json& local_shell_parameters() {
    static const json p = {
        {"type", "object"},
        {"properties",
         {{"command", {{"type", "array"}, {"items", {{"type", "string"}}}}},
          {"working_directory", {{"type", "string"}}},
          {"timeout_ms", {{"type", "integer"}}}}},
        {"required", json::array({"command"})},
        {"additionalProperties", false}};
    return p;
}

json custom_parameters(const std::string& hint) {
    return {{"type", "object"},
            {"properties", {{"input", {{"type", "string"}, {"description", hint}}}}},
            {"required", json::array({"input"})},
            {"additionalProperties", false}};
}

json skip_note(size_t index, const std::string& type, const std::string& name, const std::string& reason) {
    json n = {{"index", index}, {"type", type}};
    if (!name.empty()) n["name"] = name;
    n["reason"] = reason;
    return n;
}

bool read_function(const json& t, const std::string& where, const std::string& ns, Conversation* conv,
                   ResponsesTools* out, ApiError* err) {
    const Fields tf{t, where + "."};
    ToolSpec spec;
    const json* params = nullptr;
    ResponsesTool rt;
    if (!tf.string("name", &rt.name, err) || !tf.string("description", &spec.description, err) ||
        !tf.object("parameters", &params, err))
        return false;
    if (rt.name.empty()) {
        *err = bad_param(where + ".name", "Missing required parameter: '" + where + ".name'.");
        return false;
    }
    rt.ns = ns;
    rt.model_name = namespaced_tool_name(ns, rt.name);
    spec.name = rt.model_name;
    spec.parameters = params ? dump(*params) : "{}";
    conv->tools.push_back(std::move(spec));
    out->offered.push_back(std::move(rt));
    return true;
}

bool read_custom(const json& t, const std::string& where, Conversation* conv, ResponsesTools* out, ApiError* err) {
    const Fields tf{t, where + "."};
    ResponsesTool rt;
    rt.kind = ResponsesTool::Kind::kCustom;
    std::string description;
    const json* format = nullptr;
    if (!tf.string("name", &rt.name, err) || !tf.string("description", &description, err) ||
        !tf.object("format", &format, err))
        return false;
    if (rt.name.empty()) {
        *err = bad_param(where + ".name", "Missing required parameter: '" + where + ".name'.");
        return false;
    }
    std::string hint = "The tool's whole input, as free text.";
    if (format) {
        const Fields ff{*format, where + ".format."};
        std::string type;
        if (!ff.string("type", &type, err) || !ff.string("syntax", &rt.syntax, err) ||
            !ff.string("definition", &rt.definition, err))
            return false;
        if (type != "grammar") rt.syntax.clear(), rt.definition.clear();
        if (!rt.definition.empty()) {
            description += (description.empty() ? "" : "\n\n") + std::string("Its input follows this ") +
                           (rt.syntax.empty() ? "grammar" : rt.syntax + " grammar") + ":\n" + rt.definition;
            hint = "The tool's whole input, following the grammar in the tool's description.";
        } else {
            rt.syntax.clear();
        }
    }
    rt.model_name = rt.name;
    conv->tools.push_back({rt.name, description, dump(custom_parameters(hint))});
    out->offered.push_back(std::move(rt));
    return true;
}

// Any JSON string's inside (RFC 8259).
constexpr const char* kJsonStringInside =
    "root ::= ([^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}))*\n";

// GBNF whose `root` matches the inside of the JSON string a custom tool's input is written as.
Expected<std::string> custom_input_gbnf(const ResponsesTool& t) {
    if (t.syntax == "lark") {
        grammar::LarkOptions o;
        o.json_string = true;
        return grammar::lark_to_gbnf(t.definition, o);
    }
    if (t.syntax == "regex") {
        grammar::RegexOptions o;
        o.json_string = true;
        return grammar::regex_to_gbnf(t.definition, o);
    }
    return invalid_argument("syntax '" + t.syntax + "' is not one ferrox compiles (lark, regex)");
}

std::string arguments_gbnf(const ToolSpec& spec) {
    json schema;
    ApiError ignored;
    if (!spec.parameters.empty() && parse_json_object(spec.parameters, &schema, &ignored)) {
        grammar::JsonSchemaOptions o;
        o.extra_properties = false;
        auto g = grammar::json_schema_to_gbnf(schema, o);
        if (g.has_value()) return *g;
    }
    return grammar::json_object_gbnf();
}

// Rules `<p>text` for any text that does not contain `marker` (ASCII), by the marker's
// Knuth-Morris-Pratt automaton: state i has matched the marker's first i characters.
std::string text_without_gbnf(const std::string& marker, const std::string& p) {
    const size_t n = marker.size();
    std::vector<size_t> fail(n + 1, 0);
    for (size_t i = 1, k = 0; i < n; ++i) {
        while (k && marker[i] != marker[k]) k = fail[k];
        if (marker[i] == marker[k]) ++k;
        fail[i + 1] = k;
    }
    auto step = [&](size_t i, char c) {
        while (i && (i == n || marker[i] != c)) i = fail[i];
        return marker[i] == c ? i + 1 : 0;
    };
    std::set<char> chars(marker.begin(), marker.end());
    std::string negated;
    for (char c : chars) negated += "\\x" + std::string(1, "0123456789ABCDEF"[(c >> 4) & 15]) + "0123456789ABCDEF"[c & 15];
    std::string out = p + "text ::= " + p + "s0\n";
    for (size_t i = 0; i < n; ++i) {
        out += p + "s" + std::to_string(i) + " ::= \"\" | [^" + negated + "] " + p + "s0";
        for (char c : chars) {
            const size_t j = step(i, c);
            if (j == n) continue;  // the marker would be complete
            out += " | " + grammar::gbnf_literal(std::string(1, c)) + " " + p + "s" + std::to_string(j);
        }
        out += "\n";
    }
    return out;
}

}  // namespace

const ResponsesTool* ResponsesTools::find(const std::string& model_name) const {
    for (const ResponsesTool& t : offered)
        if (t.model_name == model_name) return &t;
    return nullptr;
}

std::string namespaced_tool_name(const std::string& ns, const std::string& name) {
    return ns.empty() ? name : ns + "__" + name;
}

bool read_responses_tools(const json* tools, Conversation* conv, ResponsesTools* out, ApiError* err) {
    if (!tools) return true;
    for (size_t k = 0; k < tools->size(); ++k) {
        const std::string tw = "tools[" + std::to_string(k) + "]";
        const json& t = (*tools)[k];
        if (!t.is_object()) {
            *err = wrong_type(tw, "an object", t);
            return false;
        }
        const Fields tf{t, tw + "."};
        std::string type, name;
        if (!tf.string("type", &type, err)) return false;
        if (type.empty()) {
            *err = bad_param(tw + ".type", "Missing required parameter: '" + tw + ".type'.");
            return false;
        }
        if (const json* n = tf.find("name"); n && n->is_string()) name = n->get<std::string>();
        if (type == "function") {
            if (!read_function(t, tw, "", conv, out, err)) return false;
        } else if (type == "custom") {
            if (!read_custom(t, tw, conv, out, err)) return false;
        } else if (type == "local_shell") {
            if (out->find("local_shell")) continue;
            ResponsesTool rt;
            rt.kind = ResponsesTool::Kind::kLocalShell;
            rt.model_name = rt.name = "local_shell";
            conv->tools.push_back({rt.model_name, kLocalShellDescription, dump(local_shell_parameters())});
            out->offered.push_back(std::move(rt));
        } else if (type == "namespace") {
            const json* inner = nullptr;
            if (!tf.array("tools", &inner, err)) return false;
            if (name.empty()) {
                *err = bad_param(tw + ".name", "Missing required parameter: '" + tw + ".name'.");
                return false;
            }
            for (size_t j = 0; inner && j < inner->size(); ++j) {
                const std::string iw = tw + ".tools[" + std::to_string(j) + "]";
                const json& it = (*inner)[j];
                std::string itype = "function";
                if (!it.is_object()) {
                    *err = wrong_type(iw, "an object", it);
                    return false;
                }
                if (!Fields{it, iw + "."}.string("type", &itype, err)) return false;
                if (itype == "function") {
                    if (!read_function(it, iw, name, conv, out, err)) return false;
                } else {
                    out->skipped.push_back(skip_note(k, itype, name, "only functions inside a namespace are offered"));
                }
            }
        } else {
            out->skipped.push_back(skip_note(k, type, name, "a hosted tool: ferrox cannot run it, so the model is not offered it"));
        }
    }
    return true;
}

bool custom_tools_constraint(const Conversation& conv, const ResponsesTools& tools, ToolCallFormat format,
                             bool other_constraint, std::shared_ptr<const grammar::Grammar>* out, json* notes,
                             ApiError* err) {
    using F = ToolCallFormat;
    // Each custom tool's input rules, or why there are none.
    std::vector<std::string> inputs(tools.offered.size());
    bool any = false;
    std::vector<size_t> noted;
    for (size_t i = 0; i < tools.offered.size(); ++i) {
        const ResponsesTool& t = tools.offered[i];
        if (t.kind != ResponsesTool::Kind::kCustom || t.definition.empty()) continue;
        json note = {{"name", t.name}, {"syntax", t.syntax}, {"constrained", false}};
        auto g = custom_input_gbnf(t);
        if (g.has_value()) {
            auto compiled = grammar::Grammar::parse(*g);  // left recursion and the like show here
            if (compiled.has_value()) {
                inputs[i] = *g;
                any = true;
            } else {
                note["reason"] = "the grammar does not compile here: " + compiled.status().message();
            }
        } else {
            note["reason"] = "the grammar does not compile here: " + g.status().message();
        }
        noted.push_back(notes->size());
        notes->push_back(std::move(note));
    }
    auto why_not = [&](const std::string& reason) {
        for (size_t k : noted)
            if (!(*notes)[k].contains("reason")) (*notes)[k]["reason"] = reason;
        return true;
    };
    if (!any) return true;
    const bool forced = conv.tool_choice == ToolChoice::kRequired || conv.tool_choice == ToolChoice::kNamed;
    if (conv.tool_choice == ToolChoice::kNone) return why_not("tool_choice is none");
    if (other_constraint && !forced) return why_not("text.format constrains the output");
    const bool tagged = format == F::kHermes || format == F::kGeneric;
    if (!tagged && !(forced && (format == F::kLlama3 || format == F::kMistral))) {
        return why_not(std::string("calls in the model's ") + tool_call_format_name(format) +
                       " format are not constrained" + (forced ? "" : " unless tool_choice forces a call"));
    }
    std::string rules, call = "call ::= ";
    int n_alts = 0;
    for (size_t i = 0; i < tools.offered.size() && i < conv.tools.size(); ++i) {
        const ResponsesTool& t = tools.offered[i];
        if (conv.tool_choice == ToolChoice::kNamed && t.model_name != conv.tool_choice_name) continue;
        const std::string p = "t" + std::to_string(i) + "-";
        std::string args;
        if (t.kind == ResponsesTool::Kind::kCustom) {
            rules += prefix_gbnf_rules(inputs[i].empty() ? kJsonStringInside : inputs[i], p + "in-") + "\n";
            args = grammar::gbnf_literal("{\"input\": \"") + " " + p + "in-root " + grammar::gbnf_literal("\"}");
        } else {
            rules += prefix_gbnf_rules(arguments_gbnf(conv.tools[i]), p) + "\n";
            args = p + "root";
        }
        const char* key = format == F::kLlama3 ? "parameters" : "arguments";
        call += (n_alts++ ? " | " : "") +
                grammar::gbnf_literal("{\"name\": " + json(t.model_name).dump() + ", \"" + key + "\": ") + " " + args +
                " \"}\"";
    }
    if (n_alts == 0) return why_not("tool_choice names no offered tool");
    std::string root;
    if (tagged) {
        root = "tagged ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
        root += forced ? "root ::= tagged\n" : "root ::= free-text (tagged free-text)*\n" + text_without_gbnf("<tool_call>", "free-");
    } else if (format == F::kLlama3) {
        root = "root ::= call\n";
    } else {
        root = "root ::= \"[TOOL_CALLS][\" call \"]\"\n";
    }
    std::string gbnf = root + call + "\n" + rules;
    if (!compile_constraint(gbnf, "tools", out, err)) return false;
    for (size_t k : noted) {
        if (!(*notes)[k].contains("reason")) (*notes)[k]["constrained"] = true;
    }
    return true;
}

std::string custom_tool_input(const std::string& arguments) {
    json args = json::parse(arguments, nullptr, false);
    if (args.is_object()) {
        if (auto it = args.find("input"); it != args.end() && it->is_string()) return it->get<std::string>();
        if (args.size() == 1 && args.begin()->is_string()) return args.begin()->get<std::string>();
    }
    return arguments;
}

std::string custom_tool_arguments(const std::string& input) { return dump(json{{"input", input}}); }

json local_shell_action(const std::string& arguments) {
    json args = json::parse(arguments, nullptr, false);
    if (!args.is_object()) args = json::object();
    json command = json::array();
    if (auto it = args.find("command"); it != args.end()) {
        if (it->is_string()) {
            command = json::array({"bash", "-lc", *it});
        } else if (it->is_array()) {
            for (const json& a : *it) command.push_back(a.is_string() ? a.get<std::string>() : dump(a));
        }
    }
    json action = {{"type", "exec"}, {"command", command}};
    json timeout = nullptr, dir = nullptr;
    for (const char* k : {"timeout_ms", "timeout"})
        if (auto it = args.find(k); it != args.end() && it->is_number_integer() && timeout.is_null()) timeout = *it;
    for (const char* k : {"working_directory", "workdir"})
        if (auto it = args.find(k); it != args.end() && it->is_string() && dir.is_null()) dir = *it;
    action["timeout_ms"] = timeout;
    action["working_directory"] = dir;
    action["env"] = json::object();
    if (auto it = args.find("env"); it != args.end() && it->is_object()) {
        for (const auto& [k, v] : it->items())
            if (v.is_string()) action["env"][k] = v;
    }
    action["user"] = nullptr;
    return action;
}

std::string local_shell_arguments(const json& action) {
    // A canonical order without nulls, so a call replayed by a client and the same call kept
    // by the store render the same prompt.
    json args = json::object();
    if (!action.is_object()) return "{}";
    for (const char* k : {"command", "working_directory", "timeout_ms", "env", "user"}) {
        auto it = action.find(k);
        if (it == action.end() || it->is_null() || (it->is_object() && it->empty())) continue;
        args[k] = *it;
    }
    for (const auto& [k, v] : action.items()) {
        if (k != "type" && !args.contains(k) && !v.is_null() && !(v.is_object() && v.empty()) && k != "command" &&
            k != "working_directory" && k != "timeout_ms" && k != "env" && k != "user")
            args[k] = v;
    }
    return dump(args);
}

}  // namespace ferrox

#include "server/structured.h"

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace ferrox {
namespace {

// ---- the compiled-grammar cache ----

struct Cached {
    std::shared_ptr<const grammar::Grammar> g;
    uint64_t last_use = 0;
};
std::mutex g_mu;
std::unordered_map<std::string, Cached> g_cache;
uint64_t g_clock = 0;
constexpr size_t kMaxCached = 256;

std::shared_ptr<const grammar::Grammar> cache_find(const std::string& gbnf) {
    std::lock_guard<std::mutex> lk(g_mu);
    auto it = g_cache.find(gbnf);
    if (it == g_cache.end()) return nullptr;
    it->second.last_use = ++g_clock;
    return it->second.g;
}

void cache_put(const std::string& gbnf, std::shared_ptr<const grammar::Grammar> g) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_cache.size() >= kMaxCached) {
        auto oldest = g_cache.begin();
        for (auto it = g_cache.begin(); it != g_cache.end(); ++it) {
            if (it->second.last_use < oldest->second.last_use) oldest = it;
        }
        g_cache.erase(oldest);
    }
    g_cache[gbnf] = {std::move(g), ++g_clock};
}

// ---- the front ends ----

// One constraint per request: remembers which field set it.
struct Pick {
    std::shared_ptr<const grammar::Grammar>* out;
    std::string field;
};

bool set_gbnf(Pick& p, const std::string& field, const Expected<std::string>& gbnf, ApiError* err) {
    if (!p.field.empty()) {
        *err = bad_param(field, "Only one output constraint per request: '" + p.field + "' and '" + field +
                                    "' were both given.");
        return false;
    }
    if (!gbnf.has_value()) {
        *err = bad_param(field, "Invalid '" + field + "': " + gbnf.status().message());
        return false;
    }
    if (!compile_constraint(*gbnf, field, p.out, err)) return false;
    p.field = field;
    return true;
}

Expected<std::string> schema_gbnf(const json& schema, bool strict) {
    if (!schema.is_object() && !schema.is_boolean()) return invalid_argument("a JSON Schema is an object or a boolean");
    grammar::JsonSchemaOptions o;
    o.strict = strict;
    // Only the properties the schema names: a small model must not wander into invented keys
    // (OpenAI's strict mode and xgrammar do the same; the output still validates).
    o.extra_properties = false;
    return grammar::json_schema_to_gbnf(schema, o);
}

// A schema given as an object or as JSON text (vLLM's guided_json takes both).
bool schema_field(Pick& p, const Fields& f, const char* key, bool strict, ApiError* err) {
    const json* v = f.find(key);
    if (!v || v->is_null()) return true;
    const std::string field = f.prefix + key;
    if (v->is_string()) {
        json parsed;
        if (!parse_json_object(v->get_ref<const std::string&>(), &parsed, err)) {
            *err = bad_param(field, "Invalid '" + field + "': not a JSON object.");
            return false;
        }
        return set_gbnf(p, field, schema_gbnf(parsed, strict), err);
    }
    return set_gbnf(p, field, schema_gbnf(*v, strict), err);
}

bool regex_field(Pick& p, const Fields& f, const char* key, ApiError* err) {
    std::string pattern;
    if (!f.string(key, &pattern, err)) return false;
    if (!f.find(key) || f.find(key)->is_null()) return true;
    return set_gbnf(p, f.prefix + key, grammar::regex_to_gbnf(pattern), err);
}

bool choice_field(Pick& p, const Fields& f, const char* key, ApiError* err) {
    std::vector<std::string> choices;
    if (!f.strings(key, 1024, &choices, err)) return false;
    if (!f.find(key) || f.find(key)->is_null()) return true;
    return set_gbnf(p, f.prefix + key, grammar::choice_to_gbnf(choices), err);
}

bool grammar_field(Pick& p, const Fields& f, const char* key, ApiError* err) {
    std::string gbnf;
    if (!f.string(key, &gbnf, err)) return false;
    if (gbnf.empty()) return true;
    return set_gbnf(p, f.prefix + key, Expected<std::string>(gbnf), err);
}

// OpenAI's response_format object: {"type": "text" | "json_object" | "json_schema", ...}.
// `flat`: the Responses API's text.format, whose json_schema fields sit beside "type".
bool response_format(Pick& p, const Fields& f, const char* key, bool flat, ApiError* err) {
    const json* rf = nullptr;
    if (!f.object(key, &rf, err)) return false;
    if (!rf) return true;
    const std::string where = f.prefix + key;
    const Fields rff{*rf, where + "."};
    std::string type;
    if (!rff.string("type", &type, err)) return false;
    if (type.empty()) {
        *err = bad_param(where + ".type", "Missing required parameter: '" + where + ".type'.");
        return false;
    }
    if (type == "text") return true;
    if (type == "json_object") return set_gbnf(p, where, grammar::json_object_gbnf(), err);
    if (type != "json_schema") {
        *err = bad_param(where + ".type", "Invalid value for '" + where + ".type': '" + type +
                                              "'. Supported values are: 'text', 'json_object' and 'json_schema'.");
        return false;
    }
    const json* js = rf;
    if (!flat) {
        if (!rff.object("json_schema", &js, err)) return false;
        if (!js) {
            *err = bad_param(where + ".json_schema", "Missing required parameter: '" + where + ".json_schema'.");
            return false;
        }
    }
    const Fields jf{*js, flat ? where + "." : where + ".json_schema."};
    bool strict = false;
    if (!jf.boolean("strict", &strict, err)) return false;
    const json* schema = jf.find("schema");
    if (!schema || schema->is_null()) return set_gbnf(p, where, grammar::json_object_gbnf(), err);
    return set_gbnf(p, jf.prefix + "schema", schema_gbnf(*schema, strict), err);
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

bool compile_constraint(const std::string& gbnf, const std::string& param,
                        std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    if (auto g = cache_find(gbnf)) {
        *out = std::move(g);
        return true;
    }
    auto g = grammar::Grammar::parse(gbnf);
    if (!g.has_value()) {
        *err = bad_param(param, "Invalid '" + param + "': " + g.status().message());
        return false;
    }
    cache_put(gbnf, *g);
    *out = *g;
    return true;
}

bool read_openai_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    Pick p{out, ""};
    if (!response_format(p, f, "response_format", false, err)) return false;
    const json* so = nullptr;
    if (!f.object("structured_outputs", &so, err)) return false;
    if (so) {
        const Fields sf{*so, "structured_outputs."};
        if (!schema_field(p, sf, "json", false, err) || !regex_field(p, sf, "regex", err) ||
            !choice_field(p, sf, "choice", err) || !grammar_field(p, sf, "grammar", err)) {
            return false;
        }
    }
    return schema_field(p, f, "guided_json", false, err) && regex_field(p, f, "guided_regex", err) &&
           choice_field(p, f, "guided_choice", err) && grammar_field(p, f, "guided_grammar", err) &&
           grammar_field(p, f, "grammar", err) && schema_field(p, f, "json_schema", false, err);
}

bool read_responses_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    Pick p{out, ""};
    const json* text = nullptr;
    if (!f.object("text", &text, err)) return false;
    if (!text) return true;
    return response_format(p, Fields{*text, "text."}, "format", true, err);
}

bool read_anthropic_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    Pick p{out, ""};
    const json* of = nullptr;
    if (!f.object("output_format", &of, err)) return false;
    if (!of) return true;
    const Fields off{*of, "output_format."};
    std::string type;
    if (!off.string("type", &type, err)) return false;
    if (type != "json_schema") {
        *err = bad_param("output_format.type", "output_format.type: Input should be 'json_schema'");
        return false;
    }
    const json* schema = off.find("schema");
    if (!schema) {
        *err = bad_param("output_format.schema", "output_format.schema: Field required");
        return false;
    }
    return set_gbnf(p, "output_format.schema", schema_gbnf(*schema, true), err);
}

bool read_llamacpp_constraint(const Fields& f, std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    Pick p{out, ""};
    return grammar_field(p, f, "grammar", err) && schema_field(p, f, "json_schema", false, err) &&
           response_format(p, f, "response_format", false, err);
}

std::string prefix_gbnf_rules(const std::string& gbnf, const std::string& prefix) {
    std::string out;
    out.reserve(gbnf.size() * 2);
    const size_t n = gbnf.size();
    size_t i = 0;
    // Copies a quoted literal or a class through its closing delimiter.
    auto copy_delimited = [&](char close) {
        out += gbnf[i++];
        while (i < n && gbnf[i] != close) {
            if (gbnf[i] == '\\' && i + 1 < n) out += gbnf[i++];
            out += gbnf[i++];
        }
        if (i < n) out += gbnf[i++];
    };
    while (i < n) {
        const char c = gbnf[i];
        if (c == '"') {
            copy_delimited('"');
        } else if (c == '[') {
            copy_delimited(']');
        } else if (c == '{') {
            copy_delimited('}');
        } else if (c == '#') {
            while (i < n && gbnf[i] != '\n') out += gbnf[i++];
        } else if (is_name_char(c)) {
            out += prefix;
            while (i < n && is_name_char(gbnf[i])) out += gbnf[i++];
        } else {
            out += gbnf[i++];
        }
    }
    return out;
}

Expected<std::string> tool_call_gbnf(const Conversation& conv, ToolCallFormat format) {
    using F = ToolCallFormat;
    if (format != F::kHermes && format != F::kGeneric && format != F::kLlama3 && format != F::kMistral) {
        return invalid_argument(std::string("tool calls in the ") + tool_call_format_name(format) +
                                " format cannot be forced by a grammar");
    }
    std::vector<const ToolSpec*> tools;
    for (const ToolSpec& t : conv.tools) {
        if (conv.tool_choice != ToolChoice::kNamed || t.name == conv.tool_choice_name) tools.push_back(&t);
    }
    if (tools.empty()) return invalid_argument("no tool to call");
    std::string rules;
    std::string call = "call ::= ";
    for (size_t i = 0; i < tools.size(); ++i) {
        const ToolSpec& t = *tools[i];
        const std::string p = "t" + std::to_string(i) + "-";
        // The arguments under the tool's schema where it compiles (keywords it cannot enforce
        // are ignored: a tool definition is not refused for them), else any object.
        std::string args;
        json schema;
        ApiError ignored;
        if (!t.parameters.empty() && parse_json_object(t.parameters, &schema, &ignored)) {
            auto g = schema_gbnf(schema, false);
            if (g.has_value()) args = *g;
        }
        if (args.empty()) args = grammar::json_object_gbnf();
        rules += prefix_gbnf_rules(args, p) + "\n";
        const std::string name = json(t.name).dump();
        const char* key = format == F::kLlama3 ? "parameters" : "arguments";
        call += (i ? " | " : "") + grammar::gbnf_literal("{\"name\": " + name + ", \"" + key + "\": ") + " " + p +
                "root \"}\"";
    }
    // One call: a small model made to call would otherwise keep calling until max_tokens.
    const bool many = false;
    std::string root;
    switch (format) {
        case F::kHermes:
        case F::kGeneric:
            root = "root ::= tagged" + std::string(many ? " (\"\\n\" tagged){0,3}" : "") +
                   "\ntagged ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\n";
            break;
        case F::kLlama3:
            root = "root ::= call\n";
            break;
        case F::kMistral:
            root = "root ::= \"[TOOL_CALLS][\" call" + std::string(many ? " (\", \" call){0,3}" : "") + " \"]\"\n";
            break;
        default:
            break;
    }
    return root + call + "\n" + rules;
}

bool forced_tool_call_constraint(const Conversation& conv, ToolCallFormat format, const std::string& param,
                                 std::shared_ptr<const grammar::Grammar>* out, ApiError* err) {
    if (conv.tool_choice != ToolChoice::kRequired && conv.tool_choice != ToolChoice::kNamed) return true;
    if (conv.tools.empty()) return true;
    auto gbnf = tool_call_gbnf(conv, format);
    if (!gbnf.has_value()) return true;  // not forceable in this format: the prompt asks instead
    return compile_constraint(*gbnf, param, out, err);
}

}  // namespace ferrox

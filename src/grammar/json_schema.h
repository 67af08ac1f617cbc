#pragma once
// JSON Schema, `json_object` and choice lists compiled to GBNF (root rule `root`), for
// `response_format`, `text.format`, forced tool calls' arguments and `/completion`'s
// `json_schema`.
//
// What the grammar accepts: a subset of the JSON texts valid against the schema (every text it
// accepts validates; the rest of this comment lists the valid texts it leaves out), chosen so
// that a model always has a way to finish and never loops on filler:
//   - Whitespace: between tokens at most one space, or one newline followed by up to 20 spaces
//     or tabs (enough for pretty-printed JSON nested five levels at four spaces); none before
//     the value and none after it.
//   - Numbers: at most 16 integer digits, 16 fraction digits, 3 exponent digits; no leading
//     zeros; integers are written without a fraction or exponent.
//   - Properties come in the order the schema lists them, each at most once; properties
//     the schema does not name (where additionalProperties allows them) come after them and
//     never repeat a named one (compared as written, not after decoding \u escapes).
//   - enum and const values are written as their compact serialization.
//   - `pattern` and `format` strings spell characters JSON must escape with their short escape
//     (\" \\ \n ...) and every other character unescaped.
//   - Without `type`, the types the other keywords constrain (properties: object, minLength:
//     string, ...) are the ones allowed; with no such keyword, any value.
//   - oneOf is compiled as anyOf (a value matching two branches is not excluded).
//   - An allOf is merged into one schema (properties, required, additionalProperties with its
//     exact meaning per branch, bounds, enums, types); conflicting pattern/format is refused.
// Supported keywords: type (names and lists), properties, required, additionalProperties
// (true, false, a schema), unevaluatedProperties/unevaluatedItems (true or false), enum, const,
// anyOf, oneOf, allOf, $ref ("#", "#/$defs/x", "#/definitions/x", any local JSON pointer;
// recursion allowed), $defs, definitions, items, prefixItems, additionalItems, minItems,
// maxItems, minLength, maxLength (characters, a surrogate pair counting once), pattern (see
// regex.h; search semantics: unanchored unless ^ / $), format (date, time, date-time, uuid,
// email, ipv4), minimum / maximum / exclusiveMinimum / exclusiveMaximum (both draft-4 booleans
// and numbers; exact digit ranges for integers; for numbers, bounds that are whole numbers),
// multipleOf 1, nullable (OpenAPI), uniqueItems false, minProperties up to the number of
// required properties. Annotations (title, description, examples, default, $schema, $id,
// $comment, deprecated, readOnly, writeOnly, ...) and unknown keywords are ignored, as the
// specification says.
// Refused (an error naming the keyword when strict; ignored and listed otherwise): multipleOf
// other than 1, uniqueItems true, patternProperties, propertyNames, not, if/then/else,
// minProperties/maxProperties beyond the above, dependentRequired, dependentSchemas,
// dependencies, contains, minContains, maxContains, unevaluated* with a schema, $dynamicRef,
// $recursiveRef, remote $ref, unknown formats, bounds with a fraction on numbers, a pattern
// the regex compiler refuses, and minLength/maxLength combined with pattern or a format.
//
// Pure functions of their arguments; callable from any thread.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"

namespace ferrox::grammar {

struct JsonSchemaOptions {
    // true: a keyword the grammar cannot enforce is an error (kInvalidArgument naming it and
    // where it is). false: it is ignored (the grammar is then looser than the schema there) and
    // listed in JsonSchemaGbnf::ignored.
    bool strict = true;
    // Whether a missing additionalProperties allows properties the schema does not name (as the
    // specification says). false: only named properties, as OpenAI's strict mode and xgrammar
    // do; a small model then cannot wander off into invented keys.
    bool extra_properties = true;
    // Deepest nesting of subschemas (a bound on recursion through the converter, not on the
    // depth of the JSON that the grammar accepts).
    int max_depth = 128;
};

struct JsonSchemaGbnf {
    std::string gbnf;
    // Keywords ignored under strict = false, each as "keyword at #/json/pointer" (deduplicated).
    std::vector<std::string> ignored;
};

Expected<JsonSchemaGbnf> json_schema_compile(const nlohmann::ordered_json& schema,
                                             const JsonSchemaOptions& opts = {});

// json_schema_compile(...).gbnf.
Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                          const JsonSchemaOptions& opts = {});

// Any JSON object (response_format `json_object`), with the whitespace policy above.
std::string json_object_gbnf();
// Any JSON value.
std::string json_value_gbnf();

// The output is exactly one of `choices` (as raw text, not JSON). An empty list is an error.
Expected<std::string> choice_to_gbnf(const std::vector<std::string>& choices);

}  // namespace ferrox::grammar

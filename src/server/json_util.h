#pragma once
// JSON helpers of the protocol adapters: bounded parsing of a body and typed reads of client
// fields. A field of the wrong type is an ApiError naming the field, never an exception:
// adapters read client JSON only through these (no value()/get<>() on unchecked values).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"

namespace ferrox {

using json = nlohmann::ordered_json;

// Compact JSON with invalid UTF-8 replaced (model text can hold anything).
std::string dump(const json& j);

// The body as a JSON object: depth-limited before parsing (json_body.h); errors name why.
bool parse_json_object(std::string_view body, json* out, ApiError* err);

const char* json_type_name(const json& v);
ApiError wrong_type(const std::string& param, const char* expected, const json& got);

// Typed reads of optional fields of an object; a present null counts as absent (as OpenAI
// does). Each returns false with *err set (naming `prefix + key`) on a wrong type or range.
struct Fields {
    const json& obj;
    std::string prefix;  // "" or e.g. "stream_options."

    const json* find(const char* key) const;  // nullptr when absent or null
    bool number(const char* key, double lo, double hi, double* out, ApiError* err) const;
    bool integer(const char* key, int64_t lo, int64_t hi, int64_t* out, ApiError* err) const;
    bool boolean(const char* key, bool* out, ApiError* err) const;
    bool string(const char* key, std::string* out, ApiError* err) const;
    // Present and of that type; absent leaves *out null.
    bool object(const char* key, const json** out, ApiError* err) const;
    bool array(const char* key, const json** out, ApiError* err) const;
    // A string or an array of strings (stop, stop_sequences), at most max_n of them.
    bool strings(const char* key, size_t max_n, std::vector<std::string>* out, ApiError* err) const;
    std::string name(const char* key) const { return prefix + key; }
};

// A streamed chunk whose only varying part is one string: `shape` is dumped once with the
// string marker() where the text goes, and each chunk is the SSE event of that dump with the
// text's JSON in place of the marker's, byte for byte what sse_event(dump(shape with the text))
// gives (the same serializer writes the text, the rest is the same dump). A token's chunk built
// as a JSON object costs ~5 us of the engine thread (where events are built) against ~0.3 us
// spliced, 16 of them per step at 16 streams.
class ChunkTemplate {
  public:
    ChunkTemplate() = default;
    explicit ChunkTemplate(const json& shape);
    static const std::string& marker();
    bool empty() const { return head_.empty(); }
    std::string render(std::string_view text) const;

  private:
    std::string head_, tail_;  // "data: {...": before the text; "...}\n\n": after it
};

int64_t unix_now();
// prefix + 24 random hex digits, e.g. "chatcmpl-3f2a..."
std::string random_id(const char* prefix);

}  // namespace ferrox

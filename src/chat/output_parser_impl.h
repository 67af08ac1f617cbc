#pragma once
// Internals of the output parsers, shared by output_parser.cc (facade, detection, reasoning),
// tool_calls.cc (the JSON and tag based formats) and harmony.cc. Not part of the chat
// module's interface. Same threading as OutputParser: one instance per stream.
//
// Every parser is a state machine over a buffer of unconsumed text. A step is taken only
// when no later text could change it, so the steps (and hence the output, up to how text is
// split into deltas) are the same for every chunking of the input.

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/output_parser.h"

namespace ferrox::output_detail {

// Deepest JSON nesting accepted in model output; deeper is malformed (and so text).
constexpr size_t kMaxJsonDepth = 64;

struct ToolCall {
    std::string name;
    std::string arguments;  // compact JSON object text
};

inline bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
size_t count_leading_space(std::string_view s);
// Length of s without its trailing whitespace.
size_t trimmed_length(std::string_view s);
std::string_view trim(std::string_view s);

// Appends deltas to the caller's vector. A piece is merged into the previous delta of the
// same kind only when both were appended during this Emitter's life: the caller may already
// have sent the older entries.
class Emitter {
  public:
    explicit Emitter(std::vector<ChatDelta>* out) : out_(out), base_(out->size()) {}
    void text(std::string_view s) { add(ChatDelta::Kind::kText, s); }
    void reasoning(std::string_view s) { add(ChatDelta::Kind::kReasoning, s); }
    void tool_call(ToolCall call);
    int n_calls() const { return n_calls_; }

  private:
    void add(ChatDelta::Kind kind, std::string_view s);
    std::vector<ChatDelta>* out_;
    size_t base_;
    int n_calls_ = 0;
};

// The text policy of the tool-call formats: whitespace next to a tool call is dropped (the
// "\n" between "</tool_call>" and "<tool_call>", the blank line before a call), so text is
// held while it ends in whitespace; markup that only makes sense before a call (DeepSeek's
// section opener) is held the same way and becomes text if text, not a call, comes next.
class TextSink {
  public:
    void text(std::string_view s, Emitter& e);
    void markup(std::string_view s);
    void reasoning(std::string_view s, Emitter& e);
    void call(ToolCall c, Emitter& e);
    // End of a run of text: what is held becomes text.
    void flush(Emitter& e);
    // Only whitespace (dropped) came since the last call.
    bool after_call() const { return skip_space_; }

  private:
    std::string pending_;  // trailing whitespace and held markup, not yet emitted
    bool skip_space_ = false;
};

// Earliest full occurrence of any of `markers` in s at or after `from` (ties: the longest).
struct MarkerHit {
    size_t pos = std::string_view::npos;
    size_t which = 0;
};
MarkerHit find_marker(std::string_view s, std::span<const std::string_view> markers,
                      size_t from = 0);
// Start of the longest suffix of s that is a proper prefix of a marker (s.size() if none).
size_t held_suffix_start(std::string_view s, std::span<const std::string_view> markers);
// The text state's common scan: n_text bytes at the front of s are plain text for certain
// (at eof, everything up to a marker); `marker` is the index of the marker right after them,
// -1 when none is there (yet).
struct TextScan {
    size_t n_text = 0;
    int marker = -1;
};
TextScan scan_text(std::string_view s, std::span<const std::string_view> markers, bool eof);

// Finds where a bracketed value ends without parsing it: strings are skipped (escapes
// included), brackets must nest, at most kMaxJsonDepth deep. Resumable: each feed()
// continues where the last stopped, so a value held back over many pushes costs O(n).
// python=true also nests parentheses and skips '...' strings (Llama 3's f.call(...)).
class BracketScanner {
  public:
    enum class State { kOpen, kDone, kBad };
    explicit BracketScanner(bool python = false) : python_(python) {}
    void reset();
    // `s` starts at the opening bracket and only grows between calls.
    State feed(std::string_view s);
    size_t end() const { return end_; }  // kDone: the value's length

  private:
    bool python_;
    std::string closers_;
    size_t pos_ = 0;
    size_t end_ = 0;
    char quote_ = 0;
    bool escape_ = false;
    State state_ = State::kOpen;
};

// Text that arrives in pieces and is consumed from the front.
class StreamBuffer {
  public:
    void append(std::string_view s) { buf_.append(s); }
    std::string_view rest() const { return std::string_view(buf_).substr(pos_); }
    void consume(size_t n) { pos_ += n; }
    // Drops consumed text; offsets relative to rest() stay valid.
    void compact();
    void clear() {
        buf_.clear();
        pos_ = 0;
    }

  private:
    std::string buf_;
    size_t pos_ = 0;
};

// One format family's parser, below the reasoning splitter.
class FormatParser {
  public:
    virtual ~FormatParser() = default;
    void push(std::string_view text, Emitter& e);
    // Ends a run of text (end of stream, or a think block begins): resolves everything held
    // back, then starts over as at the beginning of an answer.
    void end_run(Emitter& e);
    // True while inside a tool-call construct: a think marker there is content, not markup.
    virtual bool in_construct() const = 0;

  protected:
    // Takes one certain step on rest(): consumes, emits or changes state. Returns false when
    // nothing more can be decided without more text; with eof, every state must drain.
    virtual bool step(bool eof, Emitter& e) = 0;
    virtual void restart() = 0;
    std::string_view rest() const { return buf_.rest(); }
    void consume(size_t n) { buf_.consume(n); }
    TextSink sink_;

  private:
    StreamBuffer buf_;
};

// JSON helpers (tool_calls.cc): the compact dump of `text` when it is exactly one JSON object
// (surrounding whitespace allowed) within kMaxJsonDepth.
std::optional<std::string> json_object_text(std::string_view text);

// parse_tools=false: the family's syntax is still parsed, but tool calls come out as text.
std::unique_ptr<FormatParser> make_format_parser(ToolCallFormat syntax, bool parse_tools,
                                                 bool split_reasoning);
std::unique_ptr<FormatParser> make_harmony_parser(bool parse_tools, bool split_reasoning);

}  // namespace ferrox::output_detail

// ChunkTemplate: a chunk spliced from its template is byte for byte the chunk built and
// dumped as a whole JSON object (what the streaming sinks sent before the template).
#include "server/json_util.h"

#include <gtest/gtest.h>

#include <string>

#include "server/http.h"

namespace ferrox {
namespace {

json chat_chunk(const std::string& text) {
    json c = {{"id", "chatcmpl-0123"}, {"object", "chat.completion.chunk"}, {"created", 1765000000},
              {"model", "m \"quoted\" \\ model"}, {"system_fingerprint", "fp"}};
    json choice = {{"index", 2}, {"delta", {{"content", text}}}};
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = nullptr;
    c["choices"] = json::array({choice});
    return c;
}

TEST(ChunkTemplate, SplicedChunkIsTheDumpedObject) {
    const ChunkTemplate t(chat_chunk(ChunkTemplate::marker()));
    const std::string texts[] = {
        "Hello",
        " world",
        "",
        "quote \" backslash \\ slash / newline \n tab \t cr \r",
        std::string("controls \x01\x08\x0c\x1f del \x7f nul ") + '\0' + " end",
        "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80",
        "invalid \xff\xfe utf-8 \xc3 and a cut \xe4\xb8",
        "a text holding the marker " + ChunkTemplate::marker(),
    };
    for (const std::string& text : texts) {
        SCOPED_TRACE(text);
        EXPECT_EQ(t.render(text), sse_event(dump(chat_chunk(text))));
    }
}

TEST(ChunkTemplate, OneDataLineEndedByABlankLine) {
    const ChunkTemplate t(chat_chunk(ChunkTemplate::marker()));
    const std::string c = t.render("two\nlines");
    EXPECT_EQ(c.rfind("data: {", 0), 0u);
    EXPECT_EQ(c.find('\n'), c.size() - 2);
    EXPECT_EQ(c.substr(c.size() - 2), "\n\n");
    EXPECT_NE(c.find("\"content\":\"two\\nlines\""), std::string::npos);
}

}  // namespace
}  // namespace ferrox

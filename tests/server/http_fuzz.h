#pragma once
// The HTTP fuzz target's pieces (http_fuzz.cc), shared with its corpus replay test: the real
// ApiServer, built once per process on 127.0.0.1 with a tiny random-weight model whose engine
// runs the scripted stand-in, and a blocking loopback client.
//
// Threading: call from one thread at a time (the fuzzer's, or the test's).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ferrox::http_fuzz {

// What one connection got back.
struct Exchange {
    std::string reply;          // every byte the server sent
    bool closed = false;        // the server closed the connection before the deadline
    bool parsed = false;        // reply is a sequence of whole or cut-short HTTP/1.x responses
    std::vector<int> statuses;  // of every response in reply, in order
};

// The server's port; builds the server on the first call (aborts if it cannot).
int port();

// Connects, writes `request`, half-closes (FIN: the server answers what it got, then closes),
// and reads until the server closes or timeout_ms pass.
Exchange exchange(std::string_view request, int timeout_ms = 10'000);

// The bytes a fuzz input sends: as they are when byte 0 is 0x20 or above (raw HTTP); else a
// well-formed POST of data[1..] as the JSON body to the route that byte 0 picks (kJsonRoutes).
std::string request_for(const uint8_t* data, size_t size);

extern const std::vector<std::string> kJsonRoutes;

}  // namespace ferrox::http_fuzz

#pragma once
// The Responses API's `reasoning.encrypted_content`: with `include:
// ["reasoning.encrypted_content"]` (Codex sends it with `store: false`) each reasoning item
// carries an opaque blob from which ferrox restores the reasoning text when a later request
// replays the item. The blob is "fxr1." + base64(HMAC-SHA256(key, text) || text): opaque to
// the client, verifiable by the server; a blob that does not verify (another server's key, an
// edit, a truncation) restores nothing. It is signed, not encrypted: it carries text the
// response already shows.
//
// The key is FERROX_RESPONSES_KEY's SHA-256 when that environment variable is set (so blobs
// survive a restart and are shared by replicas), else 32 random bytes drawn once per process.
//
// Threading: any thread (the key is made once, under a static initializer).

#include <optional>
#include <string>
#include <string_view>

namespace ferrox {

std::string reasoning_seal(std::string_view text);
// The text a blob sealed, or nothing when it does not verify.
std::optional<std::string> reasoning_unseal(std::string_view blob);

// Exposed for the unit test: SHA-256 and HMAC-SHA256 (RFC 6234 / RFC 2104), raw 32-byte digests.
std::string sha256(std::string_view data);
std::string hmac_sha256(std::string_view key, std::string_view data);

}  // namespace ferrox

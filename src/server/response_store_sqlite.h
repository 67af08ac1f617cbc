#pragma once
// The Responses store in SQLite (`--state-dir DIR`): DIR/responses.sqlite3, WAL journal, one
// row per response (the history as JSON, response_store.h's history_to_json), so stored
// conversations survive a restart. Bounds and expiry are applied on every put (oldest first);
// an expired row is never returned. A file that is not a readable database of this schema is
// an error at open (one line naming the file): the server does not start rather than discard
// what it holds.
//
// Threading: any thread (one connection behind one mutex).

#include <memory>

#include "server/response_store.h"

namespace ferrox {

Expected<std::unique_ptr<ResponseStore>> open_sqlite_response_store(const ResponseStoreOptions& opts);

}  // namespace ferrox

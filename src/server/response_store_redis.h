#pragma once
// The Responses store in Redis (`--responses-store redis://HOST:PORT[/DB]`), so that replicas
// share stored conversations and `previous_response_id` works whichever replica answers. RESP
// over one plain TCP socket (no client library): SET key value EX ttl, GET, DEL, and a list of
// ids for the count bound (RPUSH, LLEN, LPOP: the oldest go first). Each value is a JSON object
// with the owner (key_scope), model, response, input items and history; a response over the
// byte bound is not stored. Expiry is Redis's (EX); with ttl 0, none. The byte bound of the
// whole store is Redis's own (maxmemory).
//
// Errors: a server that does not answer PING at open is a startup error (one line); later, a
// failed command reconnects once and retries, then logs a warning (a get answers nothing).
//
// Threading: any thread (one connection behind one mutex).

#include <memory>
#include <string>

#include "server/response_store.h"

namespace ferrox {

// "redis://HOST:PORT[/DB]" -> host, port, db; false with a message.
bool parse_redis_url(const std::string& url, std::string* host, int* port, int* db, std::string* error);

Expected<std::unique_ptr<ResponseStore>> open_redis_response_store(const ResponseStoreOptions& opts);

}  // namespace ferrox

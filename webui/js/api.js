// The server's HTTP API as the page uses it: the API key (kept in this browser), JSON calls,
// and Server-Sent Events read from a fetch body. URLs are relative, so the page also works
// behind a proxy that serves ferrox under a prefix.

const KEY_ITEM = "ferrox.apiKey";
const ADMIN_ITEM = "ferrox.adminKey";

export function apiKey() { return localStorage.getItem(KEY_ITEM) || ""; }
export function setApiKey(k) { k ? localStorage.setItem(KEY_ITEM, k) : localStorage.removeItem(KEY_ITEM); }
export function adminKey() { return localStorage.getItem(ADMIN_ITEM) || ""; }
export function setAdminKey(k) { k ? localStorage.setItem(ADMIN_ITEM, k) : localStorage.removeItem(ADMIN_ITEM); }

// Thrown for any answer that is not 2xx; `status` 401 means the key is missing or wrong.
export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

function headers(key, json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function errorOf(res) {
  let msg = res.status + " " + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error) msg = body.error.message || JSON.stringify(body.error);
  } catch (_) { /* not JSON */ }
  return new ApiError(res.status, msg);
}

// GET or POST a JSON API; `key` defaults to the API key (the admin routes pass theirs).
export async function call(path, { method = "GET", body, key = apiKey(), signal } = {}) {
  const res = await fetch(path, {
    method, signal, headers: headers(key, body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!res.ok) throw await errorOf(res);
  const type = res.headers.get("content-type") || "";
  return type.includes("json") ? res.json() : res.text();
}

// POSTs `body` and calls onEvent(object) for each SSE `data:` message until [DONE] or the end
// of the stream. Aborting `signal` ends the request (the server then stops generating).
export async function stream(path, body, onEvent, signal) {
  const res = await fetch(path, { method: "POST", signal, headers: headers(apiKey(), true), body: JSON.stringify(body) });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let end;
    while ((end = buf.search(/\r?\n\r?\n/)) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      const event = JSON.parse(data);
      if (event.error) throw new ApiError(500, event.error.message || JSON.stringify(event.error));
      onEvent(event);
    }
  }
}

// The generating models (embedding models left out): [{id, meta}].
export async function chatModels() {
  const list = await call("v1/models");
  return (list.data || []).filter((m) => !(m.meta && m.meta.kind === "embed"));
}

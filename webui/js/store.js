// Conversations and settings, kept in this browser (localStorage): one item per conversation,
// so a long history costs one write per change of that conversation only.
//
// A conversation: {id, title, created, updated, model, messages: [{role, content, reasoning?,
// tool_calls?, attachments?: [{name, text}], stats?, error?}]}.

const CONV_PREFIX = "ferrox.conv.";
const SETTINGS_ITEM = "ferrox.settings";

export const DEFAULT_SETTINGS = {
  systemPrompt: "",
  temperature: "",   // "" : the server's default
  top_p: "",
  top_k: "",
  min_p: "",
  max_tokens: "",
  extra: "",         // raw JSON object merged into every request
};

export function newId() {
  return Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
}

export function listConversations() {
  const out = [];
  for (let i = 0; i < localStorage.length; ++i) {
    const k = localStorage.key(i);
    if (!k.startsWith(CONV_PREFIX)) continue;
    try { out.push(JSON.parse(localStorage.getItem(k))); } catch (_) { /* skip a broken item */ }
  }
  return out.sort((a, b) => b.updated - a.updated);
}

export function loadConversation(id) {
  const s = localStorage.getItem(CONV_PREFIX + id);
  return s ? JSON.parse(s) : null;
}

export function saveConversation(c) {
  c.updated = Date.now();
  localStorage.setItem(CONV_PREFIX + c.id, JSON.stringify(c));
}

export function deleteConversation(id) { localStorage.removeItem(CONV_PREFIX + id); }

export function createConversation(model) {
  const now = Date.now();
  return { id: newId(), title: "New chat", created: now, updated: now, model: model || "", messages: [] };
}

export function exportAll() {
  return JSON.stringify({ format: "ferrox-conversations", version: 1, conversations: listConversations() }, null, 2);
}

// Accepts what exportAll() writes, a single conversation, or a list of them. Imported
// conversations get new ids (nothing is overwritten). Returns how many were imported.
export function importJson(text) {
  const data = JSON.parse(text);
  const list = Array.isArray(data) ? data : Array.isArray(data.conversations) ? data.conversations : [data];
  let n = 0;
  for (const c of list) {
    if (!c || !Array.isArray(c.messages)) continue;
    const conv = createConversation(c.model);
    conv.title = typeof c.title === "string" ? c.title : "Imported chat";
    conv.created = Number(c.created) || conv.created;
    conv.messages = c.messages.filter((m) => m && typeof m.role === "string").map((m) => ({
      ...m, content: typeof m.content === "string" ? m.content : JSON.stringify(m.content ?? ""),
    }));
    saveConversation(conv);
    ++n;
  }
  return n;
}

export function loadSettings() {
  try { return { ...DEFAULT_SETTINGS, ...JSON.parse(localStorage.getItem(SETTINGS_ITEM) || "{}") }; } catch (_) { return { ...DEFAULT_SETTINGS }; }
}

export function saveSettings(s) { localStorage.setItem(SETTINGS_ITEM, JSON.stringify(s)); }

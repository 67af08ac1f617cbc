// The chat page: conversations kept in this browser, answers streamed from
// /v1/chat/completions, Markdown rendered safely (markdown.js).
import { ApiError, apiKey, chatModels, setApiKey, stream } from "./api.js";
import { escapeHtml, loadLibraries, markdownAvailable, renderInto } from "./markdown.js";
import * as store from "./store.js";
import { applyTheme, toggleTheme } from "./theme.js";

const $ = (id) => document.getElementById(id);
const MODEL_ITEM = "ferrox.model";
const MAX_ATTACHMENT = 1 << 20;  // bytes per attached file

const state = {
  conv: null,         // the open conversation
  models: [],         // [{id, meta}] that can chat
  settings: store.loadSettings(),
  controller: null,   // AbortController of the answer streaming now
  attachments: [],    // [{name, text}] for the next message
};

// ---- conversations -------------------------------------------------------------------------

function openConversation(conv) {
  state.conv = conv;
  $("conv-title").textContent = conv.title;
  if (conv.model && state.models.some((m) => m.id === conv.model)) $("model").value = conv.model;
  renderSidebar();
  renderMessages();
  document.body.classList.remove("sidebar-open");
}

function newConversation() {
  if (state.controller) return;
  openConversation(store.createConversation($("model").value));
  $("input").focus();
}

function renderSidebar() {
  const list = $("conv-list");
  list.replaceChildren();
  for (const c of store.listConversations()) {
    const item = document.createElement("div");
    item.className = "conv" + (state.conv && c.id === state.conv.id ? " active" : "");
    item.dataset.id = c.id;
    item.innerHTML = `<button type="button" class="conv-open"></button>
      <button type="button" class="icon conv-rename" title="Rename" aria-label="Rename">&#9998;</button>
      <button type="button" class="icon conv-delete" title="Delete" aria-label="Delete">&#10005;</button>`;
    item.querySelector(".conv-open").textContent = c.title;
    item.querySelector(".conv-open").title = c.title;
    item.querySelector(".conv-open").addEventListener("click", () => {
      if (!state.controller) openConversation(store.loadConversation(c.id));
    });
    item.querySelector(".conv-rename").addEventListener("click", () => renameConversation(c.id));
    item.querySelector(".conv-delete").addEventListener("click", () => deleteConversation(c.id));
    list.appendChild(item);
  }
}

function renameConversation(id) {
  const c = store.loadConversation(id);
  const title = prompt("Rename the conversation", c.title);
  if (title === null || !title.trim()) return;
  c.title = title.trim();
  store.saveConversation(c);
  if (state.conv && state.conv.id === id) {
    state.conv.title = c.title;
    $("conv-title").textContent = c.title;
  }
  renderSidebar();
}

function deleteConversation(id) {
  if (state.controller && state.conv.id === id) return;
  if (!confirm("Delete this conversation?")) return;
  store.deleteConversation(id);
  if (state.conv && state.conv.id === id) {
    const rest = store.listConversations();
    openConversation(rest.length ? rest[0] : store.createConversation($("model").value));
  } else {
    renderSidebar();
  }
}

function save() {
  if (state.conv.messages.length) store.saveConversation(state.conv);
  renderSidebar();
}

// ---- messages ------------------------------------------------------------------------------

function renderMessages() {
  const box = $("messages");
  box.replaceChildren();
  if (!state.conv.messages.length) {
    box.innerHTML = `<div class="empty">Ask anything. Answers stream from this server; nothing leaves it.</div>`;
  }
  state.conv.messages.forEach((m, i) => box.appendChild(messageEl(m, i)));
  box.scrollTop = box.scrollHeight;
}

function messageEl(m, i) {
  const el = document.createElement("article");
  el.className = "msg " + m.role;
  el.dataset.index = i;
  const last = i === state.conv.messages.length - 1;
  el.innerHTML = `<div class="msg-head"><span class="role">${m.role === "user" ? "You" : escapeHtml(m.model || "Assistant")}</span>
    <span class="msg-actions"></span></div>`;
  const actions = el.querySelector(".msg-actions");
  const action = (cls, label, fn) => {
    const b = document.createElement("button");
    b.type = "button";
    b.className = "small " + cls;
    b.textContent = label;
    b.addEventListener("click", fn);
    actions.appendChild(b);
  };
  if (!state.controller) {
    action("edit", "Edit", () => editMessage(i, el));
    if (m.role === "assistant" && last) action("regenerate", "Regenerate", () => regenerate(i));
    if (m.role === "assistant") action("copy", "Copy", () => navigator.clipboard.writeText(m.content).catch(() => {}));
  }
  fillMessage(el, m);
  return el;
}

// The parts of a message that change while it streams: reasoning, tool calls, text, stats.
function fillMessage(el, m) {
  for (const old of el.querySelectorAll(".reasoning, .tool-call, .content, .chips, .stats, .error")) old.remove();
  if (m.reasoning) {
    const d = document.createElement("details");
    d.className = "reasoning";
    d.open = !!m.streaming && !m.content;
    d.innerHTML = `<summary>Reasoning</summary><div class="reasoning-text"></div>`;
    d.querySelector(".reasoning-text").textContent = m.reasoning;
    el.appendChild(d);
  }
  if (m.attachments && m.attachments.length) el.appendChild(chips(m.attachments));
  const content = document.createElement("div");
  content.className = "content";
  if (m.role === "assistant") renderInto(content, m.content || "");
  else content.textContent = m.content;
  el.appendChild(content);
  for (const call of m.tool_calls || []) {
    const t = document.createElement("div");
    t.className = "tool-call";
    t.innerHTML = `<div class="tool-head">Tool call <code class="tool-name"></code></div><pre class="tool-args"></pre>`;
    t.querySelector(".tool-name").textContent = call.function.name;
    let args = call.function.arguments;
    try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (_) { /* partial while streaming */ }
    t.querySelector(".tool-args").textContent = args;
    el.appendChild(t);
  }
  if (m.error) {
    const e = document.createElement("div");
    e.className = "error";
    e.textContent = m.error;
    el.appendChild(e);
  }
  if (m.stats) {
    const s = document.createElement("div");
    s.className = "stats";
    s.textContent = statsText(m.stats);
    el.appendChild(s);
  }
}

function statsText(s) {
  const parts = [`${s.tokens} tokens`];
  if (s.tps != null) parts.push(`${s.tps.toFixed(1)} tok/s`);
  if (s.ttft_ms != null) parts.push(`TTFT ${Math.round(s.ttft_ms)} ms`);
  if (s.prompt_tokens != null) parts.push(`${s.cached_tokens ?? 0}/${s.prompt_tokens} prompt tokens cached`);
  if (s.finish) parts.push(s.finish);
  return parts.join(" · ");
}

function chips(files, removable) {
  const box = document.createElement("div");
  box.className = "chips";
  files.forEach((f, i) => {
    const c = document.createElement("span");
    c.className = "chip";
    c.textContent = `${f.name} (${f.text.length} chars)`;
    if (removable) {
      const x = document.createElement("button");
      x.type = "button";
      x.className = "icon";
      x.textContent = "×";
      x.title = "Remove";
      x.addEventListener("click", () => { state.attachments.splice(i, 1); renderAttachments(); });
      c.appendChild(x);
    }
    box.appendChild(c);
  });
  return box;
}

function renderAttachments() {
  $("attachments").replaceChildren(...(state.attachments.length ? [chips(state.attachments, true)] : []));
}

async function attachFiles(files) {
  for (const f of files) {
    if (f.size > MAX_ATTACHMENT) { notice(`${f.name} is larger than 1 MiB: not attached.`); continue; }
    const text = await f.text();
    if (text.includes("\u0000")) { notice(`${f.name} is not a text file: not attached.`); continue; }
    state.attachments.push({ name: f.name, text });
  }
  renderAttachments();
}

function editMessage(i, el) {
  const m = state.conv.messages[i];
  const content = el.querySelector(".content");
  const box = document.createElement("div");
  box.className = "edit-box";
  box.innerHTML = `<textarea rows="4"></textarea><div class="actions">
    <button type="button" class="cancel">Cancel</button>
    <button type="button" class="save">Save</button>
    ${m.role === "user" ? '<button type="button" class="primary save-send">Save &amp; send</button>' : ""}</div>`;
  const ta = box.querySelector("textarea");
  ta.value = m.content;
  content.replaceWith(box);
  ta.focus();
  box.querySelector(".cancel").addEventListener("click", renderMessages);
  box.querySelector(".save").addEventListener("click", () => {
    m.content = ta.value;
    save();
    renderMessages();
  });
  const send = box.querySelector(".save-send");
  if (send) send.addEventListener("click", () => {
    m.content = ta.value;
    state.conv.messages.length = i + 1;  // the answers after it belonged to the old text
    save();
    generate();
  });
}

function regenerate(i) {
  state.conv.messages.length = i;
  generate();
}

// ---- requests ------------------------------------------------------------------------------

function requestMessages() {
  const out = [];
  if (state.settings.systemPrompt.trim()) out.push({ role: "system", content: state.settings.systemPrompt });
  for (const m of state.conv.messages) {
    if (m.role === "assistant" && !m.content && m.error) continue;
    let content = m.content;
    for (const f of m.attachments || []) content += `\n\n--- ${f.name} ---\n${f.text}`;
    out.push({ role: m.role, content });
  }
  return out;
}

// The request body: the messages, the sampling settings that are set, then the raw JSON.
export function requestBody(model, messages, settings) {
  const body = { model, messages, stream: true, stream_options: { include_usage: true } };
  for (const [k, conv] of [["temperature", parseFloat], ["top_p", parseFloat], ["top_k", parseInt],
                           ["min_p", parseFloat], ["max_tokens", parseInt]]) {
    const v = settings[k];
    if (v !== "" && v != null && !Number.isNaN(conv(v))) body[k] = conv(v);
  }
  if (settings.extra && settings.extra.trim()) Object.assign(body, JSON.parse(settings.extra));
  return body;
}

async function generate() {
  const model = $("model").value;
  state.conv.model = model;
  const answer = { role: "assistant", content: "", reasoning: "", model, streaming: true };
  const body = requestBody(model, requestMessages(), state.settings);
  state.conv.messages.push(answer);
  state.controller = new AbortController();
  setBusy(true);
  renderMessages();
  const el = $("messages").lastElementChild;
  const t0 = performance.now();
  let tFirst = null, nDeltas = 0, usage = null, finish = null, pending = false;
  const calls = [];
  const redraw = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      fillMessage(el, answer);
      const box = $("messages");
      if (box.scrollHeight - box.scrollTop - box.clientHeight < 200) box.scrollTop = box.scrollHeight;
    });
  };
  try {
    await stream("v1/chat/completions", body, (ev) => {
      if (ev.usage) usage = ev.usage;
      for (const ch of ev.choices || []) {
        const d = ch.delta || {};
        const r = d.reasoning_content ?? d.reasoning;
        if (d.content || r || d.tool_calls) {
          tFirst ??= performance.now();
          ++nDeltas;
        }
        if (d.content) answer.content += d.content;
        if (r) answer.reasoning += r;
        for (const tc of d.tool_calls || []) {
          const c = (calls[tc.index ?? 0] ??= { id: tc.id, function: { name: "", arguments: "" } });
          if (tc.function?.name) c.function.name += tc.function.name;
          if (tc.function?.arguments) c.function.arguments += tc.function.arguments;
        }
        if (calls.length) answer.tool_calls = calls.filter(Boolean);
        if (ch.finish_reason) finish = ch.finish_reason;
      }
      redraw();
    }, state.controller.signal);
  } catch (e) {
    if (e.name === "AbortError") {
      finish = "stopped";
    } else {
      answer.error = e.message;
      if (e instanceof ApiError && e.status === 401) openSettings(true);
    }
  }
  const tEnd = performance.now();
  delete answer.streaming;
  if (!answer.reasoning) delete answer.reasoning;
  const tokens = usage ? usage.completion_tokens : nDeltas;
  if (tFirst != null || usage) {
    answer.stats = {
      tokens,
      ttft_ms: tFirst != null ? tFirst - t0 : null,
      tps: tFirst != null && tokens > 1 && tEnd > tFirst ? (tokens - 1) / ((tEnd - tFirst) / 1000) : null,
      prompt_tokens: usage ? usage.prompt_tokens : null,
      cached_tokens: usage?.prompt_tokens_details?.cached_tokens ?? null,
      finish,
    };
  }
  if (state.conv.title === "New chat") {
    const first = state.conv.messages.find((m) => m.role === "user");
    if (first) state.conv.title = first.content.replace(/\s+/g, " ").trim().slice(0, 48) || "New chat";
    $("conv-title").textContent = state.conv.title;
  }
  state.controller = null;
  setBusy(false);
  save();
  renderMessages();
}

function setBusy(busy) {
  $("send").hidden = busy;
  $("stop").hidden = !busy;
  document.body.classList.toggle("busy", busy);
}

async function sendMessage() {
  const text = $("input").value;
  if (state.controller || (!text.trim() && !state.attachments.length)) return;
  if (!$("model").value) { notice("No chat model is loaded on this server."); return; }
  const msg = { role: "user", content: text };
  if (state.attachments.length) msg.attachments = state.attachments;
  state.attachments = [];
  renderAttachments();
  $("input").value = "";
  state.conv.messages.push(msg);
  await generate();
}

// ---- models, settings, notices -------------------------------------------------------------

async function loadModels() {
  try {
    state.models = await chatModels();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) { openSettings(true); return; }
    notice("Cannot list the models: " + e.message);
    return;
  }
  const sel = $("model");
  const keep = (state.conv && state.conv.model) || localStorage.getItem(MODEL_ITEM);
  sel.replaceChildren(...state.models.map((m) => new Option(m.id, m.id)));
  if (keep && state.models.some((m) => m.id === keep)) sel.value = keep;
  sel.disabled = state.models.length < 2;
  document.body.classList.toggle("one-model", state.models.length < 2);
  if (!state.models.length) notice("No chat model is loaded on this server.");
}

function openSettings(keyNeeded) {
  const s = state.settings;
  $("key-needed").hidden = !keyNeeded;
  $("set-api-key").value = apiKey();
  $("set-system").value = s.systemPrompt;
  for (const k of ["temperature", "top_p", "top_k", "min_p", "max_tokens"]) $("set-" + k).value = s[k];
  $("set-extra").value = s.extra;
  $("extra-error").hidden = true;
  if (!$("settings").open) $("settings").showModal();
  if (keyNeeded) $("set-api-key").focus();
}

function saveSettingsFromForm(ev) {
  const extra = $("set-extra").value.trim();
  if (extra) {
    try {
      const v = JSON.parse(extra);
      if (typeof v !== "object" || Array.isArray(v) || v === null) throw new Error("not an object");
    } catch (e) {
      $("extra-error").textContent = "Other request parameters must be a JSON object: " + e.message;
      $("extra-error").hidden = false;
      ev.preventDefault();
      return;
    }
  }
  const keyChanged = $("set-api-key").value !== apiKey();
  setApiKey($("set-api-key").value.trim());
  const s = state.settings;
  s.systemPrompt = $("set-system").value;
  for (const k of ["temperature", "top_p", "top_k", "min_p", "max_tokens"]) s[k] = $("set-" + k).value;
  s.extra = extra;
  store.saveSettings(s);
  if (keyChanged || !state.models.length) loadModels();
}

let noticeTimer = null;
function notice(text, sticky) {
  const n = $("notice");
  n.textContent = text;
  n.hidden = false;
  clearTimeout(noticeTimer);
  if (!sticky) noticeTimer = setTimeout(() => (n.hidden = true), 6000);
}

function download(name, text) {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob([text], { type: "application/json" }));
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 0);
}

// ---- wiring --------------------------------------------------------------------------------

function wire() {
  $("composer").addEventListener("submit", (e) => { e.preventDefault(); sendMessage(); });
  $("input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); sendMessage(); }
  });
  $("stop").addEventListener("click", () => state.controller && state.controller.abort());
  $("new-chat").addEventListener("click", newConversation);
  $("model").addEventListener("change", () => {
    localStorage.setItem(MODEL_ITEM, $("model").value);
    state.conv.model = $("model").value;
  });
  $("settings-btn").addEventListener("click", () => openSettings(false));
  $("settings-form").addEventListener("submit", (e) => {
    if (e.submitter && e.submitter.value === "save") saveSettingsFromForm(e);
  });
  $("settings-reset").addEventListener("click", () => {
    state.settings = { ...store.DEFAULT_SETTINGS };
    store.saveSettings(state.settings);
    openSettings(false);
  });
  $("theme").addEventListener("click", toggleTheme);
  $("toggle-sidebar").addEventListener("click", () => document.body.classList.toggle("sidebar-open"));
  $("attach").addEventListener("click", () => $("attach-file").click());
  $("attach-file").addEventListener("change", (e) => { attachFiles([...e.target.files]); e.target.value = ""; });
  $("export").addEventListener("click", () => download(`ferrox-chats-${new Date().toISOString().slice(0, 10)}.json`, store.exportAll()));
  $("import").addEventListener("click", () => $("import-file").click());
  $("import-file").addEventListener("change", async (e) => {
    const f = e.target.files[0];
    e.target.value = "";
    if (!f) return;
    try {
      notice(`Imported ${store.importJson(await f.text())} conversation(s).`);
    } catch (err) {
      notice("Cannot import: " + err.message);
    }
    renderSidebar();
  });
}

async function main() {
  applyTheme();
  wire();
  await loadLibraries();
  if (!markdownAvailable()) {
    notice("Markdown rendering is unavailable: this ferrox was built without Debian's libjs-marked and " +
           "node-dompurify (scripts/setup.sh installs them; then rebuild). Answers are shown as plain text.", true);
  }
  applyTheme();
  await loadModels();
  const convs = store.listConversations();
  openConversation(convs.length ? convs[0] : store.createConversation($("model").value));
  document.body.dataset.ready = "1";
}

main();

// Markdown for answers: marked parses, KaTeX renders math, DOMPurify removes anything that
// could run (the model's HTML is text to show, never code), highlight.js colors code blocks.
// The libraries are Debian's, embedded at build time; /webui/lib/manifest.json says which are
// there. Without marked or DOMPurify an answer is shown as plain text, and the page says why.

const LIB_SCRIPTS = {
  marked: ["webui/lib/marked.min.js"],
  dompurify: ["webui/lib/purify.min.js"],
  highlight: ["webui/lib/highlight.min.js"],
  katex: ["webui/lib/katex/katex.min.js"],
};

let ready = null;
export const libs = { marked: false, dompurify: false, highlight: false, katex: false };

function loadScript(src) {
  return new Promise((resolve, reject) => {
    const s = document.createElement("script");
    s.src = src;
    s.onload = resolve;
    s.onerror = () => reject(new Error("cannot load " + src));
    document.head.appendChild(s);
  });
}

function loadStyle(href, hljsTheme) {
  const l = document.createElement("link");
  l.rel = "stylesheet";
  l.href = href;
  if (hljsTheme) {
    l.dataset.hljs = hljsTheme;
    l.media = document.documentElement.dataset.theme === hljsTheme ? "all" : "not all";
  }
  document.head.appendChild(l);
}

// Loads what the manifest lists, once. Resolves to `libs` (which are usable).
export function loadLibraries() {
  if (ready) return ready;
  ready = (async () => {
    let manifest = {};
    try {
      manifest = await (await fetch("webui/lib/manifest.json")).json();
    } catch (_) { /* an old build: plain text */ }
    for (const name of Object.keys(LIB_SCRIPTS)) {
      if (!manifest[name]) continue;
      try {
        for (const src of LIB_SCRIPTS[name]) await loadScript(src);
        libs[name] = true;
      } catch (e) { console.warn(e.message); }
    }
    if (libs.katex) loadStyle("webui/lib/katex/katex.min.css");
    if (libs.highlight) {
      loadStyle("webui/lib/hljs-light.css", "light");
      loadStyle("webui/lib/hljs-dark.css", "dark");
      // Debian keeps highlight.js 9 patched; its upstream end-of-life notice is not for users.
      window.hljs.configure({ hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true });
    }
    if (libs.marked) {
      // HTML in an answer is shown as the text it is, never parsed into elements: a model that
      // writes <img onerror=...> shows that text. DOMPurify then cleans what Markdown itself
      // makes (a [link](javascript:...) loses its href).
      const renderer = { html: (html) => escapeHtml(typeof html === "string" ? html : html.text) };
      window.marked.marked.use({ extensions: mathExtensions(), renderer, gfm: true, breaks: false });
    }
    return libs;
  })();
  return ready;
}

export function markdownAvailable() { return libs.marked && libs.dompurify; }

function renderMath(tex, displayMode) {
  if (!libs.katex) return `<code class="math">${escapeHtml(tex)}</code>`;
  return window.katex.renderToString(tex, { displayMode, throwOnError: false, output: "html" });
}

// $$...$$ and \[...\] as display math, $...$ and \(...\) inline. A $ followed by a space or a
// digit after the closing one ("$5 and $10") is not math.
function mathExtensions() {
  return [
    {
      name: "mathBlock", level: "block",
      start(src) { const m = src.match(/\$\$|\\\[/); return m ? m.index : undefined; },
      tokenizer(src) {
        const m = src.match(/^\$\$([\s\S]+?)\$\$/) || src.match(/^\\\[([\s\S]+?)\\\]/);
        if (m) return { type: "mathBlock", raw: m[0], text: m[1].trim() };
      },
      renderer(token) { return `<div class="math-display">${renderMath(token.text, true)}</div>`; },
    },
    {
      name: "mathInline", level: "inline",
      start(src) { const m = src.match(/\$|\\\(/); return m ? m.index : undefined; },
      tokenizer(src) {
        const m = src.match(/^\$\$([^$]+?)\$\$/) || src.match(/^\$(?![\s$])([^$\n]+?)(?<!\s)\$(?![\d])/) ||
                  src.match(/^\\\(([\s\S]+?)\\\)/);
        if (m) return { type: "mathInline", raw: m[0], text: m[1] };
      },
      renderer(token) { return renderMath(token.text, false); },
    },
  ];
}

export function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

// Renders `text` into `el`: sanitized Markdown, or plain text without the libraries.
export function renderInto(el, text) {
  if (!markdownAvailable()) {
    el.classList.add("plain");
    el.textContent = text;
    return;
  }
  const html = window.marked.marked.parse(text);
  el.innerHTML = window.DOMPurify.sanitize(html, { USE_PROFILES: { html: true, mathMl: true, svg: true } });
  for (const a of el.querySelectorAll("a[href]")) {
    a.target = "_blank";
    a.rel = "noopener noreferrer";
  }
  for (const pre of el.querySelectorAll("pre")) decorateCode(pre);
}

function decorateCode(pre) {
  const code = pre.querySelector("code");
  if (!code) return;
  if (libs.highlight) {
    const lang = (code.className.match(/language-([\w+-]+)/) || [])[1];
    if (lang && !window.hljs.getLanguage(lang)) code.classList.remove("language-" + lang);
    window.hljs.highlightBlock(code);
  }
  const bar = document.createElement("div");
  bar.className = "code-bar";
  const lang = (code.className.match(/language-([\w+-]+)/) || [])[1] || "";
  bar.innerHTML = `<span class="code-lang"></span><button type="button" class="copy-code">Copy</button>`;
  bar.querySelector(".code-lang").textContent = lang;
  bar.querySelector("button").addEventListener("click", async (e) => {
    const text = code.textContent;
    try {
      await navigator.clipboard.writeText(text);
    } catch (_) {
      // No clipboard permission (plain http on another host): a selection and the old command.
      const r = document.createRange();
      r.selectNodeContents(code);
      getSelection().removeAllRanges();
      getSelection().addRange(r);
      document.execCommand("copy");
    }
    e.target.textContent = "Copied";
    setTimeout(() => (e.target.textContent = "Copy"), 1200);
  });
  pre.prepend(bar);
}

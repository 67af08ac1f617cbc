// Dark and light themes: the user's choice, else the system's. Shared by both pages.
const ITEM = "ferrox.theme";

export function currentTheme() {
  const t = localStorage.getItem(ITEM);
  if (t === "dark" || t === "light") return t;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

export function applyTheme(theme = currentTheme()) {
  document.documentElement.dataset.theme = theme;
  // highlight.js's two style sheets: only the theme's applies (media, not `disabled`, which a
  // sheet still loading forgets).
  for (const link of document.querySelectorAll("link[data-hljs]")) link.media = link.dataset.hljs === theme ? "all" : "not all";
}

export function toggleTheme() {
  const next = currentTheme() === "dark" ? "light" : "dark";
  localStorage.setItem(ITEM, next);
  applyTheme(next);
  return next;
}

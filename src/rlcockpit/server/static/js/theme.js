// Light and dark theme. Without a choice the page follows the browser (prefers-color-scheme, live);
// the header's toggle picks one and remembers it in localStorage. The effective theme is set as
// <html data-theme="light|dark">, which css/app.css styles; charts read their colours from it.
const KEY = "rlcockpit.theme";
const listeners = new Set();
const media = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;

// "light", "dark", or "auto" (follow the browser)
export function choice() {
  const v = localStorage.getItem(KEY);
  return v === "dark" || v === "light" ? v : "auto";
}

export function theme() {
  const c = choice();
  if (c !== "auto") return c;
  return media && media.matches ? "dark" : "light";
}

function apply() {
  document.documentElement.dataset.theme = theme();
  listeners.forEach((fn) => fn(theme()));
}

export function setTheme(next) {
  if (!["light", "dark", "auto"].includes(next)) throw new Error(`unknown theme ${next}; use "light", "dark" or "auto"`);
  if (next === "auto") localStorage.removeItem(KEY);
  else localStorage.setItem(KEY, next);
  apply();
}

export function toggleTheme() {
  setTheme(theme() === "dark" ? "light" : "dark");
}

export function onThemeChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

if (media) media.addEventListener("change", () => choice() === "auto" && apply());
document.documentElement.dataset.theme = theme();

// Labels in English and Chinese. Every visible label goes through t(key); the language toggle in the
// header switches them all and is remembered in localStorage. Extensions add their own labels with
// extend({en: {...}, zh: {...}}).
import { EN, ZH } from "./i18n_dict.js";

const STORAGE_KEY = "rlcockpit.lang";
const DICTS = { en: { ...EN }, zh: { ...ZH } };
const listeners = new Set();

function initialLang() {
  const saved = localStorage.getItem(STORAGE_KEY);
  if (saved === "en" || saved === "zh") return saved;
  return (navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
}

let current = initialLang();

export function lang() {
  return current;
}

export function setLang(next) {
  if (next !== "en" && next !== "zh") throw new Error(`unknown language ${next}; use "en" or "zh"`);
  current = next;
  localStorage.setItem(STORAGE_KEY, next);
  document.documentElement.lang = next === "zh" ? "zh-CN" : "en";
  listeners.forEach((fn) => fn(next));
}

export function onLangChange(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

// t("chart.reward") or t("line.p90", {n: 10}) with {name} placeholders. A missing key shows the key
// itself (visible in the UI and caught by the dictionary test), never an empty label.
export function t(key, vars) {
  const text = DICTS[current][key] ?? DICTS.en[key] ?? key;
  if (!vars) return text;
  return text.replace(/\{(\w+)\}/g, (m, name) => (name in vars ? String(vars[name]) : m));
}

// The text of `field` in the current language, from either layout: {field: {en, zh}} or
// {field_en, field_zh} / a bare `field` (English by convention, e.g. an incident's summary).
export function pick(obj, field) {
  if (!obj) return "";
  const v = obj[field];
  const other = current === "zh" ? "en" : "zh";
  if (v && typeof v === "object" && !Array.isArray(v) && (current in v || other in v)) return v[current] ?? v[other] ?? "";
  const order = current === "zh" ? [`${field}_zh`, field, `${field}_en`] : [`${field}_en`, field, `${field}_zh`];
  for (const k of order) if (obj[k] !== undefined && obj[k] !== null && obj[k] !== "") return obj[k];
  return "";
}

// A value's label: t(`${kind}.${value}`) when the dictionary has it (category.math, flag.truncated,
// component.correctness), else the value itself (a run's own category or flag stays as logged).
export function label(kind, value) {
  const key = `${kind}.${value}`;
  const text = DICTS[current][key] ?? DICTS.en[key];
  return text === undefined ? String(value) : text;
}

export function extend(dicts) {
  for (const code of ["en", "zh"]) Object.assign(DICTS[code], dicts[code] || {});
}

export function keys(code) {
  return Object.keys(DICTS[code]);
}

document.documentElement.lang = current === "zh" ? "zh-CN" : "en";

// Keyboard shortcuts (docs/ui.md): single keys outside text fields.
//   d s a  dashboard / samples / alerts of the open run     l r  library / runs
//   /      focus the page's search or text filter            z    reset the dashboard zoom
import { globalHref, navigate, runHref } from "./router.js";

const RUN_VIEWS = { d: "dashboard", s: "samples", a: "alerts" };
const GLOBAL_VIEWS = { l: "library", r: "runs" };

function typing(target) {
  return target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

export function installShortcuts(getRunId) {
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e.target)) return;
    const runId = getRunId();
    if (RUN_VIEWS[e.key] && runId) {
      e.preventDefault(); // else the key is typed into the field the new page focuses (the library search)
      navigate(runHref(runId, RUN_VIEWS[e.key]));
    } else if (GLOBAL_VIEWS[e.key]) {
      e.preventDefault();
      navigate(globalHref(GLOBAL_VIEWS[e.key]));
    } else if (e.key === "/") {
      const field = document.querySelector("#library-q, #f-text");
      if (!field) return;
      e.preventDefault();
      field.focus();
    } else if (e.key === "z" && window.rlcockpit.dashboard) window.rlcockpit.dashboard.resetZoom();
  });
}

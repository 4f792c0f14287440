// The first page's API calls, started while the ES modules are still loading (issue 29,
// docs/ui.md "Loading"). A classic script, loaded async by index.html before the modules: on a
// run's route it asks for the run list and the run's summary, and api.js takes these responses
// (once each, within BOOT_TTL_MS) instead of asking again. Same headers as api.js's requests.
(() => {
  const BOOT_TTL_MS = 15000;
  const hash = location.hash || "";
  if (hash.startsWith("#/signin")) return; // the sign-in link changes the token first
  let token = null;
  try {
    token = localStorage.getItem("rlcockpit.token");
  } catch {
    return;
  }
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const started = Date.now();
  const calls = {};
  const start = (path) => {
    calls[path] = fetch(`/api${path}`, { headers }).catch(() => null);
  };
  start("/runs");
  const run = /^#\/run\/([^/?]+)/.exec(hash);
  try {
    if (run) start(`/runs/${encodeURIComponent(decodeURIComponent(run[1]))}`); // as api.js spells it
  } catch {
    // a malformed %-escape: the app shows the error
  }
  // api.js: a started call for `path` (a Promise of a Response, or null when it failed), or undefined
  window.__rlcockpitBoot = {
    take(path) {
      const call = calls[path];
      delete calls[path];
      return Date.now() - started < BOOT_TTL_MS ? call : undefined;
    },
  };
})();

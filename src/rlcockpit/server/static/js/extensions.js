// Extension modules loaded at start-up, before the first route is shown. Each one registers its
// views (registerView) and labels (i18n extend) on import; see docs/ui.md "Extension API".
// Paths are relative to this file, e.g. "./views/tickets.js".
export const EXTENSIONS = ["./views/tickets.js", "./views/audit.js", "./views/liveparams.js", "./views/review.js"];

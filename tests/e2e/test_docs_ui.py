"""docs/ui.md stays complete: every registered page has its route, every keyboard shortcut and
every screenshot it shows exist, and the extension API names it documents are exported."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JS = ROOT / "src" / "rlcockpit" / "server" / "static" / "js"
DOC = (ROOT / "docs" / "ui.md").read_text(encoding="utf-8")


def registered_views() -> dict[str, str]:
    """The built-in pages (imported by app.js); extensions document their own (docs/control.md)."""
    views = {}
    builtin = re.findall(r'^import "\./(views/[a-z_]+\.js)";', (JS / "app.js").read_text(encoding="utf-8"), re.M)
    for path in (JS / p for p in builtin):
        text = path.read_text(encoding="utf-8")
        for name, body in re.findall(r'registerView\("([a-z_-]+)",\s*\{([^}]*)', text):
            views[name] = "global" if 'scope: "global"' in body else "run"
    return views


def test_every_page_has_its_route_in_the_docs():
    views = registered_views()
    assert {"dashboard", "samples", "alerts", "snapshot", "library", "runs", "compare"} <= set(views)
    for name, scope in views.items():
        route = f"#/run/<run>/{name}" if scope == "run" else f"#/{name}"
        assert route in DOC, f"docs/ui.md has no route for the {name} page ({route})"


def test_every_shortcut_and_screenshot_is_documented():
    text = (JS / "keys.js").read_text(encoding="utf-8")
    keys = re.findall(r'(\w): "', "".join(re.findall(r"_VIEWS = \{([^}]*)\}", text)))
    assert set(keys) == {"d", "s", "a", "l", "r"}
    table = DOC.split("## Mouse and keyboard")[1].split("## ")[0]
    for key in [*keys, "/", "z"]:
        assert f"`{key}`" in table, f"shortcut {key} is not in docs/ui.md"
    for image in re.findall(r"\]\((img/[^)]+)\)", DOC):
        assert (ROOT / "docs" / image).is_file(), image


def test_documented_extension_api_is_exported():
    exports = {
        "router.js": ["registerView", "navigate"],
        "charts.js": ["annotate", "clearAnnotations", "charts"],
        "i18n.js": ["extend", "t", "pick"],
        "api.js": ["get", "post", "request", "setToken", "ApiError"],
        "ui.js": ["h", "loading", "empty", "errorState", "withStates", "severityBadge", "fmt"],
    }
    for module, names in exports.items():
        text = (JS / module).read_text(encoding="utf-8")
        for name in names:
            assert re.search(rf"export (async )?(function|const|class) {name}\b", text), f"{module}: {name}"
            assert name in DOC, f"docs/ui.md does not mention {name}"
    assert "export const EXTENSIONS" in (JS / "extensions.js").read_text(encoding="utf-8")

"""server/ui_assets.py (issue 29): the module list of index.html's preloads is read from the files
and follows them; asset versions; gzip once per file version, and not for small files or clients
that do not accept it. The browser-side view of the same is tests/e2e/test_load_speed.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

from fastapi.testclient import TestClient

from rlcockpit.server.app import BUNDLED_STATIC, create_app
from rlcockpit.server.settings import ServerSettings
from rlcockpit.server.ui_assets import IndexPage, module_graph
from server_testkit import LOCAL
from storekit import build_store

INDEX = """<head><link rel="stylesheet" href="{{v:css/app.css}}"><script src="{{v:vendor/lib.js}}"></script>
<script type="module" src="/static/js/app.js"></script>
<!-- modulepreload -->
<script src="{{v:vendor/missing.js}}"></script></head>"""


def ui_dir(root: Path) -> Path:
    files = {
        "index.html": INDEX,
        "css/app.css": "body { color: red; }\n" * 100,
        "vendor/lib.js": "var lib = 1;\n" * 200,
        "js/app.js": 'import { a } from "./a.js";\nimport "./views/v.js";\nimport { EXT } from "./ext.js";\n'
                     'for (const p of EXT) await import(p);\n',
        "js/a.js": 'import {\n  b,\n} from "./b.js";\nexport const a = b;\n',
        "js/b.js": 'export const b = 1; // the file "./missing.js" does not exist\n',
        "js/ext.js": 'export const EXT = ["./views/ext_view.js"];\n',
        "js/views/v.js": 'import { a } from "../a.js";\nexport const lazy = () => import("./lazy.js");\n',
        "js/views/lazy.js": "export const x = 1;\n",
        "js/views/ext_view.js": 'import "../../../outside.js";\n',
        "js/orphan.js": "export const nobody = 1;\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root.parent / "outside.js").write_text("// outside the static dir: never served, never listed\n")
    return root


def test_the_graph_follows_every_kind_of_reference_and_only_existing_files_inside(tmp_path):
    root = ui_dir(tmp_path / "static")
    assert module_graph(root) == ["js/app.js", "js/a.js", "js/views/v.js", "js/ext.js", "js/b.js",
                                  "js/views/lazy.js", "js/views/ext_view.js"]


def test_the_bundled_ui_preloads_every_module_it_ships_but_the_classic_boot_script():
    graph = set(module_graph(BUNDLED_STATIC))
    shipped = {p.relative_to(BUNDLED_STATIC).as_posix() for p in (BUNDLED_STATIC / "js").rglob("*.js")}
    assert "js/views/dashboard.js" in graph and "js/views/tickets.js" in graph  # an extension
    assert graph <= shipped and "js/boot.js" not in graph


def test_index_page_fills_in_preloads_and_versions_and_follows_edits(tmp_path):
    root = ui_dir(tmp_path / "static")
    page = IndexPage(root)
    html = page.html()
    links = re.findall(r'<link rel="modulepreload" href="([^"]+)">', html)
    assert links == [f"/static/{m}" for m in module_graph(root)[1:]]  # app.js has its own tag
    assert re.search(r'href="/static/css/app.css\?v=\w{10}"', html)
    assert 'src="/static/vendor/missing.js"' in html  # no file, no version (and no error)
    old_version = re.search(r"lib.js\?v=(\w+)", html)[1]
    (root / "js/b.js").write_text('import "./c.js";\n')
    (root / "js/c.js").write_text("export const c = 1;\n")
    (root / "vendor/lib.js").write_text("var lib = 2;\n" * 300)
    os.utime(root / "js/b.js", ns=(1, 1))  # a new mtime whatever the file system's resolution
    html = page.html()
    assert '<link rel="modulepreload" href="/static/js/c.js">' in html
    assert re.search(r"lib.js\?v=(\w+)", html)[1] != old_version


def test_assets_are_gzipped_once_cached_by_version_and_revalidated(tmp_path):
    root = ui_dir(tmp_path / "static")
    uri = build_store(tmp_path)
    with TestClient(create_app(ServerSettings(store=uri, static_dir=str(root))), base_url=LOCAL) as c:
        index = c.get("/")
        assert index.headers["cache-control"] == "no-cache" and "modulepreload" in index.text
        css_url = re.search(r'href="(/static/css/app.css\?v=\w+)"', index.text)[1]
        css = c.get(css_url, headers={"Accept-Encoding": "gzip"})
        assert css.headers["content-encoding"] == "gzip" and css.headers["vary"] == "Accept-Encoding"
        assert css.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert css.text == (root / "css/app.css").read_text()
        etag = css.headers["etag"]
        assert etag.endswith('-gz"')
        again = c.get("/static/css/app.css", headers={"Accept-Encoding": "gzip", "If-None-Match": etag})
        assert again.status_code == 304 and again.headers["cache-control"] == "no-cache"
        plain = c.get("/static/css/app.css", headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers and plain.headers["etag"] != etag
        small = c.get("/static/js/b.js", headers={"Accept-Encoding": "gzip"})  # under 1 KiB
        assert "content-encoding" not in small.headers and small.headers["cache-control"] == "no-cache"
        big = c.get("/api/runs/run-a/series?names=*", headers={"Accept-Encoding": "gzip"})
        assert big.status_code == 200 and big.headers.get("content-encoding") == "gzip"

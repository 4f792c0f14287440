"""Regenerate the screenshots of docs/ui.md: ``.venv/bin/python tests/e2e/docs_screenshots.py``.

Builds the e2e fixture store (storekit), serves it, and shoots each page in Debian's chromium.
PNGs are reduced to 256 colours (when Pillow is installed) to keep the repository small."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))
sys.path.insert(0, str(Path(__file__).parent))  # first: this directory's conftest

import storekit  # noqa: E402

from conftest import CHROMIUM_ARGS, LiveServer, chromium_path  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "docs" / "img"


def shrink(path: Path) -> None:
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def shoot(page, name: str, *, selector: str | None = None) -> None:
    path = OUT / f"{name}.png"
    if selector:
        page.locator(selector).screenshot(path=str(path))
    else:
        page.screenshot(path=str(path), full_page=True)
    shrink(path)
    print(f"{path.relative_to(OUT.parents[1])}: {path.stat().st_size // 1024} KiB")


def main() -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        uri, run_id = storekit.build(Path(tmp) / "runs.db", steps=40, incident_at=33)
        server = LiveServer(uri)
        try:
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1400, "height": 900}, locale="en-US")
                run_pages(page, server.url, run_id)
                browser.close()
        finally:
            server.stop()


def run_pages(page, url: str, run_id: str) -> None:
    page.goto(f"{url}/#/run/{run_id}/dashboard")
    page.wait_for_function("() => document.getElementById('chart-reward')?.dataset.points === '40'")
    page.wait_for_timeout(800)
    shoot(page, "dashboard_en")
    page.goto(f"{url}/#/run/{run_id}/samples/40/1?step_min=38")
    page.locator("#token-kl .tok").nth(3).hover()
    page.wait_for_timeout(300)
    shoot(page, "sample_token_kl")
    page.goto(f"{url}/#/run/{run_id}/alerts")
    page.locator(".incident").wait_for()
    page.locator(".incident details summary").click()
    page.wait_for_timeout(500)
    shoot(page, "alerts")
    page.goto(f"{url}/#/run/{run_id}/snapshot/1")
    page.locator("#snap-head-cov").wait_for()
    page.wait_for_timeout(500)
    shoot(page, "snapshot")
    page.goto(f"{url}/#/library?q=KL%20持续上升")
    page.locator("#library-hits").wait_for()
    shoot(page, "library")
    page.goto(f"{url}/#/run/{run_id}/dashboard")
    page.click("#lang-toggle")
    page.wait_for_function("() => document.getElementById('chart-reward')?.dataset.points === '40'")
    page.wait_for_timeout(800)
    shoot(page, "dashboard_zh")
    page.click("#lang-toggle")
    extra_pages(page, url, run_id)


def extra_pages(page, url: str, run_id: str) -> None:
    """Issue 16: the metric search with a section open, the runs table, and the dark theme."""
    page.goto(f"{url}/#/run/{run_id}/dashboard?q=kl")
    page.wait_for_function("() => document.querySelector('#metric-sections [data-metric=\"kl/mean\"] .chart')?.dataset.points === '40'")
    page.wait_for_timeout(500)
    shoot(page, "metrics_search", selector="#metrics-area")
    page.goto(f"{url}/#/runs")
    page.locator("#runs-list tbody tr").first.wait_for()
    page.click("#runs-columns summary")
    page.check("#runs-columns input[value='algo']")
    page.click("#runs-columns summary")
    shoot(page, "runs_table")
    page.goto(f"{url}/#/run/{run_id}/dashboard")
    page.evaluate("() => window.rlcockpit.theme.setTheme('dark')")
    page.wait_for_function("() => document.getElementById('chart-reward')?.dataset.points === '40'")
    page.wait_for_timeout(800)
    shoot(page, "dashboard_dark")
    page.click("#lang-toggle")
    zh_dark_pages(page, url, run_id)
    page.click("#lang-toggle")
    page.evaluate("() => window.rlcockpit.theme.setTheme('auto')")


def zh_dark_pages(page, url: str, run_id: str) -> None:
    """Every other page once more in 中文 and the dark theme (the light English ones are above)."""
    shots = [("alerts", "#/run/{run}/alerts", ".incident"),
             ("samples", "#/run/{run}/samples/40/1?step_min=38", "#token-kl .tok"),
             ("snapshot", "#/run/{run}/snapshot/1", "#snap-head-cov"),
             ("cost", "#/run/{run}/cost", "#cost-totals, #cost-empty"),
             ("library", "#/library/kl_explosion", "#library-sources"),
             ("runs", "#/runs", "#runs-list tbody tr")]
    for name, route, ready in shots:
        page.goto(f"{url}/{route.format(run=run_id)}")
        page.locator(ready).first.wait_for()
        page.wait_for_timeout(500)
        shoot(page, f"{name}_zh_dark")


if __name__ == "__main__":
    main()

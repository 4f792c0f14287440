"""Browser-test fixtures: a real uvicorn server (server_testkit: thread, free port) over a real
SQLite store in tmp_path (storekit), Debian's chromium driven by Python Playwright, a page that
fails the test on any console error, and a screenshot of every test under test-artifacts/.

Playwright's own browser download does not work here; we launch the system chromium
(``make test`` installs it when missing)."""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from server_testkit import ServerThread, serve_store

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        raise RuntimeError("chromium is not installed; run `make test` (it installs Debian's chromium) "
                           "or `apt-get install chromium`")
    return path


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def serve() -> Iterator[Any]:
    """serve(uri, access=None) -> a started ServerThread (server_testkit) over the store at ``uri``;
    every server started here is stopped after the test."""
    servers: list[ServerThread] = []

    def start(uri: str, access: Any = None) -> ServerThread:
        from rlcockpit.store import open_store

        # opened (and created if need be) here, as a user's `rlcockpit serve` would: a trainer started
        # in a thread just before may not have created its store file yet
        servers.append(serve_store(uri, open_store(uri), access=access, keepalive_s=5.0))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


PROBES: dict[int, PageProbe] = {}


class PageProbe:
    """A page plus what went wrong in it (console errors, uncaught exceptions)."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        self.allowed: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(re.search(a, e) for a in self.allowed)]


def allow_console_error(page: Any, pattern: str) -> None:
    """Accept console errors matching ``pattern`` in this page (e.g. the 404 a test asks for)."""
    PROBES[id(page)].allowed.append(pattern)


def _open_page(browser: Any, request: Any, locale: str) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, locale=locale)
    page = context.new_page()
    page.set_default_timeout(30000)  # generous: the suite shares 2 cores with the rest of make test
    probe = PageProbe(page)
    PROBES[id(page)] = probe
    yield page
    PROBES.pop(id(page), None)
    ARTIFACTS.mkdir(exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
    try:
        page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    finally:
        context.close()
    if probe.unexpected():
        pytest.fail("errors in the browser console:\n" + "\n".join(probe.unexpected()))


@pytest.fixture
def page(browser, request) -> Iterator[Any]:
    """An English page; the test fails if anything is logged as a console error."""
    yield from _open_page(browser, request, "en-US")


@pytest.fixture
def zh_page(browser, request) -> Iterator[Any]:
    """A page whose browser language is Chinese (the UI's default follows navigator.language)."""
    yield from _open_page(browser, request, "zh-CN")


@pytest.fixture(scope="module")
def fixture_store(tmp_path_factory) -> tuple[str, str]:
    """A finished 30-step run with histograms, samples (token arrays) and an incident + snapshot."""
    import storekit

    return storekit.build(tmp_path_factory.mktemp("store") / "runs.db")


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.1, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")

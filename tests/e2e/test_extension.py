"""The extension API the control plane builds on: registerView adds a page with its tab and
labels (both languages), mount gets the run context, the cleanup runs when the page is left."""

from __future__ import annotations

REGISTER = """async () => {
  const { registerView } = await import("/static/js/router.js");
  const { extend } = await import("/static/js/i18n.js");
  extend({ en: { "tab.hello": "Hello" }, zh: { "tab.hello": "你好" } });
  registerView("hello", { scope: "run", labelKey: "tab.hello", order: 40, mount(root, ctx) {
    root.textContent = `hello ${ctx.runId} ${ctx.args.join("/")} ${ctx.query.get("x")} ${ctx.summary.last_step}`;
    return () => { window.__helloLeft = (window.__helloLeft || 0) + 1; };
  } });
}"""


def test_registered_view_gets_a_tab_context_and_cleanup(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    page.locator("#chart-reward").wait_for()
    page.evaluate(REGISTER)
    tab = page.locator(".tab[data-view=hello]")
    tab.wait_for()
    assert tab.inner_text() == "Hello"
    views = page.locator("#tabs .tab").evaluate_all("els => els.map((e) => e.dataset.view)")
    assert views[:4] == ["dashboard", "samples", "alerts", "hello"]
    page.goto(f"{server.url}/#/run/{run_id}/hello/a/b?x=7")
    page.locator("#view:has-text('hello')").wait_for()
    assert page.locator("#view").inner_text() == f"hello {run_id} a/b 7 30"
    page.click(".tab[data-view=samples]")
    page.wait_for_function("() => window.__helloLeft === 1")
    page.click("#lang-toggle")
    page.locator(".tab[data-view=hello]:has-text('你好')").wait_for()

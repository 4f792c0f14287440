"""中文 / English: every label key used in the UI exists in both dictionaries; the header toggle
switches every dashboard label (chart titles, legends, tabs, toolbar, header), is remembered, and
the first visit follows the browser language."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import wait_for
from rlcockpit.records import RUN_STATUSES, SEVERITIES

STATIC = Path(__file__).resolve().parents[2] / "src" / "rlcockpit" / "server" / "static" / "js"
KEY = re.compile(r'"([a-z_]+\.[a-z_0-9.]+)"\s*:')


def dictionaries() -> dict[str, dict[str, str]]:
    text = (STATIC / "i18n_dict.js").read_text(encoding="utf-8")
    en_part, zh_part = text.split("export const ZH")
    pair = re.compile(r'"([a-z_]+\.[a-z_0-9.]+)"\s*:\s*"((?:[^"\\]|\\.)*)"')
    return {"en": dict(pair.findall(en_part)), "zh": dict(pair.findall(zh_part))}


def keys_used_in_code(namespaces: set[str]) -> set[str]:
    used: set[str] = set()
    for path in STATIC.rglob("*.js"):
        if path.name == "i18n_dict.js":
            continue
        for literal in re.findall(r'"([a-z_]+\.[a-z_0-9.]+)"', path.read_text(encoding="utf-8")):
            if literal.split(".")[0] in namespaces and not literal.endswith((".js", ".json")):
                used.add(literal)
    return used


def test_every_label_used_in_the_code_exists_in_both_languages():
    d = dictionaries()
    assert len(d["en"]) > 150 and set(d["en"]) == set(d["zh"])
    namespaces = {k.split(".")[0] for k in d["en"]}
    missing = sorted(k for k in keys_used_in_code(namespaces) if k not in d["en"])
    assert not missing, f"labels used in js/ but missing from i18n_dict.js: {missing}"
    # keys built at run time from values the API sends
    dynamic = [f"status.{s}" for s in RUN_STATUSES] + [f"sev.{s}" for s in SEVERITIES]
    assert not [k for k in dynamic if k not in d["en"]]
    untranslated = [k for k in d["en"] if d["zh"][k] == d["en"][k] and re.search(r"[a-z]{3}", d["en"][k])]
    assert set(untranslated) <= {"token.token"}, untranslated


DASHBOARD_KEYS = [k for k in dictionaries()["en"] if k.split(".")[0] in {"tab", "dash", "chart", "line"}] + [
    "header.step", "header.phase", "header.step_rate", "status.finished", "axis.step"]

CHART_TEXT = """() => [...document.querySelectorAll('.chart')].map((el) => {
    const o = echarts.getInstanceByDom(el).getOption();
    return [o.title[0].text, ...(o.series || []).map((s) => s.name || '')];
  }).flat()"""


def visible_texts(page) -> str:
    parts = [page.locator(sel).inner_text() for sel in ("#tabs", ".toolbar", "#run-header", "#latest-samples .panel-title")]
    return "\n".join(parts + page.evaluate(CHART_TEXT))


def test_language_toggle_switches_every_dashboard_label(fixture_store, serve, page):
    uri, run_id = fixture_store
    server = serve(uri)
    d = dictionaries()
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard")
    titles = page.evaluate("() => [...document.querySelectorAll('.chart')].map((el) => echarts.getInstanceByDom(el).getOption().title[0].text)")
    assert titles[:4] == [d["en"][k] for k in ("chart.reward", "chart.kl", "chart.entropy", "chart.loss")]
    assert page.locator("#lang-toggle").inner_text() == "中文"
    page.click("#lang-toggle")
    wait_for(lambda: page.locator(".tab.active").inner_text() == "仪表盘", what="Chinese tabs")
    wait_for(lambda: page.locator("#chart-reward").get_attribute("data-points") == "30", what="the dashboard in Chinese")
    page.locator("#latest-samples .panel-title").wait_for()
    page.locator("#run-phase:has-text('阶段')").wait_for()
    texts = visible_texts(page)
    for key in DASHBOARD_KEYS:
        en, zh = d["en"][key], d["zh"][key]
        if en in zh:  # an acronym kept inside the Chinese label (KL, EMA, EOS)
            continue
        en_pattern = re.escape(en).replace(r"\{n\}", r"\(?\d+\)?")
        assert not re.search(rf"(?<![A-Za-z]){en_pattern}(?![A-Za-z])", texts), f"English label left in zh mode: {key} = {en!r}"
    zh_titles = page.evaluate("() => [...document.querySelectorAll('.chart')].map((el) => echarts.getInstanceByDom(el).getOption().title[0].text)")
    assert zh_titles == [d["zh"][f"chart.{c}"] for c in ("reward", "kl", "entropy", "loss", "length", "clip", "truncation",
                                                        "grad", "category", "reward_hist", "length_hist")]
    assert "移动平均（10）" in texts and "预警线（1.5× 目标）" not in texts  # legend vs mark-line label
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    page.reload()
    page.locator(".tab.active:has-text('仪表盘')").wait_for()
    page.click("#lang-toggle")
    page.locator(".tab.active:has-text('Dashboard')").wait_for()
    assert page.evaluate("localStorage.getItem('rlcockpit.lang')") == "en"


def test_first_visit_follows_the_browser_language(fixture_store, serve, zh_page):
    uri, run_id = fixture_store
    server = serve(uri)
    zh_page.goto(f"{server.url}/#/run/{run_id}/alerts")
    zh_page.locator(".incident").wait_for()
    assert zh_page.locator(".tab.active").inner_text() == "告警"
    summary = zh_page.locator(".incident-summary").inner_text()
    assert "KL 持续高于目标的 1.5 倍" in summary or "比" in summary or "：" in summary
    assert zh_page.locator("#lang-toggle").inner_text() == "English"

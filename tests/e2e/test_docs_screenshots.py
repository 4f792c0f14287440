"""The screenshots of docs/ui.md (issue 16): every page of the cockpit in English and 中文, in the
light and the dark theme, and listed in docs/ui.md between the generated-screenshots markers (a
drift check fails when that list is stale; ``.venv/bin/python tests/e2e/test_docs_screenshots.py``
rewrites it).

The pictures go to the test's temporary directory: a test run never rewrites tracked files. With
``RLCOCKPIT_UPDATE_SCREENSHOTS=1`` in the environment they are regenerated into docs/img/ instead::

    RLCOCKPIT_UPDATE_SCREENSHOTS=1 .venv/bin/python -m pytest tests/e2e/test_docs_screenshots.py

One browser context per language × theme (the language from the browser's locale, the theme from
its ``prefers-color-scheme``), 1440 × 900, PNGs reduced to 256 colours. When regenerating, a new
screenshot replaces the one in docs/img/ only when its size changed or more than ``CHANGED_SHARE`` of its pixels did,
so the run ids, dates and durations that differ on every run do not churn the repository."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMG = ROOT / "docs" / "img"
UPDATE_ENV = "RLCOCKPIT_UPDATE_SCREENSHOTS"  # "1": write the pictures into docs/img/ (tracked files)
DOC = ROOT / "docs" / "ui.md"
DOC_BEGIN = "<!-- BEGIN GENERATED SCREENSHOTS (tests/e2e/test_docs_screenshots.py) -->"
DOC_END = "<!-- END GENERATED SCREENSHOTS -->"
VIEWPORT = {"width": 1440, "height": 900}
CHANGED_SHARE = 0.005
STEPS = 40
RUN_IDS = ("20261201-120000-docs01", "20261201-130000-docs02")
# three seeds of two recipes (optim.lr 1e-5 vs 3e-5) for the many-runs pictures (issue 29)
SEED_IDS = tuple(f"20261201-14{i:02d}00-seed{recipe}{seed}" for i, (recipe, seed) in
                 enumerate((r, s) for r in "AB" for s in range(3)))

# (language code, browser locale, label), (theme, prefers-color-scheme)
LANGS = (("en", "en-US", "English"), ("zh", "zh-CN", "中文"))
THEMES = ("light", "dark")


@dataclass(frozen=True)
class Shot:
    name: str
    title: str
    route: str  # {run}, {run_b}: the fixture's two runs
    ready: str  # a CSS selector, or a JS predicate ("() => ...")
    selector: str | None = None  # shoot this element only (else the full page)
    hover: str | None = None  # hover this element first (a tooltip in the picture)
    click: str | None = None
    volatile: str | None = None  # elements whose content differs on every run (times, hashes): the
    # picture shows them, the comparison with the committed picture leaves them out


SHOTS = (
    Shot("dashboard", "dashboard", "#/run/{run}/dashboard",
         f"() => document.getElementById('chart-reward')?.dataset.points === '{STEPS}' && "
         f"document.getElementById('chart-reward-hist')?.dataset.points === '{STEPS}'"),
    Shot("metrics", "all metrics, the search with the kl section open", "#/run/{run}/dashboard?q=kl",
         f"() => document.querySelector('#metric-sections [data-metric=\"kl/mean\"] .chart')?.dataset.points === '{STEPS}'",
         selector="#metrics-area"),
    Shot("samples", "sample explorer", "#/run/{run}/samples?step_min=38", "#sample-list tbody tr"),
    Shot("sample", "one sample with its token-level KL", "#/run/{run}/samples/40/1?step_min=38", "#token-kl .tok",
         hover="#token-kl .tok >> nth=3"),
    Shot("alerts", "alerts: an incident", "#/run/{run}/alerts", ".incident", click=".incident details summary"),
    Shot("snapshot", "diagnostic snapshot", "#/run/{run}/snapshot/1", "#snap-head-cov"),
    Shot("cost", "cost ledger", "#/run/{run}/cost", "#cost-totals, #cost-empty"),
    Shot("library", "failure-library search", "#/library?q=KL%20%E6%8C%81%E7%BB%AD%E4%B8%8A%E5%8D%87", "#library-hits"),
    Shot("library_entry", "a failure-library entry", "#/library/kl_explosion", "#library-sources"),
    Shot("runs", "runs table with a config column", "#/runs?cols=algo", "#runs-list tbody tr"),
    Shot("compare", "comparison of two runs", "#/compare?runs={run},{run_b}",
         "() => { const cs = [...document.querySelectorAll('#compare-charts .chart')]; "
         "return cs.length >= 4 && cs.every((c) => Number(c.dataset.points) > 0); }"),
    Shot("groups", "three seeds of two recipes on the dashboard, grouped by optim.lr with mean ± std bands",
         "#/run/{seed0}/dashboard?runs={seeds}&group=config:optim.lr",
         "() => { const c = window.rlcockpit.dashboard && window.rlcockpit.dashboard.charts.reward; "
         "return !!c && c.chart.getOption().series.filter((s) => s.type === 'custom').length === 2; }"),
    Shot("sweep", "runs table with summary columns, sorted, and the sweep view (reward vs optim.lr)",
         "#/runs?filter=seed&sum=last:reward/mean,at_best:reward/mean&sort=sum:last:reward/mean"
         "&sweep_x=optim.lr&sweep_color=config:optim.lr", "#sweep-chart[data-points='6']"),
)

# The control plane's pages (docs/control.md), on a server with users (tests/control_testkit.py's
# world, signed in as the approver "alex", one ticket requested by the operator "otto").
CONTROL_SHOTS = (
    Shot("tickets", "tickets of a run (control plane)", "#/run/run-live/tickets", "#ctl-tickets tr[data-ticket]"),
    Shot("liveparams", "live parameters on the dashboard (control plane)", "#/run/run-live/dashboard",
         "#liveparams-panel .ctl-live-value", selector="#liveparams-panel"),
    Shot("review", "review queue of the reward model's flagged samples (control plane)", "#/run/run-live/review",
         ".review-item"),
    Shot("audit", "audit log (control plane)", "#/audit", "#ctl-audit tr[data-seq]",
         volatile="#ctl-audit td:nth-child(2), #ctl-audit td.preview"),
)


def image_name(shot: Shot, lang: str, theme: str) -> str:
    return f"{shot.name}_{lang}_{theme}.png"


def doc_section() -> str:
    """The markdown between the markers: a row per page, a link per language × theme."""
    head = " | ".join(f"{label}, {theme}" for _, _, label in LANGS for theme in THEMES)
    lines = [f"| page | {head} |", "| --- |" + " --- |" * (len(LANGS) * len(THEMES))]
    for shot in (*SHOTS, *CONTROL_SHOTS):
        cells = " | ".join(f"[{lang} · {theme}](img/{image_name(shot, lang, theme)})" for lang, _, _ in LANGS for theme in THEMES)
        lines.append(f"| {shot.title} | {cells} |")
    return "\n".join(lines) + "\n"


def render_doc(text: str) -> str:
    start, end = text.find(DOC_BEGIN), text.find(DOC_END)
    if start < 0 or end < start:
        raise ValueError(f"docs/ui.md lacks the markers {DOC_BEGIN!r} ... {DOC_END!r}")
    return text[: start + len(DOC_BEGIN)] + "\n" + doc_section() + text[end:]


def test_docs_ui_lists_every_screenshot():
    """Drift check: docs/ui.md's generated section is this file's list (rewrite it by running this file)."""
    text = DOC.read_text(encoding="utf-8")
    assert render_doc(text) == text, ("docs/ui.md's screenshot list is stale: run "
                                      "`.venv/bin/python tests/e2e/test_docs_screenshots.py`")


# ---------------------------------------------------------------- the screenshots

def quantize(png: bytes) -> Any:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)


def changed(new: Any, path: Path, ignore: list[tuple[int, int, int, int]] = ()) -> bool:
    """Whether ``new`` differs from the image at ``path`` (size, or more than CHANGED_SHARE of pixels
    outside the ``ignore`` boxes)."""
    from PIL import Image, ImageChops, ImageDraw

    if not path.is_file():
        return True
    with Image.open(path) as old:
        old_rgb, new_rgb = old.convert("RGB"), new.convert("RGB")
    if old_rgb.size != new_rgb.size:
        return True
    for im in (old_rgb, new_rgb):
        for box in ignore:
            ImageDraw.Draw(im).rectangle(box, fill=(0, 0, 0))
    diff = ImageChops.difference(old_rgb, new_rgb).convert("L").point(lambda v: 255 if v > 16 else 0)
    share = diff.histogram()[255] / (new_rgb.size[0] * new_rgb.size[1])
    return share > CHANGED_SHARE


@pytest.fixture(scope="module")
def docs_store(tmp_path_factory) -> tuple[str, str, str]:
    """The e2e fixture run (40 steps, an incident at 33) and a second run to compare it with."""
    import random

    import rlcockpit
    import storekit

    uri = f"sqlite:///{tmp_path_factory.mktemp('docs') / 'runs.db'}"
    # storekit.build's run under a fixed id: the pictures do not change with the run id
    rng = random.Random(0)
    config = {"algo": "ppo", "train": {"steps": STEPS}, "rollout": {"batch_size": 32, "n_samples": 1},
              "cost": {"price_per_hour": 2.5}}
    run = rlcockpit.init(project="e2e", name="fixture-run", store=uri, config=config, run_id=RUN_IDS[0])
    run.event(0, "model_size", {"actor_params": 4_300_000, "critic_params": 4_300_000,
                                "ref_params": 4_300_000, "device": "cpu", "dtype": "fp32"})
    for step in range(1, STEPS + 1):
        # what the cost view reads (our trainer logs these every step)
        run.log(step, {"cost/tokens_generated": 32 * 13.5, "cost/tokens_trained": 32 * 13.5,
                       "cost/prompt_tokens": 32 * 18.0, "time/rollout_s": 0.8, "time/score_s": 0.25,
                       "time/update_s": 0.7, "time/diagnose_s": 0.02})
        storekit.log_step(run, step, rng)
        run.phase(step, "update", "finished", duration_s=0.1, progress=1.0)
        if step == 33:
            storekit.write_incident(run, step, rng)
    run.close()
    rng = random.Random(7)
    run = rlcockpit.init(project="e2e", name="lr-high", store=uri, config={"algo": "ppo", "optim": {"lr": 1e-4}},
                         run_id=RUN_IDS[1])
    for step in range(1, STEPS + 1):
        run.log(step, {k: v * 1.1 for k, v in storekit.step_metrics(step, rng).items()})
        run.commit(step)
    run.close()
    for run_id in SEED_IDS:
        recipe, seed = run_id[-2], int(run_id[-1])
        lr, slope = (3e-5, 0.02) if recipe == "B" else (1e-5, 0.01)
        run = rlcockpit.init(project="sweep", name=f"recipe{recipe}-seed{seed}", store=uri, run_id=run_id,
                             config={"algo": "ppo", "optim": {"lr": lr}, "seed": seed})
        noise = random.Random(seed)
        for step in range(1, STEPS + 1):
            metrics = {"reward/mean": 0.2 + slope * step + 0.03 * seed + 0.02 * noise.random(),
                       "kl/mean": (0.004 if recipe == "A" else 0.002) * step * (1 + 0.1 * seed),
                       "policy/entropy": 2.0 - 0.01 * step - 0.02 * seed, "policy/loss": 0.1 - 0.001 * step,
                       "response/length_mean": 12.0 + step % 3 + seed}
            if step % 5 == 0:
                metrics["eval/reward/mean"] = (0.8 if recipe == "B" else 0.5) - 0.001 * (step - 25) ** 2
            run.log(step, metrics)
            run.commit(step)
        run.close()
    _pace(uri, SECONDS_PER_STEP)
    return uri, RUN_IDS[0], RUN_IDS[1]


SECONDS_PER_STEP = 1.9  # a tiny-world PPO step on a laptop CPU


def _pace(uri: str, seconds: float) -> None:
    """Give the fixture runs the clock of a real run: they were logged in a tight loop (a header rate
    of 10^5 steps/s and every step at the same second), so every stored time becomes the run's start
    plus ``seconds`` per step."""
    import sqlite3

    db = sqlite3.connect(uri.removeprefix("sqlite:///"))
    start = "(SELECT started_at FROM runs WHERE runs.run_key = {t}.run_key)"
    with db:
        for table in ("steps", "metrics", "histograms", "samples", "events", "snapshots", "phases",
                      "checkpoints"):
            db.execute(f"UPDATE {table} SET wall_time = {start.format(t=table)} + step * ?", (seconds,))
        for col in ("min", "max", "nan"):
            db.execute(f"UPDATE metric_rollups SET {col}_wall = {start.format(t='metric_rollups')} "
                       f"+ {col}_step * ? WHERE {col}_step IS NOT NULL", (seconds,))
        db.execute("UPDATE runs SET ended_at = started_at + (COALESCE(last_step, 0) + 1) * ?, "
                   "heartbeat_at = started_at + (COALESCE(last_step, 0) + 1) * ? "
                   "WHERE ended_at IS NOT NULL", (seconds, seconds))
    db.close()


@pytest.fixture(scope="module")
def control_server(tmp_path_factory) -> Iterator[tuple[Any, Any]]:
    from control_testkit import RUN, build_world
    from rlcockpit.records import Batch, SampleRecord
    from server_testkit import serve_store

    world = build_world(tmp_path_factory.mktemp("docs-control"))
    writer = world.store.writer()  # two samples the reward model's rule fallback flagged: the review queue
    writer.write_batch(RUN, Batch(samples=(
        SampleRecord(step=3, sample_id=0, prompt="Q: Give me a tip for sleep.\nA:", reward=-1.0, category="chat",
                     response=" That is a great question worth exploring.", uncertainty=0.21,
                     flags=("needs_review", "rm_fallback", "rule_template")),
        SampleRecord(step=3, sample_id=1, prompt="Q: What is the capital of France?\nA:", reward=-1.0,
                     category="knowledge", response=" Berlin.", uncertainty=0.18,
                     flags=("needs_review", "rm_fallback", "rule_fact")))))
    writer.close()
    otto = world.plane.users.authenticate(world.tokens["otto"])
    world.plane.tickets.request(otto, RUN, "kl.coef", 0.2, "less drift")
    server = serve_store(world.uri, world.store, plane=world.plane)
    yield world, server
    server.stop()


def image_dir(tmp_path: Path) -> Path:
    """docs/img/ when ``RLCOCKPIT_UPDATE_SCREENSHOTS=1`` asks for regeneration, else a temporary
    directory (``make test`` must not rewrite tracked files)."""
    return IMG if os.environ.get(UPDATE_ENV) == "1" else tmp_path / "img"


def shoot_all(page: Any, url: str, runs: dict[str, str], lang: str, theme: str, shots=SHOTS,
              out: Path = IMG) -> list[str]:
    """Every page in one context, into ``out``; returns the images written (the others had not
    changed)."""
    written = []
    for shot in shots:
        page.goto(f"{url}/{shot.route.format(**runs)}")
        if shot.ready.startswith("() =>"):
            page.wait_for_function(shot.ready)
        else:
            page.locator(shot.ready).first.wait_for()
        if shot.click:
            page.locator(shot.click).first.click()
        if shot.hover:
            page.locator(shot.hover).hover()
        page.wait_for_timeout(400)  # the last chart frame, fonts
        ignore = []
        if shot.volatile:  # page coordinates (full-page shots)
            ignore = page.eval_on_selector_all(shot.volatile, """(els) => els.map((e) => {
              const r = e.getBoundingClientRect();
              return [r.left + scrollX, r.top + scrollY, r.right + scrollX, r.bottom + scrollY].map(Math.round); })""")
        png = page.locator(shot.selector).screenshot() if shot.selector else page.screenshot(full_page=True)
        image = quantize(png)
        path = out / image_name(shot, lang, theme)
        if changed(image, path, [tuple(b) for b in ignore]):
            image.save(path, optimize=True)
            written.append(path.name)
    return written


def test_screenshots_of_every_page_in_both_languages_and_themes(docs_store, control_server, serve, browser,
                                                                tmp_path):
    pytest.importorskip("PIL")
    uri, run_id, run_b = docs_store
    world, control = control_server
    server = serve(uri)
    out = image_dir(tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    for lang, locale, _ in LANGS:
        for theme in THEMES:
            context = browser.new_context(viewport=VIEWPORT, locale=locale, color_scheme=theme)
            page = context.new_page()
            page.set_default_timeout(30000)
            page.on("console", lambda m, c=f"{lang}/{theme}": m.type == "error" and errors.append(f"{c}: {m.text}"))
            page.on("pageerror", lambda e, c=f"{lang}/{theme}": errors.append(f"{c}: {e}"))
            try:
                page.goto(f"{server.url}/#/runs")
                assert page.evaluate("() => document.documentElement.dataset.theme") == theme
                assert page.evaluate("() => document.documentElement.lang") == ("zh-CN" if lang == "zh" else "en")
                shoot_all(page, server.url, {"run": run_id, "run_b": run_b, "seed0": SEED_IDS[0],
                                             "seeds": ",".join(SEED_IDS[1:])}, lang, theme, out=out)
                page.add_init_script(f"localStorage.setItem('rlcockpit.token', {world.tokens['alex']!r})")
                shoot_all(page, control.url, {}, lang, theme, CONTROL_SHOTS, out=out)
                page.goto(f"{control.url}/#/library")  # no live stream open when the server stops
            finally:
                context.close()
    assert not errors, errors
    for shot in (*SHOTS, *CONTROL_SHOTS):
        for lang, _, _ in LANGS:
            for theme in THEMES:
                path = out / image_name(shot, lang, theme)
                assert path.is_file() and path.stat().st_size < 400_000, path


if __name__ == "__main__":
    DOC.write_text(render_doc(DOC.read_text(encoding="utf-8")), encoding="utf-8")
    sys.stdout.write(f"{DOC.relative_to(ROOT)}: the screenshot list rewritten\n")

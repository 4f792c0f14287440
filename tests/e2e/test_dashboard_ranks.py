"""The dashboard of a data-parallel run (docs/distributed.md): a fourth row with step time, rollout
time, gradient norm and memory per rank, one line per rank; a single-process run has no such row."""

from __future__ import annotations

import rlcockpit
from conftest import wait_for

RANK_CHARTS = ("rank-step", "rank-rollout", "rank-grad", "rank-memory")


def _two_rank_run(path) -> tuple[str, str]:
    """12 steps of a 2-rank run as rank 0 logs them: global metrics once, dist/ metrics per rank;
    rank 1 is a straggler in rollout from step 6."""
    uri = f"sqlite:///{path}"
    run = rlcockpit.init(project="e2e", name="two-ranks", store=uri, config={"algo": "grpo"})
    run.log(0, {"dist/world_size": 2.0})
    for step in range(1, 13):
        slow = 0.4 if step >= 6 else 0.0
        metrics = {"reward/mean": 0.1 * step, "kl/mean": 0.01 * step}
        for r in (0, 1):
            extra = slow if r == 1 else 0.0
            metrics |= {f"dist/step_s/rank/{r}": 1.0 + slow, f"dist/time/rollout_s/rank/{r}": 0.3 + extra,
                        f"dist/grad_norm/rank/{r}": 0.8 + 0.1 * r, f"dist/rss_gb/rank/{r}": 1.5 + 0.01 * step}
        run.log(step, metrics)
    run.close()
    return uri, run.run_id


def rank_lines(page, chart: str) -> list[dict]:
    return page.evaluate(f"""() => {{ const c = window.rlcockpit.dashboard.charts["{chart}"];
        return c.spec.lines(c.data, c.opts).map((l) => ({{label: l.label, n: l.values.length, last: l.values[l.values.length - 1]}})); }}""")


def test_a_data_parallel_run_shows_its_ranks_side_by_side(tmp_path, serve, page, fixture_store):
    uri, run_id = _two_rank_run(tmp_path / "ranks.db")
    server = serve(uri)
    page.goto(f"{server.url}/#/run/{run_id}/dashboard")
    for chart in RANK_CHARTS:
        page.wait_for_selector(f"#chart-{chart}")
    wait_for(lambda: len(rank_lines(page, "rank-rollout")) == 2, what="two rank lines")
    rollout = rank_lines(page, "rank-rollout")
    assert [line["label"] for line in rollout] == ["rank 0", "rank 1"]
    assert [line["n"] for line in rollout] == [12, 12]
    assert abs(rollout[1]["last"] - 0.7) < 1e-9 and abs(rollout[0]["last"] - 0.3) < 1e-9  # the straggler
    for chart in RANK_CHARTS:
        assert len(rank_lines(page, chart)) == 2, chart
    assert page.locator(".dash-row.row-4 .chart-box").count() == 4
    # a single-process run: three rows, no rank charts
    other_uri, other_run = fixture_store
    plain = serve(other_uri)
    page.goto(f"{plain.url}/#/run/{other_run}/dashboard")
    page.wait_for_selector("#chart-reward")
    assert page.locator("#chart-rank-step").count() == 0 and page.locator(".dash-row.row-4").count() == 0

"""The cockpit's Cost tab (docs/cost.md): the ledger of a run in English and Chinese, and the empty
state of a run without token counts."""

from __future__ import annotations

import rlcockpit

CONFIG = {"train": {"steps": 20}, "rollout": {"batch_size": 4, "n_samples": 8},
          "cost": {"price_per_hour": 2.5, "accelerators": 8, "accelerator": "H100", "sampling_schedule": "seed004"}}


def _store(tmp_path) -> str:
    uri = f"sqlite:///{tmp_path / 'cost.db'}"
    with rlcockpit.init(project="e2e", name="costly", store=uri, run_id="costly", config=CONFIG) as run:
        run.event(0, "model_size", {"actor_params": 7_000_000_000})
        for step in range(1, 11):
            run.log(step, {"cost/tokens_generated": 16_384.0, "cost/tokens_trained": 32_768.0,
                           "time/rollout_s": 3.0, "time/score_s": 1.0, "time/update_s": 6.0})
    with rlcockpit.init(project="e2e", name="imported", store=uri, run_id="imported") as run:
        run.log(1, {"reward/mean": 0.5})
    return uri


def test_the_cost_tab_shows_the_ledger(tmp_path, serve, page, zh_page):
    server = serve(_store(tmp_path))
    page.goto(f"{server.url}/#/run/costly/cost")
    totals = page.locator("#cost-totals")
    totals.wait_for()
    text = totals.inner_text()
    assert "Tokens generated" in text and "164 k" in text  # 10 x 16,384
    assert "328 k" in page.locator("#cost-totals tr[data-key='cost.tokens_generated']").inner_text()  # projected to 20
    usd = page.locator("#cost-totals tr[data-key='cost.usd']").inner_text()
    assert "0.5556" in usd  # 100 s x 8 accelerators / 3600 x $2.5
    assert "8 × H100" in page.locator("#cost-meta").inner_text()
    phases = page.locator("#cost-phases").inner_text()
    assert phases.index("UPDATE") < phases.index("ROLLOUT") < phases.index("SCORE")  # the header's phase labels
    assert page.locator("#cost-steps tbody tr").count() == 10
    assert "40 %" in page.locator("#cost-schedule").inner_text()  # 20 steps: 7 x 8, 7 x 4, 6 x 2 samples
    assert page.locator(".tab[data-view=cost]").count() == 1

    zh_page.goto(f"{server.url}/#/run/costly/cost")
    zh_page.locator("#cost-totals").wait_for()
    assert "生成 token" in zh_page.locator("#cost-totals").inner_text()

    page.goto(f"{server.url}/#/run/imported/cost")
    page.locator("#cost-empty").wait_for()
    assert "No token counts recorded" in page.locator("#cost-empty").inner_text()

"""The dashboard's client-side statistics (js/stats.js) against numpy references: the KL chart's
moving average and P90 over a window, the debiased EMA of the reward smoothing slider, the rebinned
histogram heatmap (js/charts.js), and the step rate in the header."""

from __future__ import annotations

import numpy as np

RUN = """async ([values, window, smoothing]) => {
  const s = await import("/static/js/stats.js");
  const c = await import("/static/js/charts.js");
  return {
    ma: s.movingAverage(values, window), p90: s.rollingQuantile(values, window, 0.9),
    ema: s.ema(values, smoothing), rate: s.stepRate([1, 2, 3, 5], [10, 11, 12.5, 14]),
    rebin: c.rebin([{step: 1, edges: [0, 1, 2], counts: [1, 3]}, {step: 2, edges: [1, 3], counts: [2]}], 4),
  };
}"""


def naive_window(values: list, window: int, fn) -> list:
    out = []
    for i in range(len(values)):
        w = [v for v in values[max(0, i - window + 1): i + 1] if v is not None]
        out.append(fn(np.array(w)) if w else None)
    return out


def naive_ema(values: list, s: float) -> list:
    out, last, n = [], 0.0, 0
    for v in values:
        if v is None:
            out.append(None)
            continue
        last = last * s + (1 - s) * v
        n += 1
        out.append(last / (1 - s ** n))
    return out


def close(a: list, b: list) -> bool:
    return len(a) == len(b) and all((x is None and y is None) or (x is not None and y is not None and abs(x - y) < 1e-9)
                                    for x, y in zip(a, b, strict=True))


def test_window_statistics_match_numpy(fixture_store, serve, page):
    uri, _ = fixture_store
    server = serve(uri)
    page.goto(f"{server.url}/#/runs")
    page.locator("#runs-list").wait_for()
    rng = np.random.default_rng(0)
    values = [float(v) for v in rng.normal(0, 1, 57)]
    values[5] = values[20] = None  # non-finite values arrive as null and are skipped
    got = page.evaluate(RUN, [values, 10, 0.6])
    assert close(got["ma"], naive_window(values, 10, np.mean))
    assert close(got["p90"], naive_window(values, 10, lambda w: float(np.quantile(w, 0.9))))
    assert close(got["ema"], naive_ema(values, 0.6))
    assert abs(got["rate"] - 4 / 4) < 1e-12  # 4 steps in 4 s
    cells = {(x, y): v for x, y, v in got["rebin"]["cells"]}
    # common grid 0..3 in 4 bins of 0.75; a source bin goes where its centre falls (0.5 -> 0,
    # 1.5 -> 2, 2.0 -> 2); each column is that step's share of values per bin
    assert cells == {(0, 0): 0.25, (0, 2): 0.75, (1, 2): 1.0}

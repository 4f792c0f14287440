"""``rlcockpit snapshot show``: list a run's diagnostic snapshots or render one in the terminal."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

EPILOG = """examples:
  rlcockpit snapshot show --store runs.db --run RUN            (list the run's snapshots)
  rlcockpit snapshot show --store runs.db --run RUN 3          (render snapshot 3)
  rlcockpit snapshot show --store runs.db --run RUN 3 --json   (its full JSON payload)

A "diagnostic" snapshot (red / black findings) holds the gradient-norm histogram of the last 100
steps, the per-layer gradient variance, the policy-head / critic-head gradient covariance, the
triggering batch, the last 50 samples, the metric window and the config; a "batch" snapshot
(orange findings) holds the triggering batch. See docs/diagnostics.md."""

BLOCKS = "▁▂▃▄▅▆▇█"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("snapshot", help="diagnostic snapshots of a run",
                              description="Diagnostic snapshots taken by the severity policy.")
    sub = p.add_subparsers(dest="snapshot_command", metavar="ACTION")
    show = sub.add_parser("show", help="list a run's snapshots, or show one",
                          description="Without ID: list the run's snapshots. With ID: render it "
                                      "(histogram, heatmap summary, covariance, samples).",
                          epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    show.add_argument("--store", default="sqlite:///rlcockpit.db", help="store URI (a bare path works)")
    show.add_argument("--run", help="run id (default: the newest run in the store)")
    show.add_argument("id", nargs="?", type=int, help="snapshot id (from the list)")
    show.add_argument("--json", action="store_true", help="print JSON instead of rendering")
    show.set_defaults(func=cmd_show)
    p.set_defaults(func=lambda args: p.print_help() or 1)


def cmd_show(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rlcockpit.records import to_dict
    from rlcockpit.store import open_store

    reader = open_store(args.store, create=False).reader()
    try:
        run_id = args.run or _newest_run(reader, args.store)
        if args.id is None:
            found = reader.read_snapshots(run_id)
            if args.json:
                print(json.dumps([_listing(s) for s in found], indent=2))
            else:
                _print_list(Console(), run_id, found)
            return 0
        snap = reader.get_snapshot(run_id, args.id)
    finally:
        reader.close()
    if args.json:
        print(json.dumps(to_dict(snap), indent=2, ensure_ascii=False))
    else:
        render(Console(), snap)
    return 0


def _newest_run(reader: Any, store: str) -> str:
    from rlcockpit.errors import NotFoundError

    runs = reader.list_runs()
    if not runs:
        raise NotFoundError(f"no runs in {store}", details={"store": store})
    return max(runs, key=lambda r: r.started_at).run_id


def _listing(s: Any) -> dict[str, Any]:
    return {"id": s.snapshot_id, "step": s.step, "kind": s.kind, "incident": s.incident,
            "wall_time": s.wall_time}


def _print_list(console: Any, run_id: str, found: Sequence[Any]) -> None:
    from rich.table import Table

    if not found:
        console.print(f"run {run_id} has no snapshots")
        return
    table = Table(title=f"snapshots of run {run_id}")
    for col in ("id", "step", "kind", "incident"):
        table.add_column(col, justify="right" if col in ("id", "step") else "left")
    for s in found:
        table.add_row(str(s.snapshot_id), str(s.step), s.kind, s.incident or "-")
    console.print(table)
    console.print("show one: rlcockpit snapshot show --run RUN ID")


# --------------------------------------------------------------------------- rendering


def render(console: Any, snap: Any) -> None:
    """The whole snapshot, section by section (each section skips itself when absent)."""
    from rich.markup import escape

    p = snap.payload
    f = p.get("finding", {})
    console.print(f"[bold]snapshot {snap.snapshot_id}[/bold] · {snap.kind} · step {snap.step} · "
                  f"incident {escape(snap.incident or '-')}")
    if f:
        console.print(f"finding: {f.get('severity', '').upper()} {escape(str(f.get('detector')))} — "
                      f"{escape(str(f.get('message')))}")
    for section in (_grad_hist, _layer_var, _head_cov, _metric_window):
        section(console, p)
    _samples(console, "triggering batch", p.get("batch", []))
    _samples(console, "last samples", p.get("last_samples", []), limit=5)
    if p.get("truncated"):
        console.print(f"[dim]payload shrunk to fit: {escape(json.dumps(p['truncated']))}[/dim]")


def sparkline(values: Sequence[float | None]) -> str:
    """One character per value (▁..█ scaled to the finite range; · for a missing value)."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return "·" * len(values)
    lo, hi = min(finite), max(finite)
    span = hi - lo or 1.0
    return "".join("·" if v is None or not math.isfinite(v)
                   else BLOCKS[min(7, int((v - lo) / span * 7.999))] for v in values)


def _grad_hist(console: Any, p: Mapping[str, Any]) -> None:
    h = p.get("grad_norm_hist")
    if not h or not h.get("counts"):
        return
    steps = h.get("steps") or [0]
    console.print(f"\n[bold]actor gradient norm, last {len(h.get('steps', []))} steps[/bold] "
                  f"(steps {steps[0]}–{steps[-1]})")
    if h.get("values"):
        console.print(f"  over steps  {sparkline(h['values'])}")
    top = max(h["counts"]) or 1
    for lo, hi, n in zip(h["edges"], h["edges"][1:], h["counts"], strict=False):
        console.print(f"  [{lo:9.4g}, {hi:9.4g})  {'█' * round(30 * n / top):<30} {n}")


def _layer_var(console: Any, p: Mapping[str, Any]) -> None:
    lv = p.get("layer_grad_var")
    if not lv or not lv.get("values"):
        return
    console.print(f"\n[bold]per-layer gradient variance[/bold] ({lv.get('measure', '')})")
    rows = lv["values"]
    for j, layer in enumerate(lv["layers"]):
        col = [r[j] for r in rows]
        finite = [v for v in col if v is not None]
        if not finite:
            continue
        med = sorted(finite)[len(finite) // 2]
        jump = f"  last/median {finite[-1] / med:.2g}x" if med > 0 else ""
        console.print(f"  {layer:<12} {sparkline(col)}  last {finite[-1]:.3g}  max {max(finite):.3g}{jump}")


def _head_cov(console: Any, p: Mapping[str, Any]) -> None:
    hc = p.get("head_grad_cov")
    if not hc or not hc.get("matrix"):
        return
    labels, m = hc["labels"], hc["matrix"]
    pol = [i for i, label in enumerate(labels) if label.startswith("policy")]
    cri = [i for i, label in enumerate(labels) if label.startswith("critic")]
    console.print(f"\n[bold]head-gradient covariance[/bold] ({len(labels)} sampled coordinates, "
                  f"{hc.get('rows')} minibatches)")

    def mean_abs(a: list[int], b: list[int]) -> float:
        vals = [abs(m[i][j]) for i in a for j in b if m[i][j] is not None and i != j]
        return sum(vals) / len(vals) if vals else float("nan")

    console.print(f"  mean |cov| policy×policy {mean_abs(pol, pol):.3g}   critic×critic "
                  f"{mean_abs(cri, cri):.3g}   policy×critic {mean_abs(pol, cri):.3g}")
    pairs = sorted(((abs(m[i][j] or 0.0), i, j) for i in pol for j in cri), reverse=True)[:3]
    for _, i, j in pairs:
        corr = _corr(m, i, j)
        console.print(f"  {labels[i]} × {labels[j]}: cov {m[i][j]:.3g}" + (f"  (r {corr:+.2f})" if corr else ""))


def _corr(m: Sequence[Sequence[float | None]], i: int, j: int) -> float | None:
    vi, vj, c = m[i][i], m[j][j], m[i][j]
    if None in (vi, vj, c) or vi <= 0 or vj <= 0:
        return None
    return c / math.sqrt(vi * vj)


def _metric_window(console: Any, p: Mapping[str, Any]) -> None:
    mw = p.get("metric_window")
    if not mw or not mw.get("series"):
        return
    console.print(f"\n[bold]metrics read by the firing detectors[/bold] ({len(mw.get('steps', []))} steps)")
    for name, values in mw["series"].items():
        last = next((v for v in reversed(values) if v is not None), None)
        console.print(f"  {name:<28} {sparkline(values[-60:])}  last {last if last is None else f'{last:.4g}'}")


def _samples(console: Any, title: str, samples: Sequence[Mapping[str, Any]], limit: int = 8) -> None:
    from rich.markup import escape
    from rich.table import Table

    if not samples:
        return
    table = Table(title=f"{title} ({len(samples)} samples, showing {min(limit, len(samples))})")
    for col in ("step", "id", "category", "reward", "len", "flags", "response"):
        table.add_column(col, overflow="fold", max_width=60 if col == "response" else None)
    for s in list(samples)[-limit:]:
        reward = s.get("reward")
        table.add_row(str(s.get("step")), str(s.get("sample_id")), escape(str(s.get("category") or "")),
                      "-" if reward is None else f"{reward:.3g}", str(s.get("length")),
                      escape(",".join(s.get("flags") or [])), escape(str(s.get("response"))[:200]))
    console.print(table)

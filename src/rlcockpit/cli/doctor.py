"""``rlcockpit doctor``: diagnose a stored or imported run offline with the live engine."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rlcockpit.cli.transfer import add_mapping_arguments, key_map_from_args

EPILOG = """examples:
  rlcockpit doctor --store sqlite:///rlcockpit.db                 (the newest run)
  rlcockpit doctor --store runs.db --run RUN --html report.html --markdown report.md
  rlcockpit doctor --store runs.db --run RUN --json > report.json
  rlcockpit doctor --import trainer_state.json completions/ --store imported.db
  rlcockpit doctor --import train.jsonl --map Reward=reward/mean --store imported.db
  rlcockpit doctor --store runs.db diagnostics.detectors.kl_tiers.red_ratio=3
  rlcockpit doctor --store runs.db --run NEW --baseline GOOD      (compare with a good run)
  rlcockpit doctor --store new.db --baseline sqlite:///old.db#GOOD

Exit code 2 when a red or black finding exists (use it to fail a CI job), 3 when the store or an
--import file cannot be read (a damaged store, a malformed log), 0 otherwise (a bad option or an
unknown run: 2, with the error).
Imported TRL / verl / OpenRLHF / DeepSpeed-Chat / W&B / Trackio / TensorBoard runs and console logs
get the same diagnosis: their metric keys are renamed to catalog names by the alias table on
import, or by --map / --map-file for a custom trainer (docs/import_export.md). For an imported run
the report lists every key it did not understand (kept under import/) with the catalog names it
may mean, says when the step was derived from row order, and counts the detectors whose inputs
the log carries under any trainer's name and how many of them ran. The coverage table says which
detectors ran, which were skipped, and which of the inputs they read the run lacks."""

EXIT_UNREADABLE = 3  # the store or an --import file cannot be read: no diagnosis was possible


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "doctor", help="diagnose a stored or imported run (exit 2 on red/black findings, 3 when "
                       "the store or input cannot be read)",
        description="Replay a run's metrics and samples through the diagnostics engine and report "
                    "incidents, findings, their first-moving signal and the failure-library entries.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite:///rlcockpit.db", help="store URI (a bare path works)")
    p.add_argument("--run", help="run id (default: the newest run in the store)")
    p.add_argument("--import", dest="import_paths", nargs="+", metavar="PATH",
                   help="first import these foreign logs into --store (as `rlcockpit import`)")
    add_mapping_arguments(p)
    p.add_argument("--config", help="YAML with a `diagnostics:` section (thresholds, disabled)")
    p.add_argument("--baseline", metavar="[STORE#]RUN",
                   help="a healthy run of the same recipe to compare with step by step (the "
                        "`baseline` detector): a run id in --store, or STORE_URI#RUN_ID "
                        "(= diagnostics.baseline)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    p.add_argument("--markdown", metavar="FILE", help="also write a Markdown report")
    p.add_argument("--json", action="store_true", help="print the report as JSON (no table)")
    p.add_argument("--no-samples", action="store_true",
                   help="metrics only (faster on runs with millions of samples)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="diagnostics overrides, e.g. diagnostics.disabled=[memory]")
    p.set_defaults(func=cmd_doctor)


def load_diagnostics_config(path: str | None, overrides: list[str]) -> Any:
    from rlcockpit.config import apply_overrides, from_dict, read_yaml
    from rlcockpit.diagnostics import DiagnosticsConfig
    from rlcockpit.errors import ConfigError

    data = read_yaml(path) if path else {}
    data = apply_overrides(dict(data), overrides)
    unknown = [k for k in data if k != "diagnostics"]
    if unknown:
        raise ConfigError(f"doctor reads only the `diagnostics:` section; got {unknown[0]!r} "
                          "(write overrides as diagnostics.<key>=value)", details={"key": unknown[0]})
    return from_dict(DiagnosticsConfig, data.get("diagnostics") or {}, prefix="diagnostics.")


def cmd_doctor(args: argparse.Namespace) -> int:
    """Exit 3 when the store or an imported file cannot be read: a damaged store must never
    read as "no failure detected" (docs/cli.md)."""
    import sys

    from rlcockpit.errors import ImportFormatError, StoreError

    try:
        return _doctor(args)
    except (StoreError, ImportFormatError) as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        print(f"doctor: no diagnosis (exit {EXIT_UNREADABLE}): the "
              f"{'input' if isinstance(exc, ImportFormatError) else 'store'} cannot be read",
              file=sys.stderr)
        return EXIT_UNREADABLE


def _doctor(args: argparse.Namespace) -> int:
    from rlcockpit.diagnostics import report as reports
    from rlcockpit.store import open_store

    overrides = list(args.overrides)
    if args.baseline:
        ref = args.baseline if "#" in args.baseline else f"{args.store}#{args.baseline}"
        overrides.append(f"diagnostics.baseline={ref}")
    config = load_diagnostics_config(args.config, overrides)
    if not args.import_paths and (args.key_map or args.map_file or args.step_key or args.source_run):
        from rlcockpit.errors import ConfigError

        raise ConfigError("--map, --map-file, --step-key and --source-run apply to --import PATH; a "
                          "stored run keeps the names it was imported with (re-import it to remap)")
    run_id = _import(args) if args.import_paths else None
    reader = open_store(args.store, create=False).reader()
    try:
        run_id = run_id or args.run or _newest_run(reader, args.store)
        _check_store(reader, run_id, args.store)
        result = _diagnose(reader, run_id, config, args)
        names = reader.metric_names(run_id)
    finally:
        reader.close()
    logged = import_report(result, names)
    if args.html:
        Path(args.html).write_text(reports.to_html(result), encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(reports.to_markdown(result), encoding="utf-8")
    if args.json:
        print(json.dumps({**reports.to_json(result), "import": logged}, ensure_ascii=False, indent=2))
    else:
        print_report(result, args, logged)
    return result.exit_code


def _check_store(reader: Any, run_id: str, store: str) -> None:
    """Read the run's step index once: damaged pages raise here (StoreError) instead of being
    skipped by a replay that would then report "No failure detected"."""
    from rlcockpit.errors import StoreError

    try:
        reader.summary(run_id)
    except StoreError as exc:
        raise StoreError(f"the store {store} cannot be read for run {run_id} ({exc.message}); it may "
                         "be damaged: check it with `sqlite3 FILE 'PRAGMA integrity_check'` and "
                         "restore it from a copy", details=exc.details) from exc


def import_report(result: Any, names: list[str]) -> dict[str, Any]:
    """What doctor says about an imported run: its keys kept under import/ with the catalog
    names they may mean, where its steps came from, and the detectors measured against what the
    log carries (:func:`rlcockpit.diagnostics.coverage.logged_coverage`)."""
    from rlcockpit.diagnostics.coverage import logged_coverage
    from rlcockpit.integrations.aliases import catalog_meanings, kept_note
    from rlcockpit.integrations.keymap import suggest_names

    info = (result.run.config or {}).get("import") or {}
    unknown = sorted(n for n in names if n.startswith("import/"))
    logged = logged_coverage(result.coverage, names, catalog_meanings)
    return {
        "imported": bool(info),
        "keys_not_understood": [{"key": n, "kept_on_purpose": kept_note(n) or "",
                                 "may_mean": [] if kept_note(n) else suggest_names(n)} for n in unknown],
        "step_from_row_order": [f["path"] for f in info.get("files", []) if f.get("step_from")],
        "notes": list(info.get("notes", [])),
        "timing": info.get("timing") or {},
        "logged_coverage": {
            "summary": logged.line(), "carried": logged.carried, "ran": logged.ran,
            "missed": [{"detector": d.detector, "carried": [list(c) for c in d.carried],
                        "renamed": [list(c) for c in d.renamed]} for d in logged.missed]},
    }


def _diagnose(reader: Any, run_id: str, config: Any, args: argparse.Namespace) -> Any:
    from rich.progress import Progress

    from rlcockpit.diagnostics.baseline import load_baseline_ref
    from rlcockpit.diagnostics.offline import diagnose_run
    from rlcockpit.store import open_store

    baseline = load_baseline_ref(config.baseline, open_store) if config.baseline else None
    if args.json:
        return diagnose_run(reader, run_id, config, with_samples=not args.no_samples,
                            baseline=baseline)
    with Progress(transient=True) as bar:
        task = bar.add_task(f"diagnosing {run_id}", total=None)
        return diagnose_run(reader, run_id, config, with_samples=not args.no_samples,
                            baseline=baseline,
                            progress=lambda done, total: bar.update(task, completed=done,
                                                                    total=total))


def _newest_run(reader: Any, store: str) -> str:
    from rlcockpit.errors import NotFoundError

    runs = reader.list_runs()
    if not runs:
        raise NotFoundError(f"the store {store} has no runs; record one with `rlcockpit train` "
                            "or import logs with --import PATH")
    return max(runs, key=lambda r: r.started_at).run_id


def _import(args: argparse.Namespace) -> str:
    import sys

    from rlcockpit.integrations.importers import (
        import_summary,
        new_run_id,
        read_paths,
        write_import,
    )
    from rlcockpit.store import open_store

    parsed = read_paths(args.import_paths, key_map=key_map_from_args(args), step_key=args.step_key,
                        source_run=args.source_run)
    store = open_store(args.store)
    writer = store.writer()
    try:
        first = Path(args.import_paths[0]).resolve()
        run = write_import(writer, parsed, project="imported", run_id=args.run or new_run_id(),
                           name=first.stem if first.is_file() else first.name)
    finally:
        writer.close()
        store.close()
    print("\n".join(import_summary(run.run_id, parsed)), file=sys.stderr)  # stdout may be --json
    return run.run_id


def print_coverage(console: Any, result: Any) -> None:
    """Which detectors ran, which were skipped, and the inputs the run lacks."""
    from rich.table import Table

    from rlcockpit.diagnostics.coverage import coverage_line, coverage_rows

    console.print(f"\n[bold]Coverage[/]: {coverage_line(result.coverage)}")
    table = Table(show_header=True, box=None, padding=(0, 1))
    for col in ("detector", "family", "ran", "inputs the run lacks"):
        table.add_column(col, overflow="fold")
    for detector, family, state, lacks in coverage_rows(result.coverage, result.steps):
        style = "dim" if state == "skipped" else ""
        table.add_row(detector, family, state, lacks, style=style)
    console.print(table)


def print_import(console: Any, logged: dict[str, Any]) -> None:
    """The imported run's keys not understood, step origin, clock and logged coverage."""
    from rlcockpit.integrations.importers import timing_line

    if not logged["imported"] and not logged["keys_not_understood"]:
        return
    console.print("\n[bold]Import[/]")
    for path in logged["step_from_row_order"]:
        console.print(f"  [yellow]step derived from row order[/] in {path}: step N is the N-th "
                      "record, not the trainer's global step", soft_wrap=True)
    if logged["imported"]:
        console.print("  " + timing_line(logged["timing"]), highlight=False, soft_wrap=True)
    keys = logged["keys_not_understood"]
    if keys:
        console.print(f"  {len(keys)} keys not understood (kept under import/; map one with "
                      "--map KEY=catalog/name):", soft_wrap=True)
    for entry in keys:
        hint = (f"kept on purpose: {entry['kept_on_purpose']}" if entry["kept_on_purpose"]
                else "may mean " + (", ".join(entry["may_mean"]) or "nothing in the catalog"))
        console.print(f"    {entry['key']}  [dim]{hint}[/]", highlight=False, soft_wrap=True)
    cov = logged["logged_coverage"]
    console.print(f"  {cov['summary']}", soft_wrap=True)
    needing_more = []
    for missed in cov["missed"]:
        if not missed["renamed"]:
            needing_more.append(missed["detector"])
            continue
        how = ", ".join(f"{read} as {key}" for read, key in missed["renamed"])
        console.print(f"    {missed['detector']} should have run: the log carries {how} "
                      "(under a foreign name; --map it)", highlight=False, soft_wrap=True)
    if needing_more:
        console.print(f"    did not run although the log carries some of their inputs (they "
                      f"need more of them): {', '.join(needing_more)}", highlight=False, soft_wrap=True)


def print_report(result: Any, args: argparse.Namespace, logged: dict[str, Any] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from rlcockpit.diagnostics.report import pattern_title

    colours = {"yellow": "yellow", "orange": "dark_orange", "red": "red", "black": "white on black"}
    console = Console()
    r = result.run
    console.print(f"[bold]rlcockpit doctor[/] {r.name} [dim]{r.run_id}[/] — {r.status}, "
                  f"{result.steps} steps, {result.samples} samples")
    if not result.incidents:
        console.print("[green]No failure detected.[/] 未发现异常。")
    for inc in result.incidents:
        style = colours.get(inc.severity, "white")
        state = "resolved" if inc.resolved else "open"
        console.print(f"\n[{style}]■ {inc.severity.upper()}[/] steps {inc.first_step}–"
                      f"{inc.last_step} ({state}): [bold]{inc.summary}[/]\n  {inc.summary_zh}")
        table = Table(show_header=True, box=None, padding=(0, 1))
        for col in ("step", "detector", "severity", "status", "message"):
            table.add_column(col, overflow="fold")
        for f in inc.findings:
            table.add_row(str(f.step), f.detector, f"[{colours.get(f.severity, 'white')}]"
                          f"{f.severity}[/]", f.status, f.message)
        console.print(table)
        for p in inc.patterns:
            t = pattern_title(p)
            console.print(f"  library: [cyan]{p}[/] {t['en']} / {t['zh']}  "
                          f"[dim](rlcockpit library show {p})[/]")
    print_coverage(console, result)
    if logged:
        print_import(console, logged)
    for name, error in result.errors.items():
        console.print(f"[red]detector {name} failed and was switched off:[/] {error}")
    for label, path in (("HTML", args.html), ("Markdown", args.markdown)):
        if path:
            console.print(f"{label} report: {path}")
    verdict = "[red]exit 2: red or black findings[/]" if result.exit_code else "[green]exit 0[/]"
    console.print(verdict)

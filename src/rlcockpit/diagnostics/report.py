"""Doctor reports as JSON (for machines), Markdown and self-contained HTML (for people)."""

from __future__ import annotations

import html
import json
from typing import Any

from rlcockpit.diagnostics.coverage import coverage_line, coverage_rows
from rlcockpit.diagnostics.incidents import Incident
from rlcockpit.diagnostics.offline import DoctorReport
from rlcockpit.records import FindingRecord, to_dict

COLOURS = {"info": "#6b7280", "yellow": "#ca8a04", "orange": "#ea580c", "red": "#dc2626",
           "black": "#111827"}


def to_json(report: DoctorReport) -> dict[str, Any]:
    return {
        "run": to_dict(report.run), "steps": report.steps, "first_step": report.first_step,
        "last_step": report.last_step, "samples": report.samples, "worst": report.worst,
        "exit_code": report.exit_code,
        "incidents": [_incident_dict(i) for i in report.incidents],
        "findings": [to_dict(f) for f in report.findings],
        "detectors": report.statuses, "detector_errors": report.errors,
        "coverage": {"summary": coverage_line(report.coverage),
                     "detectors": [c.to_dict() for c in report.coverage]},
        "live_findings": len(report.live_findings),
    }


def _incident_dict(inc: Incident) -> dict[str, Any]:
    out = {k: v for k, v in to_dict(inc).items() if k != "findings"}
    out["findings"] = [to_dict(f) for f in inc.findings]
    out["library"] = [pattern_title(p) for p in inc.patterns]
    return out


def pattern_title(pattern_id: str) -> dict[str, str]:
    """{id, en, zh} for a failure-library id (the id itself when the library does not know it)."""
    from rlcockpit.diagnostics.library import load_library
    from rlcockpit.errors import NotFoundError

    try:
        entry = load_library().get(pattern_id)
    except NotFoundError:
        return {"id": pattern_id, "en": pattern_id, "zh": pattern_id}
    return {"id": pattern_id, "en": entry.title["en"], "zh": entry.title["zh"]}


def to_markdown(report: DoctorReport) -> str:
    r = report.run
    lines = [f"# rlcockpit doctor — {r.name} (`{r.run_id}`)", "",
             f"- status: {r.status}; steps {report.first_step}–{report.last_step} "
             f"({report.steps} steps, {report.samples} samples)",
             f"- worst finding: **{report.worst or 'none'}**; exit code {report.exit_code}",
             f"- incidents: {len(report.incidents)}; findings: {len(report.findings)}", ""]
    if not report.incidents:
        lines += ["No failure detected.", ""]
    for inc in report.incidents:
        lines += [f"## {inc.severity.upper()} · steps {inc.first_step}–{inc.last_step} · "
                  f"{'resolved' if inc.resolved else 'open'}", "",
                  f"{inc.summary}  ", f"{inc.summary_zh}", ""]
        lines += ["| step | detector | severity | status | message |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {f.step} | {f.detector} | {f.severity} | {f.status} | {_md(f.message)} |"
                  for f in inc.findings]
        if inc.patterns:
            titles = [pattern_title(p) for p in inc.patterns]
            lines += ["", "Failure library: " + ", ".join(
                f"`{t['id']}` {t['en']} / {t['zh']}" for t in titles)]
        lines.append("")
    lines += ["## Detectors", "", "| detector | status |", "| --- | --- |"]
    lines += [f"| {name} | {status} |" for name, status in sorted(report.statuses.items())]
    lines += ["", "## Coverage", "", f"{coverage_line(report.coverage)}.", "",
              "| detector | family | ran | inputs the run lacks |", "| --- | --- | --- | --- |"]
    lines += [f"| {' | '.join(_md(cell) for cell in row)} |"
              for row in coverage_rows(report.coverage, report.steps)]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_html(report: DoctorReport) -> str:
    r = report.run
    parts = [f"<h1>rlcockpit doctor — {_e(r.name)} <code>{_e(r.run_id)}</code></h1>",
             f"<p>status {_e(r.status)} · steps {report.first_step}–{report.last_step} "
             f"({report.steps} steps, {report.samples} samples) · worst finding "
             f"{_badge(report.worst or 'none')} · exit code {report.exit_code}</p>"]
    if not report.incidents:
        parts.append("<p class=ok>No failure detected. 未发现异常。</p>")
    for inc in report.incidents:
        parts.append(_incident_html(inc))
    rows = "".join(f"<tr><td>{_e(n)}</td><td>{_e(s)}</td></tr>"
                   for n, s in sorted(report.statuses.items()))
    parts.append(f"<h2>Detectors</h2><table><tr><th>detector</th><th>status</th></tr>{rows}</table>")
    parts.append(_coverage_html(report))
    style = ("body{font:14px system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#111}"
             "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:4px 8px;"
             "text-align:left;vertical-align:top}.badge{color:#fff;border-radius:4px;padding:1px 6px}"
             "section{border-left:4px solid var(--c);padding-left:1em;margin:1.5em 0}")
    return (f"<!doctype html><html lang=en><meta charset=utf-8><title>rlcockpit doctor "
            f"{_e(r.run_id)}</title><style>{style}</style><body>{''.join(parts)}</body></html>\n")


def _coverage_html(report: DoctorReport) -> str:
    rows = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>"
                   for row in coverage_rows(report.coverage, report.steps))
    return (f"<h2>Coverage</h2><p>{_e(coverage_line(report.coverage))}.</p><table><tr>"
            f"<th>detector</th><th>family</th><th>ran</th><th>inputs the run lacks</th></tr>"
            f"{rows}</table>")


def _incident_html(inc: Incident) -> str:
    rows = "".join(_finding_row(f) for f in inc.findings)
    lib = "".join(f"<li><code>{_e(t['id'])}</code> {_e(t['en'])} / {_e(t['zh'])}</li>"
                  for t in (pattern_title(p) for p in inc.patterns))
    return (f"<section style='--c:{COLOURS.get(inc.severity, '#999')}'>"
            f"<h2>{_badge(inc.severity)} steps {inc.first_step}–{inc.last_step} · "
            f"{'resolved' if inc.resolved else 'open'}</h2><p>{_e(inc.summary)}<br>"
            f"{_e(inc.summary_zh)}</p><table><tr><th>step</th><th>detector</th><th>severity</th>"
            f"<th>status</th><th>message</th><th>evidence</th></tr>{rows}</table>"
            + (f"<p>Failure library:</p><ul>{lib}</ul>" if lib else "") + "</section>")


def _finding_row(f: FindingRecord) -> str:
    evidence = json.dumps(dict(f.evidence), ensure_ascii=False, sort_keys=True)[:600]
    return (f"<tr><td>{f.step}</td><td>{_e(f.detector)}</td><td>{_badge(f.severity)}</td>"
            f"<td>{_e(f.status)}</td><td>{_e(f.message)}</td><td><code>{_e(evidence)}</code></td></tr>")


def _badge(severity: str) -> str:
    return (f"<span class=badge style='background:{COLOURS.get(severity, '#6b7280')}'>"
            f"{_e(severity)}</span>")


def _e(text: Any) -> str:
    return html.escape(str(text))

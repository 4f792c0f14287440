"""Detector coverage of a replayed run: which detectors ran, which were skipped, for want of what.

A detector declares the catalog names it ``reads`` (a trailing ``/`` means "any name under") and
whether it reads samples; it returns SKIPPED on a step that lacks them. Over a replay we count, per
detector, the steps it read and the steps it skipped, and name the inputs the whole run lacks. An
imported run whose trainer logs no entropy shows ``entropy: skipped, lacks policy/entropy`` instead
of a silent "no finding".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlcockpit.diagnostics.base import Detector

SAMPLES_INPUT = "samples"
RAN, SKIPPED, ERROR = "ran", "skipped", "error"


@dataclass(frozen=True)
class DetectorCoverage:
    """One detector over one replay. ``missing`` lists the inputs it reads that the run never
    logged; a detector that ran may still lack some (it reads any of them)."""

    detector: str
    family: str
    reads: tuple[str, ...]
    steps_run: int
    steps_skipped: int
    missing: tuple[str, ...]
    error: str = ""

    @property
    def state(self) -> str:
        if self.error:
            return ERROR
        return RAN if self.steps_run else SKIPPED

    def to_dict(self) -> dict[str, object]:
        return {"detector": self.detector, "family": self.family, "state": self.state,
                "steps_run": self.steps_run, "steps_skipped": self.steps_skipped,
                "reads": list(self.reads), "missing": list(self.missing), "error": self.error}


def input_present(read: str, names: Iterable[str]) -> bool:
    """True when ``read`` is among ``names`` (a trailing "/" matches any name under it)."""
    if read.endswith("/"):
        return any(n.startswith(read) for n in names)
    return read in names


def missing_inputs(detector: Detector, names: set[str], has_samples: bool) -> tuple[str, ...]:
    """The inputs ``detector`` declares that the run never provided."""
    missing = [r for r in detector.reads if not input_present(r, names)]
    if detector.reads_samples and not has_samples:
        missing.append(SAMPLES_INPUT)
    return tuple(missing)


class CoverageCounter:
    """Counts, after each replayed step, which detectors read it and which skipped it."""

    def __init__(self, detectors: Sequence[Detector]) -> None:
        self._detectors = list(detectors)
        self._run = {d.name: 0 for d in self._detectors}
        self._skipped = {d.name: 0 for d in self._detectors}
        self._names: set[str] = set()
        self._samples = False

    def count(self, statuses: dict[str, str], metric_names: Iterable[str], had_samples: bool) -> None:
        """Record one step: ``statuses`` is the engine's status map right after the step."""
        self._names.update(metric_names)
        self._samples = self._samples or had_samples
        for name in self._run:
            status = statuses.get(name, "")
            if status == "skipped":
                self._skipped[name] += 1
            elif status not in ("error", "waiting", ""):
                self._run[name] += 1

    def result(self, errors: dict[str, str]) -> tuple[DetectorCoverage, ...]:
        return tuple(
            DetectorCoverage(detector=d.name, family=d.family, reads=tuple(d.reads),
                             steps_run=self._run[d.name], steps_skipped=self._skipped[d.name],
                             missing=missing_inputs(d, self._names, self._samples),
                             error=errors.get(d.name, ""))
            for d in sorted(self._detectors, key=lambda d: d.name))


def coverage_line(coverage: Sequence[DetectorCoverage]) -> str:
    """``"12 of 24 detectors ran; 11 skipped; 1 failed"``."""
    ran = sum(c.state == RAN for c in coverage)
    skipped = sum(c.state == SKIPPED for c in coverage)
    failed = sum(c.state == ERROR for c in coverage)
    text = f"{ran} of {len(coverage)} detectors ran; {skipped} skipped"
    return text + (f"; {failed} failed" if failed else "")


def coverage_rows(coverage: Sequence[DetectorCoverage], steps: int) -> list[tuple[str, str, str, str]]:
    """(detector, family, state with steps, inputs the run lacks) per detector, ran first."""
    order = {RAN: 0, ERROR: 1, SKIPPED: 2}
    rows = []
    for c in sorted(coverage, key=lambda c: (order[c.state], c.detector)):
        if c.state == RAN:
            state = f"ran on {c.steps_run}/{steps} steps"
        elif c.state == ERROR:
            state = f"failed: {c.error}"
        else:
            state = "skipped"
        lacks = ", ".join(c.missing) if c.missing else "-"
        if c.state == RAN and c.missing:
            lacks = f"(partial) {lacks}"
        rows.append((c.detector, c.family, state, lacks))
    return rows

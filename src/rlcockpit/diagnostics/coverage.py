"""Detector coverage of a replayed run: which detectors ran, which were skipped, for want of what.

A detector declares the catalog names it ``reads`` (a trailing ``/`` means "any name under") and
whether it reads samples; it returns SKIPPED on a step that lacks them. Over a replay we count, per
detector, the steps it read and the steps it skipped, and name the inputs the whole run lacks. An
imported run whose trainer logs no entropy shows ``entropy: skipped, lacks policy/entropy`` instead
of a silent "no finding". A KL detector on a run without a reference model (TRL GRPO's default
β = 0, verl without a KL term) is neither: it reports ``no reference`` — there is no KL to judge,
and nothing is missing from the log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rlcockpit.diagnostics.base import Detector
from rlcockpit.errors import ConfigError

SAMPLES_INPUT = "samples"
FOREIGN_PREFIX = "import/"  # how the importers store a key no alias table maps
RAN, SKIPPED, ERROR = "ran", "skipped", "error"
NO_REFERENCE_STATUS = "no reference"  # the engine's status of a KL detector on a run without one


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
    steps_no_reference: int = 0

    @property
    def state(self) -> str:
        if self.error:
            return ERROR
        if not self.steps_run and self.steps_no_reference:
            return NO_REFERENCE_STATUS
        return RAN if self.steps_run else SKIPPED

    def to_dict(self) -> dict[str, object]:
        return {"detector": self.detector, "family": self.family, "state": self.state,
                "steps_run": self.steps_run, "steps_skipped": self.steps_skipped,
                "steps_no_reference": self.steps_no_reference,
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
        self._no_reference = {d.name: 0 for d in self._detectors}
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
            elif status == NO_REFERENCE_STATUS:
                self._no_reference[name] += 1
            elif status not in ("error", "waiting", ""):
                self._run[name] += 1

    def result(self, errors: dict[str, str]) -> tuple[DetectorCoverage, ...]:
        return tuple(
            DetectorCoverage(detector=d.name, family=d.family, reads=tuple(d.reads),
                             steps_run=self._run[d.name], steps_skipped=self._skipped[d.name],
                             missing=missing_inputs(d, self._names, self._samples),
                             error=errors.get(d.name, ""), steps_no_reference=self._no_reference[d.name])
            for d in sorted(self._detectors, key=lambda d: d.name))


def coverage_line(coverage: Sequence[DetectorCoverage]) -> str:
    """``"12 of 24 detectors ran; 11 skipped; 1 failed"`` (``; 4 no reference`` on a run without
    a reference model)."""
    ran = sum(c.state == RAN for c in coverage)
    skipped = sum(c.state == SKIPPED for c in coverage)
    failed = sum(c.state == ERROR for c in coverage)
    no_reference = sum(c.state == NO_REFERENCE_STATUS for c in coverage)
    text = f"{ran} of {len(coverage)} detectors ran; {skipped} skipped"
    text += f"; {no_reference} {NO_REFERENCE_STATUS}" if no_reference else ""
    return text + (f"; {failed} failed" if failed else "")


def coverage_rows(coverage: Sequence[DetectorCoverage], steps: int) -> list[tuple[str, str, str, str]]:
    """(detector, family, state with steps, inputs the run lacks) per detector, ran first."""
    order = {RAN: 0, ERROR: 1, NO_REFERENCE_STATUS: 2, SKIPPED: 3}
    rows = []
    for c in sorted(coverage, key=lambda c: (order[c.state], c.detector)):
        if c.state == RAN:
            state = f"ran on {c.steps_run}/{steps} steps"
        elif c.state == ERROR:
            state = f"failed: {c.error}"
        elif c.state == NO_REFERENCE_STATUS:
            state = "no reference (the run has no reference model: kl/coef = 0, no KL logged)"
        else:
            state = "skipped"
        lacks = ", ".join(c.missing) if c.missing else "-"
        if c.state == RAN and c.missing:
            lacks = f"(partial) {lacks}"
        rows.append((c.detector, c.family, state, lacks))
    return rows


@dataclass(frozen=True)
class CarriedInputs:
    """One detector measured against what the log carries. ``carried`` pairs each input the
    detector reads with the logged name that carries it under any trainer's name (the catalog
    name itself, or a foreign ``import/...`` key that some alias table maps to it)."""

    detector: str
    ran: bool
    carried: tuple[tuple[str, str], ...]
    missing: tuple[str, ...]
    able: bool | None = None  # the detector's own test of what it needs (Detector.able); None: any

    @property
    def counted(self) -> bool:
        """The log carries what the detector needs to run (by its own ``able`` test; a detector
        that declares none: any input it reads)."""
        return bool(self.carried) if self.able is None else self.able

    @property
    def should_have_run(self) -> bool:
        """The log carries what the detector needs, yet it never ran."""
        return self.counted and not self.ran

    @property
    def renamed(self) -> tuple[tuple[str, str], ...]:
        """The carried inputs that arrived under a foreign ``import/...`` name (a ``--map`` or an
        alias would bring them to the detector)."""
        return tuple((read, key) for read, key in self.carried if key.startswith(FOREIGN_PREFIX))


@dataclass(frozen=True)
class LoggedCoverage:
    """Every detector against the log: how many could read something, and how many ran."""

    detectors: tuple[CarriedInputs, ...]

    @property
    def carried(self) -> int:
        return sum(d.counted for d in self.detectors)

    @property
    def ran(self) -> int:
        return sum(d.counted and d.ran for d in self.detectors)

    @property
    def missed(self) -> tuple[CarriedInputs, ...]:
        return tuple(d for d in self.detectors if d.should_have_run)

    def line(self) -> str:
        return f"detectors whose inputs the log carries: {self.carried}, ran: {self.ran}"


def _carrier(read: str, carriers: dict[str, str]) -> str | None:
    if read.endswith("/"):
        return next((key for name, key in sorted(carriers.items()) if name.startswith(read)), None)
    return carriers.get(read)


def logged_coverage(coverage: Sequence[DetectorCoverage], logged_keys: Iterable[str],
                    meanings: Callable[[str], Iterable[str]]) -> LoggedCoverage:
    """Measure a replay's detector coverage against what the log carries (pure).

    ``logged_keys`` are the run's metric names as stored (catalog names and ``import/<source>/
    <key>`` names); ``meanings(key)`` gives the catalog names a key means under any trainer's
    alias table — :func:`rlcockpit.integrations.aliases.catalog_meanings` (itself for a catalog
    name, empty for a key no table knows). A detector's metric input is *carried* when some
    logged key means it; a catalog name is preferred over a foreign key as the carrier.
    A registered detector's own :meth:`~rlcockpit.diagnostics.base.Detector.able` says whether
    what is carried is what it needs (its other reads are context); the run's samples count when
    the replay saw any (``samples`` not missing for a detector that reads them).
    """
    carriers: dict[str, str] = {}
    for key in sorted(logged_keys, key=lambda k: (k.startswith(FOREIGN_PREFIX), k)):
        for name in meanings(key):
            carriers.setdefault(name, key)
    from rlcockpit.diagnostics import registry

    names = frozenset(carriers)
    classes = {cov.detector: _registered(registry, cov.detector) for cov in coverage}
    samples = any(SAMPLES_INPUT not in cov.missing for cov in coverage
                  if classes[cov.detector] is not None and classes[cov.detector].reads_samples)
    rows = []
    for cov in coverage:
        carried = tuple((read, key) for read in cov.reads
                        if (key := _carrier(read, carriers)) is not None)
        cls = classes[cov.detector]
        able = cls.able(names, samples) if cls is not None else None
        rows.append(CarriedInputs(detector=cov.detector, ran=cov.state == RAN, carried=carried,
                                  missing=cov.missing, able=able))
    return LoggedCoverage(tuple(rows))


def _registered(registry: Any, name: str) -> Any:
    """The registered detector class of ``name``, or None (a custom detector known only to the
    engine that ran it: then any input it reads counts)."""
    try:
        return registry.get(name)
    except ConfigError:
        return None

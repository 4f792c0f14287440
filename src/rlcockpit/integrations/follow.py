"""Follow mode (``rlcockpit import --follow``): tail what another trainer writes, while it writes,
into a live run — the dashboard, the live stream and the detectors see each step as it lands.

    follower = start_follow(["verl_logs/metrics.jsonl", "rollouts/"], store="sqlite:///runs.db")
    follower.follow(stop_event)      # until stopped, or idle for options.idle_exit_s

Each poll (every ``poll_interval_s``) looks for new files under the followed folders, reads what
each file gained since the last poll (:mod:`.follow_sources`), logs it through the telemetry
``Run`` (whole steps, one writer thread), waits until it is written, then saves the follow state
(run id and, per file, its byte offset) next to the store. A restarted follower loads the state,
resumes the same run and continues at the saved offsets: nothing is read twice except what was
read after the last save, and rewriting that is idempotent (a metric or sample of a step is
replaced, never duplicated).

The diagnostics engine sees a step once it is complete — a newer step was logged, or nothing new
arrived for ``settle_s`` — and its findings go to the run as our trainer's do. On a restart the
engine is warmed up on the steps already stored (their findings are not raised twice).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlcockpit.errors import ConfigError, ImportFormatError
from rlcockpit.integrations.follow_sources import Naming, Numbering, Update, open_source
from rlcockpit.integrations.follow_text import Overlap
from rlcockpit.integrations.importers import (
    FORMATS,
    _is_candidate,
    _natural_key,
    detect_format,
    new_run_id,
)
from rlcockpit.records import SampleRecord

NOT_FOLLOWED = ("deepspeed-chat", "console-table", "nemo-rl-console", "wandb-csv", "trackio")  # import only
TEXT_SNIFF_LIMIT = 1 << 20  # a console log still without a record at this size is not followed

log = logging.getLogger("rlcockpit.integrations.follow")
STATE_VERSION = 1


@dataclass(frozen=True)
class FollowOptions:
    poll_interval_s: float = 0.25  # how often the files are looked at
    idle_exit_s: float | None = None  # stop (run finished) after this long without new records
    settle_s: float = 2.0  # the newest step counts as complete after this long without new records
    diagnostics: bool = True  # run the detectors live on the followed steps

    def __post_init__(self) -> None:
        if not 0.01 <= self.poll_interval_s <= 60:
            raise ConfigError(f"poll interval {self.poll_interval_s!r} s is outside [0.01, 60]",
                              details={"key": "poll_interval_s"})
        if self.idle_exit_s is not None and self.idle_exit_s <= 0:
            raise ConfigError(f"idle exit {self.idle_exit_s!r} s must be positive (leave it out to follow until "
                              "stopped)", details={"key": "idle_exit_s"})


class Follower:
    def __init__(self, roots: Sequence[Path], run: Any, state_path: Path, state: Mapping[str, Any], *,
                 fmt: str | None, naming: Naming, options: FollowOptions, engine: Any = None,
                 observed: int | None = None) -> None:
        self.roots, self.run, self.state_path = list(roots), run, state_path
        self.fmt, self.naming, self.options, self.engine = fmt, naming, options, engine
        self.files: dict[str, Any] = {}  # path -> source
        self.file_states: dict[str, dict[str, Any]] = dict(state.get("files", {}))
        self.ignored: dict[str, str] = dict(state.get("ignored", {}))
        self.numbering = Numbering.from_state(state.get("numbering"))
        self.overlap = Overlap(state.get("overlap"))  # TRL completion tables that repeat rows
        self._undetected: dict[str, int] = {}  # console logs without a record yet -> size when looked at
        self.records = int(state.get("records", 0))
        self.bad = int(state.get("bad", 0))
        self.last_record_at = time.monotonic()
        self._observed = observed if observed is not None else -1  # newest step the engine saw
        self._open: dict[int, tuple[dict[str, float], list[SampleRecord]]] = {}  # for the engine
        self._held: dict[int, list[SampleRecord]] = {}  # samples waiting for their step's metrics
        self._newest = -1  # newest step followed in this process

    # ------------------------------------------------------------------ the loop

    def follow(self, stop: threading.Event | None = None) -> str:
        """Poll until ``stop`` is set ("stopped") or idle for ``idle_exit_s`` ("finished")."""
        stop = stop or threading.Event()
        while not stop.is_set():
            if self._lease_lost():  # another follower took the run over (--force): it follows now
                log.error("follow: run %s is followed by another process now; stopping", self.run.run_id)
                return "stopped"
            if self.poll() == 0:
                idle = time.monotonic() - self.last_record_at
                if self.options.idle_exit_s is not None and idle >= self.options.idle_exit_s:
                    return "finished"
                stop.wait(self.options.poll_interval_s)
        return "stopped"

    def poll(self) -> int:
        """One look at every file; returns the number of new records (metric values and samples)."""
        update = Update()
        for path in self._discover():
            source = self._source(path)
            if source is not None:
                update.merge(source.read())
        update.derive_sequence_kl()
        self.bad += update.bad
        if update.records:
            self.last_record_at = time.monotonic()
        settled = time.monotonic() - self.last_record_at >= self.options.settle_s
        if update.records or (settled and self._held):
            self._log(update, settled)
            self._save()
        elif update.bad:
            self._save()
        self._diagnose(settled)
        return update.records

    def close(self, status: str) -> None:
        self._log(Update(), settled=True)
        self._diagnose(settled=True)
        self._save()
        self.run.close(status)

    # ------------------------------------------------------------------ files

    def _discover(self) -> list[Path]:
        out: list[Path] = []
        for root in self.roots:
            if root.is_dir():
                out += sorted((p for p in root.rglob("*") if p.is_file() and _is_candidate(p)), key=_natural_key)
            elif root.is_file():
                out.append(root)
        return [p for p in out if str(p) not in self.ignored]

    def _source(self, path: Path) -> Any:
        key = str(path)
        if key in self.files:
            return self.files[key]
        state = self.file_states.get(key, {})
        fmt = state.get("format") or self._detect(path)
        if fmt is None:
            return None
        try:
            source = open_source(path, fmt, self.naming, state, self.numbering, self.overlap)
        except ImportFormatError as exc:
            return self._ignore(path, exc.message)
        self.files[key] = source
        return source

    def _detect(self, path: Path) -> str | None:
        """The file's format once its first record is complete; None to look again next poll."""
        if self.fmt is not None and path in self.roots:
            return self.fmt  # named on the command line with --format: taken as it is, like `import`
        if path.suffix not in (".parquet",) and "tfevents" not in path.name and not _has_line(path):
            return None
        try:
            size = path.stat().st_size
        except OSError:  # gone again (a temporary file): nothing to follow
            return None
        if self._undetected.get(str(path)) == size:
            return None  # a console log that has not grown since it was looked at
        try:
            fmt = detect_format(path, self.naming.step_key)
        except ImportFormatError as exc:
            if path.suffix == ".parquet" and time.time() - path.stat().st_mtime < 10:
                return None  # a Parquet file is unreadable until its footer is written
            if path.suffix not in (".jsonl", ".json", ".parquet") and size < TEXT_SNIFF_LIMIT:
                self._undetected[str(path)] = size  # a console log before its first record: look again
                return None
            return self._ignore(path, exc.message)
        if self.fmt is not None and fmt != self.fmt:
            return self._ignore(path, f"is {fmt}, not {self.fmt}")
        if fmt in NOT_FOLLOWED:
            return self._ignore(path, f"is {fmt}, which follow mode does not read (import it when the run ends)")
        return fmt

    def _ignore(self, path: Path, reason: str) -> None:
        self.ignored[str(path)] = reason
        log.warning("follow: not following %s: %s", path, reason)
        return None

    # ------------------------------------------------------------------ into the run

    def _log(self, update: Update, settled: bool) -> None:
        """Log whole steps, so the live stream sends each step with its metrics: a step's samples
        wait for its metrics (verl dumps the rollout before it logs the step), for a newer step, or
        for ``settle_s`` without new records."""
        for step, samples in update.samples.items():
            self._held.setdefault(step, []).extend(samples)
        for step in sorted(update.metrics):
            self._emit(step, update.metrics[step], self._held.pop(step, []))
        self._newest = max([self._newest, *update.metrics, *update.samples])
        for step in sorted(self._held):
            if step < self._newest or settled:
                self._emit(step, {}, self._held.pop(step))

    def _emit(self, step: int, metrics: dict[str, float], samples: list[SampleRecord]) -> None:
        if metrics:
            self.run.log(step, metrics)
        if samples:
            self.run.log_samples(step, samples)
        self.records += len(metrics) + len(samples)
        if self.engine is not None and step > self._observed:
            held = self._open.setdefault(step, ({}, []))
            held[0].update(metrics)
            held[1].extend(samples)

    def _diagnose(self, settled: bool) -> None:
        """Feed the engine every complete step (all but the newest, or all once settled)."""
        if self.engine is None or not self._open:
            return
        newest = max(self._open)
        for step in sorted(self._open):
            if step == newest and not settled:
                break
            metrics, samples = self._open.pop(step)
            try:
                findings = self.engine.observe(step, metrics, samples, time.time())
            except Exception as exc:  # fail soft: following goes on without this step's diagnosis
                log.warning("follow: the detectors failed on step %d: %s", step, exc)
                findings = []
            for f in findings:
                self.run.finding(step=f.step, detector=f.detector, severity=f.severity, message=f.message,
                                 evidence=f.evidence, patterns=f.patterns, status=f.status, incident=f.incident)
            self._observed = step

    def _save(self) -> None:
        """Save the offsets once what they cover is written. Not while samples wait for their
        step (the offsets are past them), and a write timeout keeps the older state: re-reading
        after a restart rewrites the same records, it never duplicates them."""
        if self._held or self._lease_lost():  # what was read is not written: keep the older state
            return
        if not self.run.flush(timeout=30.0):
            log.warning("follow: the store did not confirm the write within 30 s; state not advanced")
            return
        for key, source in self.files.items():
            self.file_states[key] = source.state()
        state = {"version": STATE_VERSION, "run_id": self.run.run_id, "roots": [str(r) for r in self.roots],
                 "files": self.file_states, "ignored": self.ignored, "numbering": self.numbering.state(),
                 "overlap": self.overlap.state(),
                 "records": self.records, "bad": self.bad, "observed": self._observed, "saved_at": time.time()}
        save_state(self.state_path, state)


    def _lease_lost(self) -> bool:
        lease = getattr(self.run, "lease", None)
        return lease is not None and lease.lost


def _has_line(path: Path) -> bool:
    """The file's first line is complete (its newline is written) or the file is one JSON value."""
    try:
        with path.open("rb") as handle:
            head = handle.read(1 << 16)
    except OSError:
        return False
    if b"\n" in head.lstrip(b"\n"):
        return True
    try:
        json.loads(head)
    except (ValueError, UnicodeDecodeError):
        return False
    return bool(head.strip())


# ---------------------------------------------------------------------- state


def default_state_path(store: Any, roots: Sequence[Path], fmt: str | None) -> Path:
    """``<store file>.follow/<hash of the followed paths>.json``: one state per set of paths."""
    where = getattr(store, "path", None)
    if where is None:
        raise ConfigError("this store has no file to keep the follow state next to; pass --state FILE",
                          details={"key": "state"})
    digest = hashlib.sha1(json.dumps([sorted(str(r) for r in roots), fmt]).encode()).hexdigest()[:12]
    return Path(f"{where}.follow") / f"{digest}.json"


def load_state(path: Path) -> dict[str, Any] | None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigError(f"follow state {path} cannot be read ({exc}); delete it to start a new run, or "
                          "pass --state with another file", details={"key": "state"}) from exc
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION or "run_id" not in state:
        raise ConfigError(f"follow state {path} is not a follow state of this rlcockpit version; delete it to "
                          "start a new run", details={"key": "state"})
    return state


def save_state(path: Path, state: Mapping[str, Any]) -> None:
    """Atomically (write a temporary file, then rename): a kill never leaves half a state."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(state, ensure_ascii=False, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------- start


def start_follow(paths: Sequence[str | Path], *, store: str, fmt: str | None = None, source: str | None = None,
                 key_map: Mapping[str, str] | None = None, step_key: str | None = None,
                 project: str = "imported", name: str | None = None, run_id: str | None = None,
                 state_path: str | Path | None = None, options: FollowOptions | None = None,
                 diagnostics: Any = None, force: bool = False) -> Follower:
    """Check the paths, open (or resume) the run, warm up the engine; fail fast with the fix.
    ``diagnostics``: a DiagnosticsConfig (default: the defaults) when ``options.diagnostics``.
    A run another live follower writes is refused (RunLeasedError) unless ``force``."""
    from rlcockpit.integrations.aliases import SOURCES
    from rlcockpit.integrations.keymap import check_key_map
    from rlcockpit.store import open_store
    from rlcockpit.telemetry import LeaseOptions, init

    options = options or FollowOptions()
    if fmt is not None and fmt not in FORMATS:
        raise ConfigError(f"unknown import format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if source is not None and source not in SOURCES:
        raise ConfigError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}")
    roots = [Path(p).resolve() for p in paths]
    missing = [str(r) for r in roots if not r.exists()]
    if missing:
        raise ConfigError(f"cannot follow {', '.join(missing)}: no such file or folder; create the folder the "
                          "trainer will write into (or start following once it has begun)",
                          details={"paths": missing})
    opened = open_store(store)
    state_file = Path(state_path) if state_path else default_state_path(opened, roots, fmt)
    state = load_state(state_file)
    naming = Naming(source=source, key_map=check_key_map(key_map or {}), step_key=step_key)
    if state is not None:
        run = init(project=project, store=opened, run_id=state["run_id"], resume=True,
                   lease=LeaseOptions(kind="follower"), force=force)
        print(f"following again into run {run.run_id} (state {state_file})", flush=True)
    else:
        run = init(project=project, name=name or roots[0].name, store=opened, run_id=run_id or new_run_id(),
                   config={"follow": {"paths": [str(r) for r in roots], "format": fmt, "source": source,
                                      "key_map": dict(naming.key_map), "step_key": step_key,
                                      "state": str(state_file)}}, lease=LeaseOptions(kind="follower"))
        state = {"run_id": run.run_id}
        save_state(state_file, {"version": STATE_VERSION, **state})
    engine, observed = _engine(opened, run.run_id, options, diagnostics)
    return Follower(roots, run, state_file, state, fmt=fmt, naming=naming, options=options, engine=engine,
                    observed=observed)


def _engine(opened: Any, run_id: str, options: FollowOptions, config: Any) -> tuple[Any, int | None]:
    """The detectors, warmed up on what the store already holds of the run (findings discarded:
    they were recorded when those steps were followed)."""
    if not options.diagnostics:
        return None, None
    from rlcockpit.diagnostics import DiagnosticsConfig, Engine
    from rlcockpit.diagnostics.offline import iter_steps

    engine = Engine.from_config(config or DiagnosticsConfig())
    observed = None
    reader = opened.reader()
    try:
        for step, metrics, samples, wall in iter_steps(reader, run_id, with_samples=True):
            engine.observe(step, metrics, samples, wall)
            observed = step
    finally:
        reader.close()
    return engine, observed

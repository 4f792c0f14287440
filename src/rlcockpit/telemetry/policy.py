"""Telemetry settings: the token-array payload policy and the writer's batching options.

The payload tiers follow seed 002 §2.1 (real-time every step, medium-term, long-term): metrics and
samples (text + scalar fields) are always kept; the bulky per-token arrays (tokens, logprobs,
ref_logprobs, token_kl) are kept for every sample of the most recent ``recent_steps`` steps and,
after that, for a fixed seeded subset of ``subset_per_step`` samples per step.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from rlcockpit.config import Config, option


@dataclass(frozen=True)
class TokenArrayPolicy(Config):
    """Which samples keep their per-token arrays in the store (docs/telemetry.md)."""

    recent_steps: int = option(
        20, range=(0, None),
        help="Every sample of the most recent K steps keeps its per-token arrays. When step S is "
             "written, samples of steps <= S-K are thinned to the seeded subset.")
    subset_per_step: int = option(
        4, range=(0, None),
        help="After thinning, this many samples per step keep their arrays, chosen by a hash of "
             "(seed, step, sample_id); 0 keeps none.")
    seed: int = option(0, help="Seed of the subset choice; same seed, same subset.")

    def kept_subset(self, step: int, sample_ids: Iterable[int]) -> frozenset[int]:
        """The sample ids of ``step`` that keep their arrays once the step is older than K."""
        ranked = sorted(set(int(i) for i in sample_ids), key=lambda i: self._rank(step, i))
        return frozenset(ranked[: self.subset_per_step])

    def keeps_arrays(self, step: int, sample_id: int, sample_ids: Iterable[int],
                     latest_step: int) -> bool:
        """Whether sample ``sample_id`` of ``step`` has arrays once ``latest_step`` is written."""
        if step > latest_step - self.recent_steps:
            return True
        return sample_id in self.kept_subset(step, sample_ids)

    def _rank(self, step: int, sample_id: int) -> bytes:
        # blake2b, not hash(): the subset must be the same in every process and Python version
        return hashlib.blake2b(f"{self.seed}:{step}:{sample_id}".encode(), digest_size=8).digest()


@dataclass(frozen=True)
class WriterOptions(Config):
    """How the background writer batches, retries and reports (docs/telemetry.md)."""

    queue_size: int = option(
        4096, range=(1, 10_000_000),
        help="Capacity of the queue between the training thread and the writer thread, in calls "
             "(one log / log_samples / event call is one item). When full, new items are dropped "
             "and counted; the training thread never waits.")
    flush_every: int = option(
        2000, range=(1, 10_000_000),
        help="Write as soon as this many records (metric values, samples, histograms, events...) "
             "of complete steps are waiting.")
    flush_interval_s: float = option(
        1.0, range=(0.01, 60.0),
        help="Write waiting records at least this often; an open step that has seen no new "
             "record for this long is treated as complete. Bounds what a crash can lose.")
    heartbeat_interval_s: float = option(
        5.0, range=(0.1, 3600.0),
        help="Refresh the run's heartbeat at least this often while idle.")
    write_retries: int = option(
        2, range=(0, 100),
        help="Retries of a failed write (e.g. the database stayed locked) before its records are "
             "dropped and counted.")
    retry_backoff_s: float = option(
        0.2, range=(0.0, 60.0), help="Pause before the first retry; doubles on each retry.")
    close_timeout_s: float = option(
        30.0, range=(0.0, 3600.0),
        help="close() waits at most this long for the writer thread to drain the queue.")
    warn_interval_s: float = option(
        10.0, range=(0.0, 3600.0),
        help="At most one warning per problem kind (queue full, write failed...) per interval.")
    spool_dir: str = option(
        "",
        help="Directory of the local spool that keeps whole steps while the store cannot be "
             "written (disk full, I/O error, corruption, a ClickHouse outage); one file per run, "
             "<run_id>.spool. Empty: beside the store (runs.db -> runs.db-spool/, a chDB "
             "directory DIR -> DIR-spool/, a ClickHouse server -> ~/.cache/rlcockpit/spool/...).")
    spool_max_mb: float = option(
        256.0, range=(0.0, 1_000_000.0),
        help="Largest size of a run's spool file in MiB; a batch that does not fit is dropped, "
             "counted (spool_full) and its steps named in a telemetry_lost event. 0: no spool "
             "(a write that still fails after the retries is dropped, write_error).")
    spool_retry_s: float = option(
        2.0, range=(0.01, 3600.0),
        help="While steps wait in the spool, ask the store this often whether it takes writes "
             "again (the spool is replayed, in order, at the first write it takes).")

"""The SQLite schema as an ordered list of forward migrations (DESIGN.md §5).

``MIGRATIONS[i]`` upgrades a file from schema version ``i`` to ``i + 1``. Opening an older file
runs the missing migrations in one write transaction each; a file written by newer code (a version
above ``SCHEMA_VERSION``) is refused. Adding tables later (tickets, audit) is one more function
appended to the list — never edit a migration that has shipped.

Layout choices (see docs/store.md):
- runs get an integer ``run_key``; every data row carries it (a run id on every row, 8 bytes).
- metric and histogram names are interned in ``names``; ``run_names`` lists which names a run has.
- ``metrics`` and ``histograms`` are WITHOUT ROWID tables clustered by (run, name, step), so one
  curve is one contiguous range scan. NULL in ``metrics.value`` means NaN (SQLite turns NaN into
  NULL; the writer never stores a missing value, so the mapping is exact).
- samples are split: ``samples`` holds the narrow, filterable columns (clustered by run, step,
  sample id, plus indices); ``sample_payloads`` holds prompt, response, components and the
  per-token blobs under an integer ``payload_id`` (appended in order, one b-tree, no extra
  index), read only for the page being shown.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

Migration = Callable[[sqlite3.Connection], None]


def _v1_core(conn: sqlite3.Connection) -> None:
    """Core tables: runs, names, steps, metrics, histograms, samples, events, findings,
    snapshots, phases, checkpoints."""
    _run_script(conn, """
    CREATE TABLE runs (
        run_key INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL UNIQUE,
        project TEXT NOT NULL,
        name TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        ended_at REAL,
        config TEXT NOT NULL DEFAULT '{}',
        last_step INTEGER,
        heartbeat_at REAL
    );
    CREATE TABLE names (name_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
    CREATE TABLE run_names (
        run_key INTEGER NOT NULL, kind TEXT NOT NULL, name_id INTEGER NOT NULL,
        PRIMARY KEY (run_key, kind, name_id)
    ) WITHOUT ROWID;
    CREATE TABLE steps (
        run_key INTEGER NOT NULL, step INTEGER NOT NULL, wall_time REAL NOT NULL,
        PRIMARY KEY (run_key, step)
    ) WITHOUT ROWID;
    CREATE TABLE metrics (
        run_key INTEGER NOT NULL, name_id INTEGER NOT NULL, step INTEGER NOT NULL,
        value REAL, wall_time REAL NOT NULL,
        PRIMARY KEY (run_key, name_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE histograms (
        run_key INTEGER NOT NULL, name_id INTEGER NOT NULL, step INTEGER NOT NULL,
        wall_time REAL NOT NULL, edges BLOB NOT NULL, counts BLOB NOT NULL,
        PRIMARY KEY (run_key, name_id, step)
    ) WITHOUT ROWID;
    CREATE TABLE samples (
        run_key INTEGER NOT NULL, step INTEGER NOT NULL, sample_id INTEGER NOT NULL,
        category TEXT NOT NULL, reward REAL, prompt_id TEXT NOT NULL, group_id INTEGER NOT NULL,
        has_token_arrays INTEGER NOT NULL, flags TEXT NOT NULL, length INTEGER NOT NULL,
        truncated INTEGER NOT NULL, uncertainty REAL, advantage REAL, value REAL,
        kl_sum REAL, kl_max REAL, nan_fields TEXT, wall_time REAL NOT NULL,
        payload_id INTEGER NOT NULL,
        PRIMARY KEY (run_key, step, sample_id)
    ) WITHOUT ROWID;
    CREATE TABLE sample_payloads (
        payload_id INTEGER PRIMARY KEY,
        prompt TEXT NOT NULL, response TEXT NOT NULL, components TEXT NOT NULL,
        tokens BLOB, logprobs BLOB, ref_logprobs BLOB, token_kl BLOB
    );
    CREATE TABLE sample_flags (
        run_key INTEGER NOT NULL, flag TEXT NOT NULL, step INTEGER NOT NULL,
        sample_id INTEGER NOT NULL,
        PRIMARY KEY (run_key, flag, step, sample_id)
    ) WITHOUT ROWID;
    CREATE TABLE events (
        event_id INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, step INTEGER NOT NULL,
        kind TEXT NOT NULL, payload TEXT NOT NULL, wall_time REAL NOT NULL
    );
    CREATE TABLE findings (
        finding_id INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, step INTEGER NOT NULL,
        detector TEXT NOT NULL, severity TEXT NOT NULL, message TEXT NOT NULL,
        evidence TEXT NOT NULL, patterns TEXT NOT NULL, status TEXT NOT NULL,
        wall_time REAL NOT NULL
    );
    CREATE TABLE snapshots (
        snapshot_id INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, step INTEGER NOT NULL,
        finding_id INTEGER, kind TEXT NOT NULL, payload TEXT NOT NULL, data BLOB,
        wall_time REAL NOT NULL
    );
    CREATE TABLE phases (
        phase_id INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, step INTEGER NOT NULL,
        phase TEXT NOT NULL, status TEXT NOT NULL, duration_s REAL, progress REAL,
        wall_time REAL NOT NULL
    );
    CREATE TABLE checkpoints (
        checkpoint_id INTEGER PRIMARY KEY, run_key INTEGER NOT NULL, step INTEGER NOT NULL,
        path TEXT NOT NULL, reason TEXT NOT NULL, wall_time REAL NOT NULL
    );
    """)


def _v2_query_indices(conn: sqlite3.Connection) -> None:
    """Indices for the reader's queries: the sample explorer filters (category + reward range,
    reward order and the reward histogram), per-run event / finding / phase / checkpoint lists, snapshots by
    finding. Secondary indices of a WITHOUT ROWID table carry its primary key (run, step, sample
    id), so step filters and stable tie-breaking are answered inside the index."""
    _run_script(conn, """
    CREATE INDEX samples_by_category_reward ON samples (run_key, category, reward);
    CREATE INDEX samples_by_reward ON samples (run_key, reward);
    CREATE INDEX events_by_run_step ON events (run_key, step);
    CREATE INDEX events_by_run_kind ON events (run_key, kind, step);
    CREATE INDEX findings_by_run_step ON findings (run_key, step);
    CREATE INDEX snapshots_by_run_step ON snapshots (run_key, step);
    CREATE INDEX phases_by_run_step ON phases (run_key, step);
    CREATE INDEX checkpoints_by_run_step ON checkpoints (run_key, step);
    CREATE INDEX runs_by_started ON runs (started_at);
    """)


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    # executescript() would COMMIT the migration's transaction first; run statement by statement.
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def _v3_metric_rollups(conn: sqlite3.Connection) -> None:
    """Per-metric extremes of every 64- and 4096-step block (store/rollups.py), so a downsampled
    curve reads a few thousand rows instead of scanning the whole metric. Built for the metrics
    already in the file."""
    from rlcockpit.store import rollups

    _run_script(conn, """
    CREATE TABLE metric_rollups (
        run_key INTEGER NOT NULL, name_id INTEGER NOT NULL, size INTEGER NOT NULL,
        bucket INTEGER NOT NULL,
        min_step INTEGER, min_value REAL, min_wall REAL,
        max_step INTEGER, max_value REAL, max_wall REAL,
        nan_step INTEGER, nan_wall REAL,
        PRIMARY KEY (run_key, name_id, size, bucket)
    ) WITHOUT ROWID
    """)
    rollups.backfill(conn)


def _v4_incidents(conn: sqlite3.Connection) -> None:
    """Findings and snapshots carry the diagnostics engine's incident id (DESIGN.md §6)."""
    _run_script(conn, """
    ALTER TABLE findings ADD COLUMN incident TEXT NOT NULL DEFAULT '';
    ALTER TABLE snapshots ADD COLUMN incident TEXT NOT NULL DEFAULT '';
    CREATE INDEX findings_by_run_incident ON findings (run_key, incident)
    """)


def _v5_control(conn: sqlite3.Connection) -> None:
    """The control plane (DESIGN.md §7): users (salted token hashes), the live parameters each
    trainer publishes, tickets, and the hash-chained audit log. ``audit`` uses AUTOINCREMENT so
    ``sqlite_sequence`` remembers the highest entry ever written (a removed tail is detected)."""
    _run_script(conn, """
    CREATE TABLE users (
        user_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, role TEXT NOT NULL,
        key_id TEXT NOT NULL UNIQUE, salt TEXT NOT NULL, token_hash TEXT NOT NULL,
        created_at REAL NOT NULL, created_by TEXT NOT NULL, revoked_at REAL
    );
    CREATE TABLE live_params (
        run_key INTEGER NOT NULL, version INTEGER NOT NULL, step INTEGER NOT NULL,
        source TEXT NOT NULL, params TEXT NOT NULL, specs TEXT NOT NULL, wall_time REAL NOT NULL,
        PRIMARY KEY (run_key, version)
    ) WITHOUT ROWID;
    CREATE TABLE tickets (
        ticket_id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, kind TEXT NOT NULL,
        target TEXT NOT NULL, value TEXT NOT NULL, previous TEXT, reason TEXT NOT NULL,
        requested_by TEXT NOT NULL, requested_at REAL NOT NULL, status TEXT NOT NULL,
        decided_by TEXT, decided_at REAL, comment TEXT, boundary_step INTEGER,
        applied_step INTEGER, checkpoint TEXT, applied_at REAL, effect TEXT,
        evaluated_at REAL, error TEXT, rolled_back_by INTEGER, updated_at REAL NOT NULL
    );
    CREATE INDEX tickets_by_run_status ON tickets (run_id, status);
    CREATE TABLE audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,
        action TEXT NOT NULL, outcome TEXT NOT NULL, run_id TEXT, ticket_id INTEGER,
        details TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL
    );
    CREATE INDEX audit_by_run ON audit (run_id, seq)
    """)


def _v6_layouts(conn: sqlite3.Connection) -> None:
    """Saved dashboard layouts, one JSON document per project (store/layouts.py, docs/ui.md)."""
    _run_script(conn, """
    CREATE TABLE layouts (
        project TEXT PRIMARY KEY, layout TEXT NOT NULL, updated_at REAL NOT NULL,
        updated_by TEXT NOT NULL
    )
    """)


def _v7_run_leases(conn: sqlite3.Connection) -> None:
    """Who writes each run: its lease (holder kind, host, pid and token, when taken, when renewed,
    when it expires); one row per leased run, deleted when released (store/sqlite_lease.py)."""
    _run_script(conn, """
    CREATE TABLE run_leases (
        run_key INTEGER PRIMARY KEY, token TEXT NOT NULL, kind TEXT NOT NULL, host TEXT NOT NULL,
        pid INTEGER NOT NULL, taken_at REAL NOT NULL, renewed_at REAL NOT NULL,
        expires_at REAL NOT NULL
    )
    """)


def _v8_sessions(conn: sqlite3.Connection) -> None:
    """Sign-in codes (one use, minutes) and the expiring sessions they are exchanged for
    (store/sessions.py, docs/control.md); salted hashes only, as for users' tokens."""
    _run_script(conn, """
    CREATE TABLE sessions (
        session_id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, kind TEXT NOT NULL,
        key_id TEXT NOT NULL UNIQUE, salt TEXT NOT NULL, token_hash TEXT NOT NULL,
        created_at REAL NOT NULL, expires_at REAL NOT NULL, created_by TEXT NOT NULL,
        used_at REAL, revoked_at REAL
    );
    CREATE INDEX sessions_by_user ON sessions (user_id)
    """)


MIGRATIONS: tuple[Migration, ...] = (_v1_core, _v2_query_indices, _v3_metric_rollups,
                                     _v4_incidents, _v5_control, _v6_layouts, _v7_run_leases,
                                     _v8_sessions)
SCHEMA_VERSION = len(MIGRATIONS)


def current_version(conn: sqlite3.Connection) -> int:
    """Schema version of an open database: 0 for an empty file."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has_table:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def user_tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'").fetchall()
    return [r[0] for r in rows]


def migrate(conn: sqlite3.Connection, target: int = SCHEMA_VERSION) -> int:
    """Apply the missing migrations up to ``target``, each in its own write transaction.

    The version is re-read inside the transaction, so two processes opening a fresh file at once
    do not both migrate. Returns the version reached. The caller checks for "newer than code".
    """
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _ensure_version_table(conn)
            if version >= target:
                conn.execute("COMMIT")
                return version
            MIGRATIONS[version](conn)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)",
                         (version + 1, time.time()))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _ensure_version_table(conn: sqlite3.Connection) -> int:
    version = current_version(conn)
    if version == 0:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version "
                     "(version INTEGER NOT NULL, applied_at REAL NOT NULL)")
    return version

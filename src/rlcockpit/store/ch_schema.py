"""The ClickHouse schema (``clickhouse://`` and ``chdb://``) as ordered, versioned migrations.

``MIGRATIONS[i]`` upgrades a database from version ``i`` to ``i + 1``; ``schema_version`` records
each one applied. Every statement is idempotent (``IF NOT EXISTS``), so two processes opening a
fresh database at once both succeed. A database written by newer code is refused. Never edit a
migration that has shipped; append one.

Layout (docs/store.md, "ClickHouse"):
- data tables are MergeTree ordered by run first: ``metrics`` by (run, name, step) so one curve is
  one contiguous range, ``samples`` by (run, step, sample id); names, categories, kinds and
  severities are ``LowCardinality``; steps and times are delta-coded, texts and token arrays ZSTD.
- rows are appended; a step written again (a resumed run) is replaced by a lightweight ``DELETE``
  of the old keys before the insert. Reads never need ``FINAL``.
- run state that changes (status, heartbeat, last step) lives in small ReplacingMergeTree tables,
  one heartbeat row per writer, read with ``argMax`` (the newest write wins; last step = max).
- every table keeps a deduplication window, so a retried insert with the same token is not
  written twice (a writer's retry after a timeout cannot duplicate a step).
- per-token arrays hold the same compact blobs as SQLite (store/codec.py), so copies between the
  backends are byte-exact; ``token_arrays_ttl_days`` adds a column TTL that drops old ones.
"""

from __future__ import annotations

import time

from rlcockpit.errors import StoreError

_DEDUP = "SETTINGS non_replicated_deduplication_window = 1000"
_RUN = "run_id LowCardinality(String)"
_STEP = "step Int64 CODEC(Delta, ZSTD(1))"
_WALL = "wall_time Float64 CODEC(Delta, ZSTD(1))"

V1_CORE = (
    "CREATE TABLE IF NOT EXISTS {db}.runs (run_id String, project String, name String, "
    "started_at Float64, config String CODEC(ZSTD(3)), created_ns UInt64) "
    f"ENGINE = MergeTree ORDER BY (run_id, created_ns) {_DEDUP}",
    "CREATE TABLE IF NOT EXISTS {db}.run_status (run_id String, written_ns UInt64, "
    "status LowCardinality(String), ended_at Nullable(Float64)) "
    f"ENGINE = ReplacingMergeTree(written_ns) ORDER BY run_id {_DEDUP}",
    "CREATE TABLE IF NOT EXISTS {db}.run_heartbeats (run_id String, writer String, "
    "written_ns UInt64, heartbeat_at Float64, last_step Nullable(Int64)) "
    f"ENGINE = ReplacingMergeTree(written_ns) ORDER BY (run_id, writer) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.run_names ({_RUN}, kind LowCardinality(String), "
    f"name String) ENGINE = ReplacingMergeTree ORDER BY (run_id, kind, name) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.steps ({_RUN}, {_STEP}, {_WALL}) "
    f"ENGINE = ReplacingMergeTree ORDER BY (run_id, step) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.metrics ({_RUN}, name LowCardinality(String), {_STEP}, "
    f"value Float64 CODEC(Gorilla, ZSTD(1)), {_WALL}) "
    f"ENGINE = MergeTree ORDER BY (run_id, name, step) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.histograms ({_RUN}, name LowCardinality(String), "
    f"{_STEP}, {_WALL}, edges Array(Float64) CODEC(ZSTD(3)), counts Array(Int64) CODEC(ZSTD(3))) "
    f"ENGINE = MergeTree ORDER BY (run_id, name, step) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.samples ({_RUN}, {_STEP}, sample_id Int64, "
    "category LowCardinality(String), reward Float64, prompt_id String, group_id Int64, "
    "has_token_arrays UInt8, flags Array(LowCardinality(String)), length Int64, truncated UInt8, "
    "uncertainty Nullable(Float64), advantage Nullable(Float64), value Nullable(Float64), "
    f"kl_sum Nullable(Float64), kl_max Nullable(Float64), {_WALL}, "
    "prompt String CODEC(ZSTD(1)), response String CODEC(ZSTD(1)), "
    "components String CODEC(ZSTD(3)), tokens Nullable(String) CODEC(ZSTD(3)), "
    "logprobs Nullable(String) CODEC(ZSTD(3)), ref_logprobs Nullable(String) CODEC(ZSTD(3)), "
    "token_kl Nullable(String) CODEC(ZSTD(3))) "
    f"ENGINE = MergeTree ORDER BY (run_id, step, sample_id) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.events ({_RUN}, event_id Int64, {_STEP}, "
    f"kind LowCardinality(String), payload String CODEC(ZSTD(3)), {_WALL}) "
    f"ENGINE = MergeTree ORDER BY (run_id, step, event_id) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.findings ({_RUN}, finding_id Int64, {_STEP}, "
    "detector LowCardinality(String), severity LowCardinality(String), message String, "
    "evidence String CODEC(ZSTD(3)), patterns String, status LowCardinality(String), "
    f"{_WALL}, incident String) ENGINE = MergeTree ORDER BY (run_id, step, finding_id) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.snapshots ({_RUN}, snapshot_id Int64, {_STEP}, "
    f"kind LowCardinality(String), payload String CODEC(ZSTD(3)), {_WALL}, incident String) "
    f"ENGINE = MergeTree ORDER BY (run_id, step, snapshot_id) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.phases ({_RUN}, phase_id Int64, {_STEP}, "
    "phase LowCardinality(String), status LowCardinality(String), duration_s Nullable(Float64), "
    f"progress Nullable(Float64), {_WALL}) "
    f"ENGINE = MergeTree ORDER BY (run_id, step, phase_id) {_DEDUP}",
    f"CREATE TABLE IF NOT EXISTS {{db}}.checkpoints ({_RUN}, checkpoint_id Int64, {_STEP}, "
    f"path String, reason LowCardinality(String), {_WALL}) "
    f"ENGINE = MergeTree ORDER BY (run_id, step, checkpoint_id) {_DEDUP}",
)

# skip indices for the sample explorer's filters that are not a prefix of the ordering key
V2_SAMPLE_INDICES = (
    "ALTER TABLE {db}.samples ADD INDEX IF NOT EXISTS samples_reward reward "
    "TYPE minmax GRANULARITY 1",
    "ALTER TABLE {db}.samples ADD INDEX IF NOT EXISTS samples_category category "
    "TYPE set(256) GRANULARITY 1",
    "ALTER TABLE {db}.samples ADD INDEX IF NOT EXISTS samples_prompt_id prompt_id "
    "TYPE bloom_filter GRANULARITY 1",
)

# per-metric extremes of every 64- and 4096-step block (store/rollups.py, as in SQLite): a
# downsampled curve over 1M steps reads ~2k small rows instead of 1M. The writer appends one
# partial row per (block, batch); readers fold them. Built here for the metrics already stored.
_OK = "NOT isNaN(value)"
V3_METRIC_ROLLUPS = (
    f"CREATE TABLE IF NOT EXISTS {{db}}.metric_rollups ({_RUN}, name LowCardinality(String), "
    "size UInt32, bucket Int64, min_step Nullable(Int64), min_value Nullable(Float64), "
    "min_wall Nullable(Float64), max_step Nullable(Int64), max_value Nullable(Float64), "
    "max_wall Nullable(Float64), nan_step Nullable(Int64), nan_wall Nullable(Float64)) "
    f"ENGINE = MergeTree ORDER BY (run_id, name, size, bucket) {_DEDUP}",
    "INSERT INTO {db}.metric_rollups SELECT run_id, name, size, intDiv(step, size) AS bucket, "
    f"if(countIf({_OK}) > 0, argMinIf(step, value, {_OK}), NULL), "
    f"if(countIf({_OK}) > 0, minIf(value, {_OK}), NULL), "
    f"if(countIf({_OK}) > 0, argMinIf(wall_time, value, {_OK}), NULL), "
    f"if(countIf({_OK}) > 0, argMaxIf(step, value, {_OK}), NULL), "
    f"if(countIf({_OK}) > 0, maxIf(value, {_OK}), NULL), "
    f"if(countIf({_OK}) > 0, argMaxIf(wall_time, value, {_OK}), NULL), "
    "if(countIf(isNaN(value)) > 0, minIf(step, isNaN(value)), NULL), "
    "if(countIf(isNaN(value)) > 0, argMinIf(wall_time, step, isNaN(value)), NULL) "
    "FROM {db}.metrics ARRAY JOIN [64, 4096] AS size "
    "WHERE (SELECT count() FROM {db}.metric_rollups) = 0 "
    "GROUP BY run_id, name, size, bucket",
)

# saved dashboard layouts, one JSON document per project (store/layouts.py): every save is a row,
# the newest wins (argMax); no deduplication window, so saving the same layout twice is kept
V4_LAYOUTS = (
    "CREATE TABLE IF NOT EXISTS {db}.layouts (project String, layout String CODEC(ZSTD(3)), "
    "updated_at Float64, updated_by String) ENGINE = ReplacingMergeTree(updated_at) "
    "ORDER BY project",
)

# the sample numbers the explorer filters and bins, stored uncompressed: a float reward barely
# compresses (LZ4 kept 95 % of 10M random rewards) and decompressing it was most of a scan (sum of
# 10M rewards 59 -> 23 ms, a filtered page's total 81 -> 58 ms on chDB). Existing parts keep their
# codec until ClickHouse merges them; nothing is rewritten now.
V5_SAMPLE_NUMBER_CODECS = tuple(
    f"ALTER TABLE {{db}}.samples MODIFY COLUMN {column} {kind} CODEC(NONE)"
    for column, kind in (("reward", "Float64"), ("advantage", "Nullable(Float64)"),
                         ("value", "Nullable(Float64)"), ("kl_sum", "Nullable(Float64)"),
                         ("kl_max", "Nullable(Float64)"), ("uncertainty", "Nullable(Float64)")))

# who writes each run (store/ch_lease.py): a row per taking of a lease and per renewal or release
# of it; the newest taking's newest row is the lease (argMax by (taken_ns, written_ns))
V6_RUN_LEASES = (
    "CREATE TABLE IF NOT EXISTS {db}.run_leases (run_id String, taken_ns UInt64, written_ns UInt64, "
    "token String, kind LowCardinality(String), host String, pid Int64, taken_at Float64, "
    "renewed_at Float64, expires_at Float64, released UInt8) "
    "ENGINE = ReplacingMergeTree(written_ns) ORDER BY (run_id, taken_ns)",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (V1_CORE, V2_SAMPLE_INDICES, V3_METRIC_ROLLUPS,
                                           V4_LAYOUTS, V5_SAMPLE_NUMBER_CODECS, V6_RUN_LEASES)
SCHEMA_VERSION = len(MIGRATIONS)
TOKEN_ARRAY_COLUMNS = ("tokens", "logprobs", "ref_logprobs", "token_kl")


def current_version(transport) -> int:
    """0 for a database without rlcockpit tables; raises StoreError for a foreign database."""
    db = transport.database
    tables = {r[0] for r in transport.query(
        f"SELECT name FROM system.tables WHERE database = '{db}'")}
    if "schema_version" not in tables:
        if tables:
            raise StoreError(
                f"database {db!r} is not an rlcockpit store (it has tables "
                f"{', '.join(sorted(tables)[:5])} and no schema_version); choose another database",
                details={"database": db})
        return 0
    found = transport.query(f"SELECT max(version) FROM {db}.schema_version")
    return int(found[0][0] or 0) if found else 0


def migrate(transport) -> int:
    """Create the database if needed and apply the missing migrations; the version reached."""
    db = transport.database
    transport.command(f"CREATE DATABASE IF NOT EXISTS {db}")
    version = current_version(transport)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"database {db!r} has store schema version {version}, newer than this rlcockpit "
            f"understands ({SCHEMA_VERSION}); upgrade rlcockpit to read it",
            details={"database": db, "version": version, "supported": SCHEMA_VERSION})
    transport.command(f"CREATE TABLE IF NOT EXISTS {db}.schema_version (version UInt32, "
                      "applied_at Float64) ENGINE = MergeTree ORDER BY version")
    while version < SCHEMA_VERSION:
        for statement in MIGRATIONS[version]:
            transport.command(statement.format(db=db))
        version += 1
        transport.command(f"INSERT INTO {db}.schema_version VALUES ({version}, {time.time()!r})")
    return version


def set_token_array_ttl(transport, days: float) -> None:
    """Per-token arrays older than ``days`` (by the sample's wall time) are dropped by ClickHouse
    when it merges parts; the rest of the sample stays. 0 removes the TTL."""
    db = transport.database
    for column in TOKEN_ARRAY_COLUMNS:
        if days > 0:
            seconds = int(days * 86400)
            transport.command(f"ALTER TABLE {db}.samples MODIFY COLUMN {column} "
                              f"TTL toDateTime(wall_time) + INTERVAL {seconds} SECOND")
        else:
            transport.command(f"ALTER TABLE {db}.samples MODIFY COLUMN {column} REMOVE TTL")

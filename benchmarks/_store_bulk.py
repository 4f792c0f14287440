"""Bulk build of the store benchmark's fixture (``store_queries.py --bulk``): the rows are made by
SQL inside the engine (chDB or SQLite) instead of Python records sent through ``write_batch``.

Why: the writer path builds ~1,000 steps/s, so the issue's target size (1M steps x 60 metrics,
10M samples) would take most of an hour per backend. Here the run is created, heartbeated and
finished through the store's writer (so ``runs`` / ``run_status`` / ``run_heartbeats`` rows are
the writer's own), and only the data tables are filled by ``INSERT ... SELECT`` statements, one
chunk of ``CHUNK_STEPS`` steps at a time (whole 4096-step rollup blocks, so a progress bar can
advance and each chunk's rollups are complete).

What each backend gets, matching what the writer would have written:
- ``metrics`` (one row per step and metric), ``steps`` (one row per step, the metrics' wall time),
  ``run_names`` (SQLite: ``names`` + ``run_names``);
- ``samples`` (SQLite: ``samples`` + ``sample_payloads`` + ``sample_flags``), every row with its
  own copy of a ~256 B prompt and a ~768 B response from the benchmark's 2048-text pools;
- ``metric_rollups`` built by the store's own code: chDB runs the SQL of ch_schema migration 3
  (the rollups "for the metrics already stored"), restricted to the chunk's steps; SQLite runs
  ``rollups.recompute`` (what migration 3's ``backfill`` runs per metric) over the chunk;
- SQLite's sample indices are dropped during the load and re-created from their own stored
  ``CREATE INDEX`` text at the end (a sort instead of 10M random b-tree inserts).

Distributions (as the writer path, drawn differently):
- curves: per metric a random walk (steps N(0, 0.01), Box-Muller) plus spikes N(0, 5) at ~1e-4 of
  the steps; a chunk starts from the last stored value of the chunk before (as the writer path
  carries ``level``). chDB draws from ``cityHash64`` of (metric, step, stream): deterministic, a
  rebuild gives the same fixture. SQLite has no hash or seedable generator in SQL, so it draws
  from its own ``random()``: a rebuild draws anew (the cached file is what the queries measure).
- samples: category uniform over ``categories``; reward = mean of 3 uniform(-1, 1) components
  (stored as the writer's JSON); one flag from ``flags`` on ~10 % of samples (3 in 30);
  ``prompt_id`` = ``p%04d`` of n % 5000, ``group_id`` = sample_id // 4, length 200, texts
  ``prompts[n % 2048]`` / ``responses[7n % 2048]`` (n = the run's sample index); wall time
  1.7e9 + step. Every 1000th sample (n % 1000 == 0) carries fixed token / logprob arrays in
  the writer's compact blob format (store/codec.py), the rest none.
"""

from __future__ import annotations

import contextlib
import math
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

CHUNK_STEPS = 24 * 4096  # ~100k steps a statement, whole rollup blocks of both sizes
TOKEN_EVERY = 1000  # every 1000th sample carries token arrays
TOKENS = ("The", " answer", " is", " 4", ".", "<eos>") * 8  # 48 tokens
LOGPROBS = tuple(-0.05 * (i % 17) - 0.01 for i in range(len(TOKENS)))
WALL0 = 1.7e9  # wall time of step 0, as the writer path
NOISE_SD, SPIKE_P, SPIKE_SD = 0.01, 1e-4, 5.0  # the writer path's curves()
FLAG_DRAWS = 10  # a flag f < len(flags) out of 10 * len(flags) draws: ~10 % flagged
TWO_PI = 2 * math.pi

Progress = Callable[[int], None]


@dataclass(frozen=True)
class BulkSpec:
    """What to build: the benchmark's run, sizes, names and text pools."""

    run: Any  # rlcockpit.records.RunInfo, created through the writer
    steps: int
    samples_per_step: int
    metric_names: tuple[str, ...]
    prompts: tuple[str, ...]
    responses: tuple[str, ...]
    categories: tuple[str, ...]
    components: tuple[str, ...]
    flags: tuple[str, ...]

    @property
    def run_id(self) -> str:
        return self.run.run_id

    def chunks(self) -> list[tuple[int, int]]:
        """[first, end) step ranges of ``CHUNK_STEPS``."""
        return [(s, min(s + CHUNK_STEPS, self.steps)) for s in range(0, self.steps, CHUNK_STEPS)]


def token_blobs() -> tuple[bytes, bytes]:
    """(tokens, logprobs) blobs of the sampled token arrays, encoded once by the store's codec."""
    from rlcockpit.store import codec

    tokens, logprobs = codec.encode_tokens(TOKENS), codec.encode_f16(LOGPROBS)
    assert tokens is not None and logprobs is not None
    return tokens, logprobs


def build(backend: str, uri: str, spec: BulkSpec, progress: Progress, finished_at: float) -> None:
    """Open (create) the store at ``uri``, create the run through its writer, fill the data
    tables with SQL chunk by chunk (``progress(steps)`` after each), then heartbeat and finish
    the run through the writer."""
    from rlcockpit.store import open_store

    store = open_store(uri)
    writer = store.writer()
    try:
        writer.create_run(spec.run)
        fill = _fill_chdb if backend == "chdb" else _fill_sqlite
        fill(store, spec, progress)
        writer.heartbeat(spec.run_id, time.time(), spec.steps - 1)
        writer.set_run_status(spec.run_id, "finished", ended_at=finished_at)
    finally:
        writer.close()
        getattr(store, "close", lambda: None)()


# --- chDB ---------------------------------------------------------------------------------------

U64 = "18446744073709551616.0"  # 2**64: cityHash64 / U64 is uniform in [0, 1]
CH_POOL = "bench_text_pool"  # scratch table of the two text pools, dropped after the build


def _ch_uniform(*key: str) -> str:
    """Uniform in [0, 1] from a hash of ``key`` (SQL expressions): the same key, the same draw."""
    return f"(cityHash64({', '.join(key)}) / {U64})"


def _ch_normal(*key: str) -> str:
    """N(0, 1) by Box-Muller from two hashed uniforms (the first shifted into (0, 1])."""
    u1 = f"((cityHash64({', '.join(key)}, 1) + 1.0) / {U64})"
    return f"(sqrt(-2 * log({u1})) * cos({TWO_PI!r} * {_ch_uniform(*key, '2')}))"


def _fill_chdb(store: Any, spec: BulkSpec, progress: Progress) -> None:
    """chDB: the data tables filled by INSERT ... SELECT FROM numbers(...) through the store's
    own transport class (a second handle on the engine the store opened; the store has no
    public accessor for its transport)."""
    from rlcockpit.store.ch_transport import ChdbTransport
    from rlcockpit.store.uri import parse_store_uri

    t = ChdbTransport(parse_store_uri(store.uri).path, store.database)
    try:
        _ch_text_pool(t, spec)
        _ch(t, _ch_run_names_sql(t.database, spec))
        levels = [0.0] * len(spec.metric_names)
        for lo, hi in spec.chunks():
            _ch(t, _ch_metrics_sql(t.database, spec, lo, hi, levels))
            levels = _ch_levels(t, spec, hi - 1)
            _ch(t, _ch_rollups_sql(t.database, spec.run_id, lo, hi))
            _ch(t, _ch_samples_sql(t.database, spec, lo, hi))
            _ch(t, _ch_steps_sql(t.database, spec.run_id, lo, hi))
            progress(hi - lo)
        # one part per table, as a server's background merges leave a finished run: the chunks'
        # parts left unmerged (this process exits right after the build) made every query visit
        # ~16 parts (at 1M steps: page 222 -> 95 ms, histogram 340 -> 190 ms once merged)
        for table in ("samples", "metrics", "metric_rollups", "steps"):
            t.command(f"OPTIMIZE TABLE {t.database}.{table} FINAL")
    finally:
        t.command(f"DROP TABLE IF EXISTS {t.database}.{CH_POOL}")
        t.close()


def _ch(t: Any, sql: str) -> None:
    """One bulk statement; not deduplicated (each runs once, never retried)."""
    t.command(sql, {"insert_deduplicate": 0})


def _lit(value: Any) -> str:
    from rlcockpit.store.ch_transport import lit

    return lit(value)


def _ch_text_pool(t: Any, spec: BulkSpec) -> None:
    """The prompt and response pools as a scratch table the statements index into."""
    db = t.database
    t.command(f"DROP TABLE IF EXISTS {db}.{CH_POOL}")
    t.command(f"CREATE TABLE {db}.{CH_POOL} (i UInt32, prompt String, response String) "
              "ENGINE = Memory")
    n = len(spec.prompts)
    t.insert(CH_POOL, ["i", "prompt", "response"],
             [list(range(n)), list(spec.prompts), list(spec.responses)],
             {"i": "UInt32", "prompt": "String", "response": "String"})


def _ch_run_names_sql(db: str, spec: BulkSpec) -> str:
    return (f"INSERT INTO {db}.run_names (run_id, kind, name) SELECT {_lit(spec.run_id)}, "
            f"'metric', arrayJoin({_lit(list(spec.metric_names))})")


def _ch_metrics_sql(db: str, spec: BulkSpec, lo: int, hi: int, levels: Sequence[float]) -> str:
    """Per metric m one array of the chunk's walk (level + cumulative noise), joined out into
    rows; a spike is added to its own step only."""
    noise = f"{NOISE_SD!r} * {_ch_normal('m', 's', '11')}"
    spike = (f"if({_ch_uniform('m', 'step', '13')} < {SPIKE_P!r}, "
             f"{SPIKE_SD!r} * {_ch_normal('m', 'step', '14')}, 0)")
    return (
        f"INSERT INTO {db}.metrics (run_id, name, step, value, wall_time) "
        f"SELECT {_lit(spec.run_id)}, {_lit(list(spec.metric_names))}[m + 1], step, "
        f"level + walk + {spike}, {WALL0!r} + step FROM ("
        f"SELECT number AS m, {_lit([float(v) for v in levels])}[m + 1] AS level, "
        f"arrayCumSum(arrayMap(s -> {noise}, range({lo}, {hi}))) AS walks "
        f"FROM numbers({len(spec.metric_names)})) "
        f"ARRAY JOIN walks AS walk, range({lo}, {hi}) AS step")


def _ch_levels(t: Any, spec: BulkSpec, last: int) -> list[float]:
    """Each metric's value at ``last``: where the next chunk's walk starts."""
    found = dict(t.query(f"SELECT toString(name), value FROM {t.database}.metrics WHERE "
                         f"run_id = {_lit(spec.run_id)} AND step = {last}"))
    return [float(found[name]) for name in spec.metric_names]


def _ch_rollups_sql(db: str, run_id: str, lo: int, hi: int) -> str:
    """Migration 3's rollup build (every stored metric, both block sizes), restricted to this
    run and chunk; the chunk holds whole blocks, so each block's row is final."""
    from rlcockpit.store import ch_schema

    sql = ch_schema.V3_METRIC_ROLLUPS[1]
    only_when_empty = "(SELECT count() FROM {db}.metric_rollups) = 0"
    if only_when_empty not in sql:
        raise RuntimeError("ch_schema migration 3 changed: update benchmarks/_store_bulk.py")
    chunk = f"run_id = {_lit(run_id)} AND step BETWEEN {lo} AND {hi - 1}"
    return sql.replace(only_when_empty, chunk).format(db=db)


def _ch_samples_sql(db: str, spec: BulkSpec, lo: int, hi: int) -> str:
    """The chunk's samples, n = the run's sample index (step = n // per_step)."""
    k = spec.samples_per_step
    n_comp = len(spec.components)
    comps = ", ".join(f"({_ch_uniform('number', str(30 + j))} * 2 - 1) AS c{j}"
                      for j in range(n_comp))
    reward = "(" + " + ".join(f"c{j}" for j in range(n_comp)) + f") / {n_comp}"
    tokens, logprobs = token_blobs()
    draw = f"cityHash64(number, 25) % {FLAG_DRAWS * len(spec.flags)}"
    pool = f"{db}.{CH_POOL}"
    return (
        f"INSERT INTO {db}.samples (run_id, step, sample_id, category, reward, prompt_id, "
        "group_id, has_token_arrays, flags, length, truncated, uncertainty, advantage, value, "
        "kl_sum, kl_max, wall_time, prompt, response, components, tokens, logprobs, "
        "ref_logprobs, token_kl) "
        f"WITH (SELECT arrayMap(x -> x.2, arraySort(groupArray((i, prompt)))) FROM {pool}) "
        f"AS prompts, (SELECT arrayMap(x -> x.2, arraySort(groupArray((i, response)))) "
        f"FROM {pool}) AS responses "
        f"SELECT {_lit(spec.run_id)}, intDiv(number, {k}), number % {k}, "
        f"{_lit(list(spec.categories))}[cityHash64(number, 24) % {len(spec.categories)} + 1], "
        f"{reward}, concat('p', leftPad(toString(number % 5000), 4, '0')), "
        f"intDiv(number % {k}, 4), toUInt8(number % {TOKEN_EVERY} = 0), "
        f"if({draw} < {len(spec.flags)}, [{_lit(list(spec.flags))}[{draw} + 1]], []), "
        f"200, 0, NULL, NULL, NULL, NULL, NULL, {WALL0!r} + intDiv(number, {k}), "
        f"prompts[number % {len(spec.prompts)} + 1], "
        f"responses[number * 7 % {len(spec.responses)} + 1], {_ch_components_json(spec)}, "
        f"nullIf(if(number % {TOKEN_EVERY} = 0, {_lit(tokens)}, ''), ''), "
        f"nullIf(if(number % {TOKEN_EVERY} = 0, {_lit(logprobs)}, ''), ''), NULL, NULL "
        f"FROM (SELECT number, {comps} FROM numbers({lo * k}, {(hi - lo) * k}))")


def _ch_components_json(spec: BulkSpec) -> str:
    """The writer's ``json.dumps`` of the components (toString: the shortest round-trip text,
    as Python's repr)."""
    parts = []
    for j, name in enumerate(spec.components):
        parts += [_lit(("{" if j == 0 else ", ") + f'"{name}": '), f"toString(c{j})"]
    return "concat(" + ", ".join([*parts, "'}'"]) + ")"


def _ch_steps_sql(db: str, run_id: str, lo: int, hi: int) -> str:
    return (f"INSERT INTO {db}.steps (run_id, step, wall_time) SELECT {_lit(run_id)}, number, "
            f"{WALL0!r} + number FROM numbers({lo}, {hi - lo})")


# --- SQLite -------------------------------------------------------------------------------------

# SQLite's random() is a signed 64-bit integer; these make uniforms in (0, 1] and N(0, 1)
SQ_UNIFORM = "(0.5 - random() / 18446744073709551616.0)"
SQ_NORMAL = f"(sqrt(-2 * ln({SQ_UNIFORM})) * cos({TWO_PI!r} * {SQ_UNIFORM}))"
SQ_SERIES = "WITH RECURSIVE s(x) AS (SELECT ? UNION ALL SELECT x + 1 FROM s WHERE x + 1 < ?) "


def _fill_sqlite(store: Any, spec: BulkSpec, progress: Progress) -> None:
    """SQLite: INSERT ... SELECT over a recursive CTE per chunk, one transaction a chunk, on a
    connection of its own (the store's connect(): WAL, synchronous=NORMAL)."""
    from rlcockpit.store.sqlite import connect

    conn = connect(store.path, busy_timeout_s=60.0)
    try:
        conn.execute("PRAGMA cache_size = -262144")  # 256 MiB for the big sorts
        run_key = conn.execute("SELECT run_key FROM runs WHERE run_id = ?",
                               (spec.run_id,)).fetchone()[0]
        name_ids = _sq_names(conn, run_key, spec.metric_names)
        _sq_scratch(conn, spec, name_ids)
        indices = _sq_drop_sample_indices(conn)
        base = conn.execute("SELECT COALESCE(MAX(payload_id), 0) + 1 FROM sample_payloads"
                            ).fetchone()[0]
        for lo, hi in spec.chunks():
            with _sq_transaction(conn):
                _sq_metrics(conn, run_key, name_ids, lo, hi)
                _sq_samples(conn, spec, run_key, base, lo, hi)
                conn.execute(SQ_SERIES + "INSERT INTO steps (run_key, step, wall_time) "
                             f"SELECT ?, x, {WALL0!r} + x FROM s", (lo, hi, run_key))
            progress(hi - lo)
        with _sq_transaction(conn):
            for sql in indices:
                conn.execute(sql)
    finally:
        conn.close()


@contextlib.contextmanager
def _sq_transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE ... COMMIT, ROLLBACK on error."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _sq_names(conn: sqlite3.Connection, run_key: int, names: Sequence[str]) -> list[int]:
    """Intern the metric names and list them as the run's (``names``, ``run_names``)."""
    with _sq_transaction(conn):
        conn.executemany("INSERT OR IGNORE INTO names (name) VALUES (?)", [(n,) for n in names])
        ids = [conn.execute("SELECT name_id FROM names WHERE name = ?", (n,)).fetchone()[0]
               for n in names]
        conn.executemany("INSERT OR IGNORE INTO run_names (run_key, kind, name_id) "
                         "VALUES (?, 'metric', ?)", [(run_key, i) for i in ids])
    return ids


def _sq_scratch(conn: sqlite3.Connection, spec: BulkSpec, name_ids: Sequence[int]) -> None:
    """Connection-local (temp) tables: the text pools, and each metric's walk level."""
    conn.execute("CREATE TEMP TABLE bench_texts (i INTEGER PRIMARY KEY, prompt TEXT, "
                 "response TEXT)")
    conn.executemany("INSERT INTO temp.bench_texts VALUES (?, ?, ?)",
                     list(zip(range(len(spec.prompts)), spec.prompts, spec.responses,
                              strict=True)))
    conn.execute("CREATE TEMP TABLE bench_levels (name_id INTEGER PRIMARY KEY, level REAL)")
    conn.executemany("INSERT INTO temp.bench_levels VALUES (?, 0.0)", [(i,) for i in name_ids])


def _sq_drop_sample_indices(conn: sqlite3.Connection) -> list[str]:
    """Drop the sample table's secondary indices; their CREATE statements, to run at the end."""
    found = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND "
                         "tbl_name = 'samples' AND sql IS NOT NULL").fetchall()
    with _sq_transaction(conn):
        for name, _sql in found:
            conn.execute(f'DROP INDEX "{name}"')
    return [sql for _name, sql in found]


def _sq_metrics(conn: sqlite3.Connection, run_key: int, name_ids: Sequence[int], lo: int,
                hi: int) -> None:
    """The chunk's curves, one metric a statement: a recursive CTE carries the walk from step to
    step (rows come out in key order, no sort), each step gets its spike; then the metric's
    rollups by the store's own code, and the level the next chunk starts from."""
    from rlcockpit.store import rollups

    walk = (
        "WITH RECURSIVE w(step, level) AS (SELECT ?1, (SELECT level FROM temp.bench_levels "
        f"WHERE name_id = ?2) + {NOISE_SD!r} * {SQ_NORMAL} UNION ALL SELECT step + 1, "
        f"level + {NOISE_SD!r} * {SQ_NORMAL} FROM w WHERE step + 1 < ?3) "
        "INSERT INTO metrics (run_key, name_id, step, value, wall_time) SELECT ?4, ?2, step, "
        f"level + CASE WHEN {SQ_UNIFORM} <= {SPIKE_P!r} THEN {SPIKE_SD!r} * {SQ_NORMAL} ELSE 0 END, "
        f"{WALL0!r} + step FROM w")
    for name_id in name_ids:
        conn.execute(walk, (lo, name_id, hi, run_key))
        rollups.recompute(conn, run_key, name_id, lo, hi - 1)
    conn.execute("UPDATE temp.bench_levels SET level = (SELECT m.value FROM metrics m WHERE "
                 "m.run_key = ? AND m.name_id = bench_levels.name_id AND m.step = ?)",
                 (run_key, hi - 1))


def _sq_case(column: str, values: Sequence[str], default: str) -> str:
    """``CASE column WHEN 0 THEN 'values[0]' ... ELSE default END``."""
    whens = " ".join(f"WHEN {i} THEN '{v.replace(chr(39), chr(39) * 2)}'"
                     for i, v in enumerate(values))
    return f"CASE {column} {whens} ELSE {default} END"


def _sq_samples(conn: sqlite3.Connection, spec: BulkSpec, run_key: int, base: int, lo: int,
                hi: int) -> None:
    """The chunk's draws in a temp table (so the narrow row, the payload and the flag rows
    agree), then ``samples``, ``sample_payloads`` and ``sample_flags`` from it."""
    k = spec.samples_per_step
    n_flags = len(spec.flags)
    cs = [f"c{j}" for j in range(len(spec.components))]
    conn.execute(
        "CREATE TEMP TABLE bench_draws AS " + SQ_SERIES + "SELECT x AS n, "
        + "".join(f"{SQ_UNIFORM} * 2 - 1 AS {c}, " for c in cs)
        + "(random() & 9223372036854775807) % "
        f"{len(spec.categories)} AS cat, (random() & 9223372036854775807) % "
        f"{FLAG_DRAWS * n_flags} AS f FROM s", (lo * k, hi * k))
    flags_json = _sq_case("f", [f'["{f}"]' for f in spec.flags], "'[]'")
    conn.execute(
        "INSERT INTO samples (run_key, step, sample_id, category, reward, prompt_id, group_id, "
        "has_token_arrays, flags, length, truncated, wall_time, payload_id) "
        f"SELECT ?, n / {k}, n % {k}, {_sq_case('cat', spec.categories, 'NULL')}, "
        f"({' + '.join(cs)}) / {len(cs)}, printf('p%04d', n % 5000), (n % {k}) / 4, "
        f"n % {TOKEN_EVERY} = 0, {flags_json}, 200, 0, {WALL0!r} + n / {k}, n + ? "
        "FROM temp.bench_draws ORDER BY n", (run_key, base))
    components = "{" + ", ".join(f'"{c}": %!.17g' for c in spec.components) + "}"
    tokens, logprobs = token_blobs()
    conn.execute(
        "INSERT INTO sample_payloads (payload_id, prompt, response, components, tokens, "
        f"logprobs) SELECT n + ?, p.prompt, r.response, printf(?, {', '.join(cs)}), "
        f"CASE WHEN n % {TOKEN_EVERY} = 0 THEN ? END, CASE WHEN n % {TOKEN_EVERY} = 0 THEN ? END "
        f"FROM temp.bench_draws d JOIN temp.bench_texts p ON p.i = n % {len(spec.prompts)} "
        f"JOIN temp.bench_texts r ON r.i = n * 7 % {len(spec.responses)} ORDER BY n",
        (base, components, tokens, logprobs))
    conn.execute(
        "INSERT INTO sample_flags (run_key, flag, step, sample_id) "
        f"SELECT ?, {_sq_case('f', spec.flags, 'NULL')}, n / {k}, n % {k} "
        f"FROM temp.bench_draws WHERE f < {n_flags}", (run_key,))
    conn.execute("DROP TABLE temp.bench_draws")

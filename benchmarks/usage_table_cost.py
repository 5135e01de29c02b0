#!/usr/bin/env python3
"""What one usage row costs the SQLite store's writer, per table layout, side by side; ONE JSON object.

Every request the gateway serves writes one usage row (store/sqlite.py ``add_usage``, in batches
of ``FLUSH_S`` = 20 ms by the writer thread).  On a machine with few cores that thread competes
with the event loop and the engine, so its CPU per row is what a one-connection client's p99 meets
(docs/gateway.md, "Ninth pass" and "Tenth pass").  Each layout gets its own WAL database in a temp
folder, ``--prefill`` rows first (a store that has been serving for a while), then ``--batches``
transactions of ``--per-batch`` rows with the store's own multi-row statement, each timed with its
commit.  Then the usage API's two queries (a time window, and a tenant in it) are timed.

- ``current``: the table as store/sqlite.py makes it now (its ``_SCHEMA``);
- ``id_key_two_time_indexes``: the table before the tenth pass (text id as its key, plus
  (tenant, ts) and (ts) indexes), the layout a database made before keeps;
- ``no_index``: a heap with no key at all, the floor (it could not drop a replayed record).

    python benchmarks/usage_table_cost.py [--prefill 200000] [--batches 300] [--per-batch 60] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from turbogate.store.sqlite import _INSERT_USAGE, _MORE_ROWS, _ROWS_PER_INSERT, _SCHEMA

_COLUMNS = """ts REAL NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL, tier_asked TEXT NOT NULL,
  tier_served TEXT NOT NULL, status INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, queue_s REAL NOT NULL, latency_s REAL NOT NULL, cost_units REAL NOT NULL,
  downgrade TEXT"""
LAYOUTS = {
    "current": _SCHEMA,
    "id_key_two_time_indexes": f"CREATE TABLE usage (id TEXT PRIMARY KEY, {_COLUMNS}); "
                               "CREATE INDEX usage_by_tenant_ts ON usage (tenant, ts); "
                               "CREATE INDEX usage_by_ts ON usage (ts);",
    "no_index": f"CREATE TABLE usage (id TEXT, {_COLUMNS});",
}
TENANTS = 7


class Rows:
    """Rows as the gateway writes them: ids ``<instance>-<n>``, times a little out of order."""

    def __init__(self, seed: int) -> None:
        self.n, self.rng, self.t0 = 0, random.Random(seed), 1.7e9

    def take(self, count: int) -> list[tuple[object, ...]]:
        out = []
        for _ in range(count):
            self.n += 1
            out.append((f"gw-3f2a9c-{self.n}", self.t0 + self.n * 0.001 + self.rng.random() * 0.01,
                        f"tenant-{self.n % TENANTS}", "llama-3.2-1b", "standard", "standard", 200, 16, 16, 0.0,
                        0.001, 1.0, None))
        return out


def write(db: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    db.execute("BEGIN IMMEDIATE")
    for i in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[i:i + _ROWS_PER_INSERT]
        db.execute(_INSERT_USAGE + _MORE_ROWS * (len(chunk) - 1), [v for r in chunk for v in r])
    db.execute("COMMIT")


def measure(layout: str, folder: Path, args: argparse.Namespace, seed: int) -> dict[str, float]:
    db = sqlite3.connect(folder / f"{layout}.sqlite3", isolation_level=None)
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(LAYOUTS[layout])
    rows = Rows(seed)
    for _ in range(args.prefill // 1000):
        write(db, rows.take(1000))
    batches = []
    for _ in range(args.batches):
        batch = rows.take(args.per_batch)
        t = time.perf_counter()
        write(db, batch)
        batches.append(time.perf_counter() - t)
    before = db.execute("SELECT COUNT(*) FROM usage").fetchone()[0]
    write(db, [batch[-1]])  # a replayed record (the same id and time) must not make a second row
    duplicated = db.execute("SELECT COUNT(*) FROM usage").fetchone()[0] - before
    since, until = rows.t0 + args.prefill * 0.001 / 4, rows.t0 + args.prefill * 0.001 / 4 + 30
    query = "SELECT * FROM usage WHERE ts >= ? AND ts < ?{} ORDER BY ts, id"
    t = time.perf_counter()
    window = len(db.execute(query.format(""), (since, until)).fetchall())
    t_window = time.perf_counter() - t
    t = time.perf_counter()
    tenant = len(db.execute(query.format(" AND tenant = ?"), (since, until, "tenant-3")).fetchall())
    t_tenant = time.perf_counter() - t
    db.close()
    median = statistics.median(batches)
    return {"row_us": round(median / args.per_batch * 1e6, 2), "batch_p50_us": round(median * 1e6),
            "batch_p99_us": round(sorted(batches)[int(len(batches) * 0.99)] * 1e6),
            "window_query_ms": round(t_window * 1e3, 1), "window_rows": window,
            "tenant_query_ms": round(t_tenant * 1e3, 1), "tenant_rows": tenant,
            "replay_made_a_row": duplicated > 0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill", type=int, default=200_000, help="rows in each table before the timed batches")
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--per-batch", type=int, default=60, help="rows a flush writes (60: one connection's 20 ms here)")
    ap.add_argument("--rounds", type=int, default=2, help="each layout this many times, interleaved")
    args = ap.parse_args()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in LAYOUTS}
    with tempfile.TemporaryDirectory(prefix="tg-usage-table-") as tmp:
        for r in range(args.rounds):
            for name in LAYOUTS:
                folder = Path(tmp) / f"{name}-{r}"
                folder.mkdir()
                runs[name].append(measure(name, folder, args, seed=r))
    per_round = ("row_us", "batch_p50_us", "batch_p99_us", "window_query_ms", "tenant_query_ms")
    out: dict[str, object] = {name: {**{k: [x[k] for x in rs] for k in per_round},
                                     "rows_in_window": rs[-1]["window_rows"], "rows_of_tenant": rs[-1]["tenant_rows"],
                                     "replay_made_a_row": any(x["replay_made_a_row"] for x in rs)}
                              for name, rs in runs.items()}
    out.update({"prefill": args.prefill, "per_batch": args.per_batch, "batches": args.batches,
                "sqlite": sqlite3.sqlite_version})
    print(json.dumps(out))


if __name__ == "__main__":
    main()

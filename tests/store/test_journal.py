"""The usage journal and the batching writer (store/journal.py, store/writer.py): a record is on
local disk when submitted, reaches the store in one batch, and its copy in the journal is zeroed
once the store holds it (the files are reused, and go at shutdown); a dead process's journal is
replayed by the next store opened on the folder; an unwritable journal falls back to waiting for
the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.store.test_stores import rec
from turbogate.store.base import Spent
from turbogate.store.journal import UsageJournal
from turbogate.store.records import record_to_json
from turbogate.store.resilient import ResilientStore, UsageBuffer
from turbogate.store.sqlite import SqliteStore
from turbogate.store.writer import UsageWriter


def _dead_pid() -> int:
    """The pid of a process that has exited (a worker that is gone)."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(dead.stdout)


def _lines(folder: Path) -> list[bytes]:
    """The records in ``folder``'s journal files (an open file's reserved tail is zero bytes)."""
    return [line for p in sorted(folder.glob("usage-*-j*.jsonl")) for line in p.read_bytes().splitlines()
            if line.strip(b"\0")]


async def test_journaled_at_once_stored_in_one_batch(tmp_path: Path) -> None:
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), tmp_path / "buf")
    await store.open()
    spent: list[Spent] = []
    writer = UsageWriter(store, spent.append, UsageJournal(tmp_path / "buf"), flush_s=60.0)
    try:
        assert all(writer.submit(rec(i, tier="standard")) is None for i in range(3))  # durable already: nobody waits
        assert len(_lines(tmp_path / "buf")) == 3  # on disk before any store write
        assert await store.usage("acme", 0, 2000) == []  # the batch waits for its timer (60 s here)
        await writer.flush()
        assert [r.id for r in await store.usage("acme", 0, 2000)] == ["g-0", "g-1", "g-2"]
        assert _lines(tmp_path / "buf") == []  # the store holds them: the journal file is gone
        # A Turbo record of a tenant without a budget is durable once journaled, like any other.
        assert writer.submit(rec(4)) is None
        # One that charges a Turbo budget goes at once, and its answer waits for the store's
        # running total: how this and every other process learn the spend.
        fut = writer.submit(rec(3), spends_budget=True)
        assert fut is not None
        await fut
        assert {"g-3", "g-4"} <= {r.id for r in await store.usage("acme", 0, 2000)}  # one write (group commit)
        assert spent and sum(spent[-1].values()) > 0  # Turbo spend handed back, as before
    finally:
        await store.close()


async def test_a_full_batch_goes_without_waiting_for_the_timer(tmp_path: Path) -> None:
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), tmp_path / "buf")
    await store.open()
    writer = UsageWriter(store, lambda _: None, UsageJournal(tmp_path / "buf"), flush_s=60.0, max_batch=4)
    try:
        for i in range(4):
            writer.submit(rec(i, tier="standard"))
        task = writer._task
        assert task is not None  # kicked by the fourth record
        await task
        assert len(await store.usage("acme", 0, 2000)) == 4
    finally:
        await store.close()


async def test_a_dead_process_journal_is_replayed_and_a_live_one_is_not(tmp_path: Path) -> None:
    buf = tmp_path / "buf"
    buf.mkdir()
    dead_pid = _dead_pid()  # a worker that is gone left its journal
    (buf / f"usage-{dead_pid}-j1.jsonl").write_bytes(record_to_json(rec(7)) + b"\n")
    own = UsageJournal(buf)
    own.append(rec(8))  # this process's live journal: its writer's, not the replay's
    assert [p.name for p in UsageBuffer(buf).claim()] == [f"usage-{dead_pid}-j1.jsonl"]
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), buf)
    await store.open()  # replays what dead processes left
    try:
        assert [r.id for r in await store.usage("acme", 0, 2000)] == ["g-7"]
        assert not (buf / f"usage-{dead_pid}-j1.jsonl").exists()
        assert (buf / f"usage-{os.getpid()}-j1.jsonl").exists()
    finally:
        own.rotate()
        await store.close()


async def test_an_unwritable_journal_waits_for_the_store(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # a file where the journal's folder should be: every append fails
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), tmp_path / "buf")
    await store.open()
    writer = UsageWriter(store, lambda _: None, UsageJournal(blocked), flush_s=60.0)
    try:
        fut = writer.submit(rec(0))
        assert fut is not None  # not durable yet: the caller waits for the store, not the timer
        await fut
        assert [r.id for r in await store.usage("acme", 0, 2000)] == ["g-0"]
    finally:
        await store.close()


async def test_a_full_file_continues_in_the_next_and_files_are_reused_once_stored(tmp_path: Path) -> None:
    buf = tmp_path / "buf"
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), buf)
    await store.open()
    line = len(record_to_json(rec(0, tier="standard"))) + 1
    writer = UsageWriter(store, lambda _: None, UsageJournal(buf, file_bytes=3 * line), flush_s=60.0)
    try:
        for i in range(7):
            writer.submit(rec(i, tier="standard"))
        assert len(list(buf.glob("usage-*-j*.jsonl"))) == 3  # 3 + 3 + 1 records
        assert len(_lines(buf)) == 7
        await writer.flush()
        assert len(await store.usage("acme", 0, 2000)) == 7
        assert _lines(buf) == []  # stored: the copies are zeroed
        assert len(list(buf.glob("usage-*-j*.jsonl"))) <= 3  # files kept for reuse (journal.SPARE_FILES + 1)
        writer.submit(rec(7, tier="standard"))  # into a reused file
        assert len(_lines(buf)) == 1
        await writer.close()  # shutdown: stored, and the files go
        assert list(buf.glob("usage-*-j*.jsonl")) == []
        assert len(await store.usage("acme", 0, 2000)) == 8
    finally:
        await store.close()


async def test_a_dead_process_open_journal_replays_up_to_its_zero_tail(tmp_path: Path) -> None:
    buf = tmp_path / "buf"
    buf.mkdir()
    # What a killed process leaves: its records, then the file's reserved space, zero bytes.
    (buf / f"usage-{_dead_pid()}-j1.jsonl").write_bytes(
        record_to_json(rec(1)) + b"\n" + record_to_json(rec(2)) + b"\n" + bytes(4096))
    store = ResilientStore(SqliteStore(tmp_path / "state.sqlite3"), buf)
    await store.open()
    try:
        assert [r.id for r in await store.usage("acme", 0, 2000)] == ["g-1", "g-2"]
    finally:
        await store.close()

"""This process's usage journal: each record one JSON line appended to a local file with one
``os.write`` the moment its answer is about to end.  A write the kernel has taken survives the
process being killed (the durability SQLite's ``synchronous=NORMAL`` gives a commit), at a few
microseconds instead of a store transaction per record; the records then reach the shared store
in batches (store/writer.py).

The journal is a series of files, ``<buffer dir>/usage-<pid>-j<n>.jsonl``: ``rotate()`` closes
the current one when its records go to the store, and the writer removes it once the store (or
the store's own buffer) holds them.  Files left by a process that died are replayed by the next
gateway that starts, like its store buffer (``UsageBuffer.claim`` in store/resilient.py).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from turbogate.sched.metering import UsageRecord
from turbogate.store.base import record_to_json


class UsageJournal:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._pid = os.getpid()
        self._gen = 0
        self._fd: int | None = None
        self._path: Path | None = None

    def append(self, rec: UsageRecord) -> None:
        """Write ``rec`` now (raises OSError when the folder cannot be written)."""
        if self._fd is None:
            self._gen += 1
            path = self.folder / f"usage-{self._pid}-j{self._gen}.jsonl"
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the first file (or the folder was removed): make the folder
                self.folder.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._path = path
        os.write(self._fd, record_to_json(rec) + b"\n")

    def rotate(self) -> Path | None:
        """Close the current file (its records are on their way to the store); the next record
        starts a new one.  The closed file's path, or None when nothing was written."""
        path = self._path
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._path = None
        return path

    @staticmethod
    def remove(path: Path) -> None:
        """The store holds ``path``'s records: the file is no longer needed."""
        with contextlib.suppress(OSError):  # left behind, it is replayed (idempotently) after this process
            path.unlink(missing_ok=True)

"""This process's usage journal: each record one JSON line copied into a memory-mapped local file
the moment its answer is about to end.  A page of a shared file mapping belongs to the kernel's
page cache, so a record copied there survives the process being killed, as a ``write()`` the
kernel has taken does (the durability SQLite's ``synchronous=NORMAL`` gives a commit); the records
then reach the shared store in batches (store/writer.py).

Why a mapping and not ``os.write``: an appending ``write()`` grows the file, and on ext4 every
size change is a journalled metadata update; next to the store thread's own writes that cost
5-8 µs a record on the gateway's loop (cProfile, 32 connections; 1.8 µs alone), while a copy into
a mapping costs under one (docs/gateway.md "Speed").  Each file's space is reserved up front
(``posix_fallocate``): a copy into a mapping can then never hit a full disk (which would kill the
process with SIGBUS); a full disk shows as an OSError when a file is opened, and the writer then
waits for the store instead.

The journal is a series of files, ``<buffer dir>/usage-<pid>-j<n>.jsonl``, each at most
``FILE_BYTES`` long: ``rotate()`` closes the current one (cut to the bytes written) when its
records go to the store, and the writer removes it once the store (or the store's own buffer)
holds them.  A file still open when the process dies ends in zero bytes, which the replay skips.
Files left by a process that died are replayed by the next gateway that starts, like its store
buffer (``UsageBuffer.claim`` in store/resilient.py).
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

from turbogate.sched.metering import UsageRecord
from turbogate.store.base import record_to_json

#: A journal file's reserved size: ~3,000 small records.  A batch larger than that (the store
#: slow to answer while records keep coming) continues in a next file.
FILE_BYTES = 1 << 20


class UsageJournal:
    def __init__(self, folder: Path, file_bytes: int = FILE_BYTES) -> None:
        self.folder = folder
        self.file_bytes = file_bytes
        self._pid = os.getpid()
        self._gen = 0
        self._map: mmap.mmap | None = None
        self._fd = -1
        self._pos = 0
        self._size = 0
        self._path: Path | None = None
        self._closed: list[Path] = []  # files filled up since the last rotate()

    def append(self, rec: UsageRecord) -> None:
        """Write ``rec`` now (raises OSError when no journal file can be opened)."""
        line = record_to_json(rec) + b"\n"
        end = self._pos + len(line)
        if end > self._size:  # no file yet, or this one is full
            self._open(len(line))
            end = len(line)
        assert self._map is not None
        self._map[self._pos:end] = line
        self._pos = end

    def _open(self, need: int) -> None:
        if self._path is not None:
            self._closed.append(self._close())
        self._gen += 1
        path = self.folder / f"usage-{self._pid}-j{self._gen}.jsonl"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except FileNotFoundError:  # the first file (or the folder was removed): make the folder
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        size = max(self.file_bytes, need)
        try:
            os.posix_fallocate(fd, 0, size)  # the space is ours now: no copy below can find the disk full
            mapped = mmap.mmap(fd, size)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        self._fd, self._map, self._path, self._pos, self._size = fd, mapped, path, 0, size

    def _close(self) -> Path:
        """Close the current file, cut to the bytes written; its path."""
        assert self._map is not None and self._path is not None
        path = self._path
        self._map.close()
        with contextlib.suppress(OSError):  # left longer, its zero tail is skipped at replay
            os.ftruncate(self._fd, self._pos)
        os.close(self._fd)
        self._map, self._fd, self._path, self._pos, self._size = None, -1, None, 0, 0
        return path

    def rotate(self) -> list[Path]:
        """Close the current file (its records are on their way to the store); the next record
        starts a new one.  The files closed since the last call, oldest first."""
        closed, self._closed = self._closed, []
        if self._path is not None:
            closed.append(self._close())
        return closed

    @staticmethod
    def remove(paths: list[Path]) -> None:
        """The store holds the records of ``paths``: the files are no longer needed."""
        for path in paths:
            with contextlib.suppress(OSError):  # left behind, it is replayed (idempotently) after this process
                path.unlink(missing_ok=True)

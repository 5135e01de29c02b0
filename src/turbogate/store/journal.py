"""This process's usage journal: each record one JSON line copied into a memory-mapped local file
the moment its answer is about to end.  A page of a shared file mapping belongs to the kernel's
page cache, so a record copied there survives the process being killed, as a ``write()`` the
kernel has taken does (the durability SQLite's ``synchronous=NORMAL`` gives a commit); the records
then reach the shared store in batches (store/writer.py).

Why a mapping, and files that are reused rather than deleted: on ext4 an appending ``write()``
changes the file's size (a journalled metadata update), and creating, cutting and deleting a file
per batch frees and allocates its blocks again.  Next to the store thread's own writes that cost
5-8 µs a record on the gateway's loop, and a cut or a delete up to a millisecond (cProfile, 32
connections); a copy into a mapping costs well under a microsecond and a batch none of those
calls (docs/gateway.md "Speed").  Each file's space is reserved when it is made
(``posix_fallocate``), so a copy into its mapping can never find the disk full (which would kill
the process with SIGBUS): a full disk shows as an OSError when a file is made, and the writer then
waits for the store instead.

The journal is a few files, ``<buffer dir>/usage-<pid>-j<n>.jsonl``, each ``FILE_BYTES`` long
and holding records up to its first zero byte.  ``rotate()`` hands the writer the files holding
the records now on their way to the store and starts the next record in a free file; once the
store holds them the writer gives the files back (``release``): their records are zeroed and the
files wait for reuse.  Files left by a process that died are replayed by the next gateway that
starts, like its store buffer (``UsageBuffer.claim`` in store/resilient.py); a record replayed
twice (the process died between the store's write and the zeroing) is stored once: every store
keys records by their id.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from pathlib import Path

from turbogate.sched.metering import UsageRecord
from turbogate.store.records import record_to_json

#: A journal file's reserved size: ~3,000 small records.  More records than that between two
#: rotations (a store slow to answer while records keep coming) continue in another file.
FILE_BYTES = 1 << 20
#: Files kept for reuse beyond those in use; more are deleted when given back.
SPARE_FILES = 2


class _File:
    __slots__ = ("fd", "map", "path", "used")

    def __init__(self, path: Path, fd: int, mapped: mmap.mmap) -> None:
        self.path, self.fd, self.map, self.used = path, fd, mapped, 0

    def close(self) -> None:
        self.map.close()
        os.close(self.fd)


class UsageJournal:
    def __init__(self, folder: Path, file_bytes: int = FILE_BYTES) -> None:
        self.folder = folder
        self.file_bytes = file_bytes
        self._pid = os.getpid()
        self._gen = 0
        self._current: _File | None = None
        self._full: list[_File] = []  # filled since the last rotate()
        self._spare: list[_File] = []  # given back, zeroed, ready for reuse

    def append(self, rec: UsageRecord) -> None:
        """Write ``rec`` now (raises OSError when no journal file can be made)."""
        line = record_to_json(rec) + b"\n"
        f = self._current
        if f is None or f.used + len(line) > self.file_bytes:
            f = self._next(len(line))
        end = f.used + len(line)
        f.map[f.used:end] = line
        f.used = end

    def _next(self, need: int) -> _File:
        if need > self.file_bytes:
            raise OSError(f"a usage record of {need} bytes is over the journal file size of {self.file_bytes}")
        if self._current is not None:
            self._full.append(self._current)
        self._current = self._spare.pop() if self._spare else self._make()
        return self._current

    def _make(self) -> _File:
        self._gen += 1
        path = self.folder / f"usage-{self._pid}-j{self._gen}.jsonl"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        except FileNotFoundError:  # the first file (or the folder was removed): make the folder
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.posix_fallocate(fd, 0, self.file_bytes)  # the space is ours: no copy can find the disk full
            return _File(path, fd, mmap.mmap(fd, self.file_bytes))
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise

    def rotate(self) -> list[_File]:
        """The files holding every record written so far (their records are on their way to the
        store), oldest first; the next record starts in another file."""
        taken, self._full = self._full, []
        if self._current is not None and self._current.used:
            taken.append(self._current)
            self._current = None
        return taken

    def release(self, files: list[_File]) -> None:
        """The store holds the records of ``files``: zero them, keep a few files for reuse."""
        for f in files:
            f.map[:f.used] = bytes(f.used)
            f.used = 0
            if len(self._spare) < SPARE_FILES:
                self._spare.append(f)
            else:
                self._drop(f)

    def keep(self, files: list[_File]) -> None:
        """The store refused the records of ``files`` (a bug): close them as they are, for the
        replay after this process."""
        for f in files:
            f.close()

    def close(self) -> None:
        """Shut down: delete the files whose records the store holds (every record was given
        back); a file still holding records stays, to be replayed after this process."""
        for f in [*self._spare, *([self._current] if self._current is not None else [])]:
            if f.used == 0:
                self._drop(f)
            else:
                f.close()
        self._spare, self._current = [], None

    @staticmethod
    def _drop(f: _File) -> None:
        f.close()
        with contextlib.suppress(OSError):  # left behind, its zeroed records replay as nothing
            f.path.unlink(missing_ok=True)

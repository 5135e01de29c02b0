"""Start a private ``redis-server`` on a free 127.0.0.1 port (tests and benchmarks; never a
substitute such as fakeredis).  Data is kept in an append-only file in ``folder``, so the
server can be stopped and started again on the same port with its data (a Redis restart)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from turbogate.errors import TurbogateError
from turbogate.procs import free_port


class RedisServer:
    def __init__(self, folder: Path, port: int | None = None) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise TurbogateError("redis-server is not installed (apt-get install redis-server; .ci/run does it)")
        self.exe = exe
        self.folder = folder
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 15.0) -> RedisServer:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = (self.folder / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.folder), "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec", "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise TurbogateError(f"redis-server exited with {self.process.returncode} (see {self.folder})")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        raise TurbogateError(f"redis-server on port {self.port} did not answer within {timeout:g}s")

    def stop(self) -> None:
        """A graceful stop (SIGTERM: Redis flushes its append-only file first)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        self.process = None

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

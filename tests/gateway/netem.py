"""A delaying TCP relay for tests: put it in front of an emulator and it adds a one-way delay
to every chunk each way (a far region, on 127.0.0.1), can be stopped (connection refused) and
started again on the same port, and counts the HTTP POSTs that crossed it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time


class DelayRelay:
    def __init__(self, target_port: int, delay_s: float = 0.0) -> None:
        self.target_port = target_port
        self.delay_s = delay_s  # one way; read per chunk, so it may change while running
        self.posts = 0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    def _call(self, coro: object, timeout: float = 10.0) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)  # type: ignore[arg-type]

    def start(self) -> int:
        """Listen (on the previous port after a stop); the port."""
        self._call(self._start())
        return self.port

    def stop(self) -> None:
        """Close the listener and every connection: new connections are refused."""
        self._call(self._stop())

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _shutdown(self) -> None:
        await self._stop()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
                break
            except OSError:  # the old port not free yet
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.close()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        await asyncio.gather(self._pipe(reader, up_writer, count=True), self._pipe(up_reader, writer),
                             return_exceptions=True)
        for w in (writer, up_writer):
            self._writers.discard(w)
            w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count: bool = False) -> None:
        """Copy ``reader`` to ``writer``, each chunk ``delay_s`` late (in order, without adding up)."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.close()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(send())
        tail = b""
        try:
            while True:
                data = await reader.read(65536)
                if count:
                    seen = tail + data
                    self.posts += seen.count(b"POST /")
                    tail = seen[-5:]
                queue.put_nowait((time.monotonic() + self.delay_s, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()

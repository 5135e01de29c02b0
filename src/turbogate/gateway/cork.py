"""One write per small response instead of two: the response head waits for its body.

uvicorn writes a response's head when the app sends ``http.response.start`` and its body when the
app sends ``http.response.body``: two ``send()`` system calls and two TCP segments (the sockets
are ``TCP_NODELAY``), and the client wakes twice.  The gateway sends both in the same turn of the
event loop, so holding the head until the next write costs no time: head and body leave together.
A head that no write follows in the same turn (a stream still waiting for its first chunk, a
``100 Continue``) leaves at the end of the turn, so nothing waits longer than that.

The guard protocol (gateway/guard.py) wraps each connection's transport in it.  Everything but
``write`` and the closing calls is the real transport's.
"""

from __future__ import annotations

import asyncio
from typing import Any

_HEAD = b"HTTP/"


class HeadCorkedTransport:
    """A transport whose response heads (writes starting ``HTTP/``) wait for the next write or the
    end of the current event-loop turn, whichever comes first; order is always kept."""

    __slots__ = ("_head", "_loop", "inner")

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self.inner = inner
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self.inner.write(head + bytes(data))
        elif data[:5] == _HEAD:
            self._head = bytes(data)
            self._loop.call_soon(self.flush)
        else:
            self.inner.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))

    def flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            if not self.inner.is_closing():
                self.inner.write(head)

    def write_eof(self) -> None:
        self.flush()
        self.inner.write_eof()

    def close(self) -> None:
        self.flush()
        self.inner.close()

    def abort(self) -> None:
        self._head = None
        self.inner.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

"""gateway/cork.py: a response head leaves with the write that follows it in the same turn of the
event loop, or alone at the end of that turn; order is always kept (pure: a recording transport)."""

from __future__ import annotations

import asyncio

from turbogate.gateway.cork import HeadCorkedTransport


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.extra = {"peername": ("127.0.0.1", 1)}

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> object:
        return self.extra.get(name)


def _corked() -> tuple[HeadCorkedTransport, _Recorder]:
    inner = _Recorder()
    return HeadCorkedTransport(inner, asyncio.get_running_loop()), inner  # type: ignore[arg-type]


async def test_head_and_body_leave_in_one_write() -> None:
    t, inner = _corked()
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    assert inner.writes == []  # held for the body
    t.write(b"{}")
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(inner.writes) == 1  # nothing left over for the end-of-turn flush


async def test_a_head_alone_leaves_at_the_end_of_the_turn_and_order_is_kept() -> None:
    t, inner = _corked()
    t.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    await asyncio.sleep(0)  # one turn: the stream's first chunk has not come yet
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"]
    t.write(b"5\r\ndata:\r\n")  # body bytes are never held
    assert inner.writes[-1] == b"5\r\ndata:\r\n"


async def test_close_sends_a_held_head_first_and_abort_drops_it() -> None:
    t, inner = _corked()
    t.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    t.close()
    assert inner.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"] and inner.closed
    t2, inner2 = _corked()
    t2.write(b"HTTP/1.1 200 OK\r\n\r\n")
    t2.abort()
    await asyncio.sleep(0)
    assert inner2.writes == [] and inner2.closed
    assert t.get_extra_info("peername") == ("127.0.0.1", 1)  # everything else is the real transport's

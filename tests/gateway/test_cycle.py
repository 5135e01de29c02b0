"""gateway/cycle.py: a response head leaves with the body that follows it in the same turn of the
event loop, or alone at the end of that turn; order is always kept; bad headers are refused
(pure: a recording transport, no socket)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from turbogate.gateway.cycle import LeanCycle


class _Recorder:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _cycle(method: str = "POST", keep_alive: bool = True) -> tuple[LeanCycle, _Recorder, list[int]]:
    inner = _Recorder()
    done: list[int] = []
    cycle = LeanCycle({"method": method}, inner, FlowControl(inner), logging.getLogger("test"),  # type: ignore[arg-type]
                      asyncio.Event(), False, keep_alive, lambda: done.append(1))
    return cycle, inner, done


async def test_head_and_body_leave_in_one_write() -> None:
    cycle, inner, done = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    assert inner.writes == []  # held for the body
    await cycle.send({"type": "http.response.body", "body": b"{}"})
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert cycle.response_complete and done == [1] and not inner.closed
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(inner.writes) == 1  # nothing left over for the end-of-turn flush


async def test_a_head_alone_leaves_at_the_end_of_the_turn_and_order_is_kept() -> None:
    cycle, inner, done = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"content-type", b"text/event-stream")]})
    await asyncio.sleep(0)  # one turn: the stream's first chunk has not come yet
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"]
    await cycle.send({"type": "http.response.body", "body": b"data:", "more_body": True})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert inner.writes[1:] == [b"5\r\ndata:\r\n", b"0\r\n\r\n"]
    assert done == [1]


async def test_a_closing_answer_says_so_and_closes_after_its_body() -> None:
    cycle, inner, _ = _cycle(keep_alive=False)
    await cycle.send({"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert inner.writes == [b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"]
    assert inner.closed


async def test_head_requests_get_no_body() -> None:
    cycle, inner, _ = _cycle(method="HEAD")
    await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await cycle.send({"type": "http.response.body", "body": b"{}"})
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"]


@pytest.mark.parametrize(("headers", "what"), [
    ([(b"x-ok", b"fine"), (b"x bad", b"v")], "name"),
    ([(b"x-ok", b"fine"), (b"x-inject", b"a\r\nset-cookie: x")], "value"),
])
async def test_a_bad_header_is_refused_and_nothing_is_written(headers: list[tuple[bytes, bytes]], what: str) -> None:
    cycle, inner, _ = _cycle()
    with pytest.raises(RuntimeError, match=f"Invalid HTTP header {what}"):
        await cycle.send({"type": "http.response.start", "status": 200, "headers": headers})
    await asyncio.sleep(0)
    assert inner.writes == []


async def test_a_tab_in_a_value_is_allowed_and_lengths_are_enforced() -> None:
    cycle, _, _ = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"x-tabbed", b"a\tb"), (b"content-length", b"1")]})
    with pytest.raises(RuntimeError, match="longer than Content-Length"):
        await cycle.send({"type": "http.response.body", "body": b"{}"})

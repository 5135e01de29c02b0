"""gateway/cycle.py: a response head leaves with the body that follows it in the same turn of the
event loop, or alone at the end of that turn; order is always kept; bad headers are refused
(pure: a recording transport, no socket)."""

from __future__ import annotations

import asyncio
import logging

import pytest
from uvicorn.protocols.http.flow_control import FlowControl

from turbogate.gateway.cycle import LeanCycle, RequestEvent, whole_body


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
                      RequestEvent(), False, keep_alive, lambda: done.append(1))
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


async def test_names_are_lowered_and_framing_headers_read_as_uvicorn_reads_them() -> None:
    cycle, inner, done = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200, "headers": [
        (b"Content-Length", b"5"), (b"Transfer-Encoding", b"Chunked"), (b"X-Mixed-Case", b"Keep")]})
    await cycle.send({"type": "http.response.body", "body": b"hello"})
    # Chunked wins over a Content-Length, whatever their order; values are left as they came.
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: Chunked\r\n"
                            b"x-mixed-case: Keep\r\n\r\n5\r\nhello\r\n0\r\n\r\n"]
    assert done == [1]


async def test_a_transfer_encoding_other_than_chunked_leaves_the_content_length_in_charge() -> None:
    cycle, inner, _ = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"transfer-encoding", b"gzip"), (b"content-length", b"2")]})
    with pytest.raises(RuntimeError, match="shorter than Content-Length"):
        await cycle.send({"type": "http.response.body", "body": b"{"})
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ncontent-length: 2\r\n\r\n{"]


async def test_the_apps_own_connection_close_is_kept_once_and_closes() -> None:
    cycle, inner, _ = _cycle()
    await cycle.send({"type": "http.response.start", "status": 200,
                      "headers": [(b"Connection", b"keep-alive, Close"), (b"content-length", b"0")]})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert inner.writes == [b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 0\r\n\r\n"]
    assert inner.closed and not cycle.keep_alive


async def test_no_headers_at_all_gets_a_chunked_body() -> None:
    cycle, inner, _ = _cycle()
    await cycle.send({"type": "http.response.start", "status": 204})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert inner.writes == [b"HTTP/1.1 204 No Content\r\n\r\n"]  # no framing for a 204


async def test_a_whole_body_is_received_at_once_and_a_second_receive_waits_for_the_disconnect() -> None:
    cycle, _, _ = _cycle()
    cycle.body += b'{"a":1}'
    cycle.more_body = False
    cycle.message_event.set()  # what the protocol does when the request is complete
    assert await cycle.receive() == {"type": "http.request", "body": b'{"a":1}', "more_body": False}
    second = asyncio.ensure_future(cycle.receive())
    await asyncio.sleep(0)
    assert not second.done()  # uvicorn's rule: nothing more until the client leaves
    cycle.disconnected = True
    cycle.message_event.set()
    assert await asyncio.wait_for(second, 5) == {"type": "http.disconnect"}


async def test_a_body_still_arriving_is_received_piece_by_piece() -> None:
    cycle, _, _ = _cycle()
    cycle.body += b"ab"
    cycle.message_event.set()  # a first piece; more_body is still True
    assert await cycle.receive() == {"type": "http.request", "body": b"ab", "more_body": True}
    cycle.body += b"c"
    cycle.more_body = False
    cycle.message_event.set()
    assert await cycle.receive() == {"type": "http.request", "body": b"c", "more_body": False}


async def test_the_request_event_wakes_every_waiter_once_and_forgets_a_cancelled_one() -> None:
    event = RequestEvent()
    assert not event.is_set()
    first, second = asyncio.ensure_future(event.wait()), asyncio.ensure_future(event.wait())
    gone = asyncio.ensure_future(event.wait())
    await asyncio.sleep(0)
    assert not (first.done() or second.done() or gone.done())
    gone.cancel()
    await asyncio.sleep(0)
    event.set()
    assert await asyncio.wait_for(asyncio.gather(first, second), 5) == [True, True]
    assert gone.cancelled() and event.is_set()
    assert await event.wait()  # already set: no wait
    event.clear()
    third = asyncio.ensure_future(event.wait())
    await asyncio.sleep(0)
    assert not third.done()  # cleared: waits again
    event.set()
    assert await asyncio.wait_for(third, 5)


async def test_a_response_that_ends_while_its_disconnect_is_awaited_wakes_the_watcher() -> None:
    cycle, _, _ = _cycle()
    cycle.body += b"{}"
    cycle.more_body = False
    cycle.message_event.set()
    await cycle.receive()  # the body; the event is cleared for what comes next
    watcher = asyncio.ensure_future(cycle.receive())  # a queued request's watch for its client leaving
    await asyncio.sleep(0)
    assert not watcher.done()
    await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"0")]})
    await cycle.send({"type": "http.response.body", "body": b""})
    assert await asyncio.wait_for(watcher, 5) == {"type": "http.disconnect"}


async def test_whole_body_takes_a_lean_cycles_body_once_and_leaves_other_receives_alone() -> None:
    cycle, _, _ = _cycle()
    cycle.body += b'{"a":1}'
    assert whole_body(cycle.receive) is None  # more of it may come: read it with receive()
    cycle.more_body = False
    cycle.message_event.set()
    assert whole_body(cycle.receive) == b'{"a":1}'
    assert whole_body(cycle.receive) is None  # taken: a second read waits for the disconnect

    async def other_receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"x", "more_body": False}

    assert whole_body(other_receive) is None


# ---- send_whole: the proxy route's usual answer in one call ---------------------------------

_ANSWER_HEADERS = [(b"Content-Type", b"application/json"), (b"x-turbogate-tier", b"turbo")]


async def test_a_whole_answer_is_the_same_bytes_as_its_two_messages_in_one_write() -> None:
    whole, inner, done = _cycle()
    assert whole.send_whole(200, _ANSWER_HEADERS, b'{"a":1}')
    messages, expected, _ = _cycle()
    await messages.send({"type": "http.response.start", "status": 200,
                         "headers": [*_ANSWER_HEADERS, (b"content-length", b"7")]})
    await messages.send({"type": "http.response.body", "body": b'{"a":1}'})
    assert inner.writes == expected.writes
    assert inner.writes == [b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-turbogate-tier: turbo\r\n"
                            b"content-length: 7\r\n\r\n{\"a\":1}"]
    assert whole.response_complete and whole.message_event.value and done == [1] and not inner.closed
    await asyncio.sleep(0)
    assert len(inner.writes) == 1
    assert not whole.send_whole(200, _ANSWER_HEADERS, b"{}")  # a second answer is not sent
    assert len(inner.writes) == 1


async def test_a_whole_answer_on_a_closing_connection_says_so_and_closes() -> None:
    cycle, inner, done = _cycle(keep_alive=False)
    assert cycle.send_whole(502, [], b"")
    assert inner.writes == [b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"]
    assert inner.closed and done == [1]


@pytest.mark.parametrize("why", ["started", "disconnected", "paused", "head"])
async def test_a_whole_answer_that_cannot_take_the_short_way_does_nothing(why: str) -> None:
    cycle, inner, done = _cycle(method="HEAD" if why == "head" else "POST")
    if why == "started":
        await cycle.send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    elif why == "disconnected":
        cycle.disconnected = True
    elif why == "paused":
        cycle.flow.pause_writing()
    assert not cycle.send_whole(200, _ANSWER_HEADERS, b"{}")
    assert done == [] and not cycle.response_complete
    if why != "started":
        assert inner.writes == [] and not cycle.response_started


async def test_a_whole_answer_with_a_bad_header_is_refused_and_nothing_is_written() -> None:
    cycle, inner, done = _cycle()
    with pytest.raises(RuntimeError, match="Invalid HTTP header"):
        cycle.send_whole(200, [(b"content-type", b"a\r\nset-cookie: x")], b"{}")
    assert inner.writes == [] and done == [] and not cycle.response_started

"""The guarded protocol's keep-alive timeout (the sweeper's, no timer per response) and the busy
poller (gateway/busypoll.py), on a real uvicorn server on a loopback port, in process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest
import uvicorn

from turbogate.gateway.busypoll import FixedWindow, IdlePoll, PollWindow, idle_poll
from turbogate.gateway.guard import GuardedHttpToolsProtocol

_REQUEST = b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"


async def _app(scope: dict[str, object], receive: object, send: object) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})  # type: ignore[operator]
    await send({"type": "http.response.body", "body": b"ok"})  # type: ignore[operator]


@contextlib.asynccontextmanager
async def _server(keep_alive_s: float) -> AsyncIterator[int]:
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=GuardedHttpToolsProtocol, lifespan="off",
                            timeout_keep_alive=keep_alive_s, log_level="warning")  # type: ignore[arg-type]
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.should_exit = True
        await task


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    return head + await reader.readexactly(2)


async def test_an_idle_kept_alive_connection_is_closed_after_the_timeout_and_a_busy_one_is_not() -> None:
    async with _server(keep_alive_s=2.0) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # Requests 0.3 s apart keep it open past the timeout: each one starts its idle time anew.
        for _ in range(8):
            writer.write(_REQUEST)
            assert (await _answer(reader)).endswith(b"ok")
            answered = time.monotonic()
            await asyncio.sleep(0.3)
        assert await asyncio.wait_for(reader.read(1), timeout=15) == b""  # closed by the server
        idle = time.monotonic() - answered
        assert 1.5 <= idle <= 10.0, idle  # the timeout (2 s, from the last answer) at the sweeper's 0.5 s steps
        writer.close()


async def test_a_fixed_poll_window_keeps_the_loop_turning_for_its_window_only() -> None:
    loop = asyncio.get_running_loop()
    poll = IdlePoll(loop, FixedWindow(0.2))
    turns = 0

    def count() -> None:
        nonlocal turns
        turns += 1
        if poll._turning:
            loop.call_soon(count)

    poll.kick(time.perf_counter())
    loop.call_soon(count)
    await asyncio.sleep(0.5)  # one sleep spans the window: the loop turned without sleeping meanwhile
    assert not poll._turning
    assert turns > 20, turns
    assert 0.15 <= poll.polled_s <= 0.5, poll.polled_s  # it counts the window it polled
    settled = turns
    await asyncio.sleep(0.1)
    assert turns == settled  # past its window the poller stopped, and with it the counting


async def test_the_adaptive_window_stays_shut_when_events_come_after_milliseconds() -> None:
    """An LLM engine's pace: every idle period is past the cap, so the loop polls next to nothing."""
    loop = asyncio.get_running_loop()
    window = PollWindow(200e-6)
    window.window_s = 200e-6  # start open: it must close
    poll = IdlePoll(loop, window)
    for _ in range(6):
        poll.kick(time.perf_counter())
        await asyncio.sleep(0.02)
    assert window.window_s == 0.0
    assert poll.polled_s < 0.01, poll.polled_s  # the polls before it shut, and two turns an event after


def test_the_adaptive_window_follows_the_haltpoll_rule() -> None:
    window = PollWindow(200e-6)
    assert window.window_s == 0.0  # shut until an idle period says a poll would have paid
    window.idled(80e-6)  # within the cap: open at a quarter of it
    assert window.window_s == pytest.approx(50e-6)
    window.idled(80e-6)  # still longer than the window: double
    assert window.window_s == pytest.approx(100e-6)
    window.idled(90e-6)  # caught by the poll: unchanged
    assert window.window_s == pytest.approx(100e-6)
    window.idled(150e-6)
    window.idled(190e-6)
    assert window.window_s == pytest.approx(200e-6)  # never past the cap
    window.idled(5e-3)  # past the cap: halve
    assert window.window_s == pytest.approx(100e-6)
    window.idled(5e-3)
    window.idled(5e-3)
    assert window.window_s == pytest.approx(25e-6)
    window.idled(5e-3)  # under an eighth of the cap: shut
    assert window.window_s == 0.0
    fixed = FixedWindow(300e-6)
    for idle in (1e-6, 250e-6, 1.0):
        fixed.idled(idle)
        assert fixed.window_s == pytest.approx(300e-6)


def test_the_listen_settings_choose_the_poller() -> None:
    loop = asyncio.new_event_loop()
    try:
        assert isinstance(idle_poll(loop, 0, 200).window, PollWindow)  # the default: adaptive
        assert type(idle_poll(loop, 0, 200).window) is PollWindow
        assert isinstance(idle_poll(loop, 500, 200).window, FixedWindow)  # a fixed window wins
        assert idle_poll(loop, 0, 0) is None
    finally:
        loop.close()


@pytest.mark.parametrize("window_us", [0, 300])
def test_busy_poll_us_is_read_from_the_config(window_us: int) -> None:
    from turbogate.config import parse_config

    cfg = parse_config({"listen": {"busy_poll_us": window_us},
                        "tenants": [{"name": "t", "key_sha256": "0" * 64}],
                        "pools": [{"name": "p", "models": ["m"], "replicas": [{"url": "http://127.0.0.1:9"}]}]})
    assert cfg.listen.busy_poll_us == window_us
    assert cfg.listen.idle_poll_max_us == 200  # the adaptive window's cap, on by default

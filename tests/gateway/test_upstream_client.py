"""The shared lean HTTP client against a tiny loopback server: keep-alive, chunked bodies, headers."""

from __future__ import annotations

import asyncio

import pytest

from turbogate.errors import UpstreamError
from turbogate.httpclient import UpstreamPool


async def _server(handler: object) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One request off the connection (its body read and dropped); its head."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    return head


async def test_keep_alive_headers_and_chunked_stream() -> None:
    heads: list[bytes] = []
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            heads.append(head)
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            if b"/stream" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n")
                for part in (b"data: 1\n\n", b"data: 2\n\n"):
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    server, url = await _server(handle)
    async with server:
        pool = UpstreamPool(url, headers={"Authorization": "Bearer engine-key"})
        for _ in range(3):
            resp = await pool.request(b"POST", "/v1/x", b'{"a":1}')
            assert (resp.status, resp.content_type, await resp.read()) == (200, b"application/json", b"{}")
            resp.release()
        resp = await pool.request(b"POST", "/stream", b"{}")
        chunks = []
        while chunk := await resp.next_chunk():
            chunks.append(chunk)
        resp.release()
        assert b"".join(chunks) == b"data: 1\n\ndata: 2\n\n"
        assert connections == 1  # every request reused the one keep-alive connection
        assert all(b"Authorization: Bearer engine-key" in h for h in heads)
        pool.close()


async def test_refused_connection_is_an_error_before_any_byte() -> None:
    server, url = await _server(lambda r, w: None)
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError) as info:
        await UpstreamPool(url, connect_timeout_s=1).request(b"GET", "/health")
    assert info.value.before_response


async def test_connection_dropped_mid_body_is_an_error_after_bytes() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.close()

    server, url = await _server(handle)
    async with server:
        resp = await UpstreamPool(url).request(b"GET", "/x")
        with pytest.raises(UpstreamError) as info:
            await resp.read()
        assert not info.value.before_response
        resp.release()


async def test_kept_alive_connection_closed_by_the_engine_is_retried_fresh() -> None:
    served = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await _read_request(reader)
        served += 1
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        # Then behave like an idle timeout that fires just as the next request is sent.
        await reader.read(1)
        writer.transport.abort()

    server, url = await _server(handle)
    async with server:
        pool = UpstreamPool(url)
        first = await pool.request(b"POST", "/x", b"{}")
        assert await first.read() == b"{}"
        first.release()
        second = await pool.request(b"POST", "/x", b"{}")  # reused, reset, retried on a new connection
        assert (second.status, await second.read()) == (200, b"{}")
        second.release()
        assert served == 2
        pool.close()


async def test_kept_headers_chunk_times_and_total_timeout() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if b"/slow" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\npart")
                await writer.drain()
                await reader.read(1)  # returns once the client drops the connection
                return
            writer.write(b"HTTP/1.1 200 OK\r\nServer-Timing: l1;dur=1\r\nX-Other: no\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
            await writer.drain()
            await asyncio.sleep(0.02)
            writer.write(b"1\r\nb\r\n0\r\n\r\n")
            await writer.drain()

    server, url = await _server(handle)
    async with server:
        pool = UpstreamPool(url, keep_headers=["server-timing", "X-Turbogate-Tier"])
        resp = await pool.request(b"POST", "/x", b"{}", headers=b"X-Turbogate-Tier: turbo\r\n")
        assert resp.headers == {"server-timing": "l1;dur=1"}
        assert await resp.next_chunk() == b"a"
        first = resp.chunk_at
        await asyncio.sleep(0.05)  # the second chunk arrives while nobody reads
        assert await resp.next_chunk() == b"b"
        assert 0.015 <= resp.chunk_at - first < 0.05  # its arrival time, not when it was read
        assert await resp.next_chunk() == b"" and resp.completed_at >= resp.chunk_at
        resp.release()
        slow = await pool.request(b"POST", "/slow", b"{}", timeout_s=0.1)
        with pytest.raises(UpstreamError) as info:
            await slow.read()
        assert info.value.timed_out and not info.value.before_response
        slow.release()
        pool.close()


async def test_a_marked_pool_sets_ip_tos_on_its_connections_and_an_unmarked_one_does_not() -> None:
    """DSCP marking: read IP_TOS back from the sockets of real connections (EF = 46 → TOS 0xb8)."""
    import socket

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    server, url = await _server(handle)
    async with server:
        marked, plain = UpstreamPool(url, tos=46 << 2), UpstreamPool(url)
        for pool in (marked, plain):
            for _ in range(2):  # the second request reuses the kept-alive, still marked connection
                resp = await pool.request(b"POST", "/v1/x", b"{}")
                assert await resp.read() == b"{}"
                resp.release()
        tos = {}
        for name, pool in (("marked", marked), ("plain", plain)):
            (conn,) = pool._idle
            assert conn.transport is not None
            sock = conn.transport.get_extra_info("socket")
            tos[name] = sock.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) & 0xFC  # the DSCP bits, not ECN's
            pool.close()
        assert tos == {"marked": 0xB8, "plain": 0}
    with pytest.raises(ValueError, match="tos"):
        UpstreamPool(url, tos=256)


async def test_a_marked_pool_reports_a_refused_connection_like_any_other() -> None:
    server, url = await _server(lambda r, w: None)
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamError) as info:
        await UpstreamPool(url, tos=0xB8).request(b"POST", "/v1/x")
    assert info.value.connect_failed and info.value.before_response


async def test_a_stream_released_unread_while_paused_leaves_a_connection_that_still_reads() -> None:
    """A stream that arrives in one burst of more than ``_PAUSE_AT`` chunks pauses reading; the
    answer is nonetheless complete.  Released with chunks unread (the gateway's client left
    mid-stream), the connection goes back to the pool: it must read again, or the next request
    on it waits for ever (the fuzz suite's rare 10 s hang)."""
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            head = await _read_request(reader)
            if b"/stream" in head:
                parts = [b"%x\r\n%s\r\n" % (len(p), p) for p in (b"data: %d\n\n" % i for i in range(200))]
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(parts) + b"0\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    server, url = await _server(handle)
    async with server:
        pool = UpstreamPool(url)
        resp = await pool.request(b"POST", "/stream", b"{}")
        assert await resp.next_chunk()
        conn = resp._conn
        deadline = asyncio.get_running_loop().time() + 10
        while not conn._complete:  # the whole burst parsed, reading paused on the way
            assert asyncio.get_running_loop().time() < deadline, "the stream never completed"
            await asyncio.sleep(0.01)
        assert conn._paused  # (the case under test: reading paused, answer complete)
        resp.release()  # most chunks never read
        resp = await asyncio.wait_for(pool.request(b"POST", "/v1/x", b"{}"), 5)
        assert await asyncio.wait_for(resp.read(), 5) == b"{}"
        resp.release()
        assert connections == 1  # the same connection, reused
        pool.close()

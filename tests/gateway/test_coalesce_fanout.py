"""The fan-out buffer of a shared call (gateway/coalesce.py), on asyncio without sockets: a member
that comes late gets the answer so far at once and then follows live; one that leaves stops;
the call's own receive reports a disconnect only when every member has left."""

from __future__ import annotations

import asyncio

from turbogate.asgi import Message
from turbogate.gateway.coalesce import SharedAnswer

START: Message = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}


def chunk(data: bytes, more: bool = True) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


class Client:
    def __init__(self) -> None:
        self.got: list[Message] = []
        self.leave = asyncio.Event()

    async def send(self, message: Message) -> None:
        self.got.append(message)

    async def receive(self) -> Message:
        await self.leave.wait()
        return {"type": "http.disconnect"}

    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.got)


async def test_late_member_replays_then_follows_live_and_leaver_stops() -> None:
    shared = SharedAnswer()
    early, late, leaver = Client(), Client(), Client()
    await shared.record(START)
    await shared.record(chunk(b"data: 1\n\n"))
    early_task = asyncio.create_task(shared.relay(early.send, early.receive, []))
    leaver_task = asyncio.create_task(shared.relay(leaver.send, leaver.receive, [(b"x-turbogate-coalesced", b"true")]))
    await asyncio.sleep(0)
    await shared.record(chunk(b"data: 2\n\n"))
    leaver.leave.set()
    assert await asyncio.wait_for(leaver_task, 5) is None  # left before the end
    late_task = asyncio.create_task(shared.relay(late.send, late.receive, []))
    await asyncio.sleep(0)
    assert late.body() == b"data: 1\n\ndata: 2\n\n"  # the answer so far, at once
    await shared.record(chunk(b"data: [DONE]\n\n", more=False))
    assert await asyncio.wait_for(early_task, 5) == 200
    assert await asyncio.wait_for(late_task, 5) == 200
    assert early.body() == late.body() == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    assert (b"x-turbogate-coalesced", b"true") in leaver.got[0]["headers"]
    assert (b"x-turbogate-coalesced", b"true") not in early.got[0]["headers"]  # the shared message is untouched


async def test_an_ended_call_always_ends_every_answer() -> None:
    nothing, cut = SharedAnswer(), SharedAnswer()
    await nothing.end()  # no byte ever came: members get an OpenAI error, not a hang
    client = Client()
    assert await asyncio.wait_for(nothing.relay(client.send, client.receive, []), 5) == 502
    await cut.record(START)
    await cut.end()  # cut off midway: the answer is closed
    client = Client()
    assert await asyncio.wait_for(cut.relay(client.send, client.receive, []), 5) == 200
    assert client.got[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_the_call_hears_a_disconnect_only_when_all_are_gone() -> None:
    shared = SharedAnswer()
    heard = asyncio.create_task(shared.receive())
    await asyncio.sleep(0)
    assert not heard.done()
    shared.all_gone()
    assert (await asyncio.wait_for(heard, 5))["type"] == "http.disconnect"

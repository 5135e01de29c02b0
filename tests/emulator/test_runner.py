"""The real-time runner in-process: EngineLoop's results handed to waiting requests."""

from __future__ import annotations

import asyncio

import pytest

from turbogate.emulator.metrics import EmulatorMetrics
from turbogate.emulator.runner import Aborted, EngineRunner, Handle, StreamItem
from turbogate.engine import Engine, EngineConfig, Finished, Request
from turbogate.perf import deployment, get_gpu, get_model

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))


async def drain(handle: Handle) -> list[StreamItem | None]:
    assert handle.queue is not None
    items: list[StreamItem | None] = []
    while True:
        item = await asyncio.wait_for(handle.queue.get(), timeout=30)
        items.append(item)
        if item is None or item[1] is not None:
            return items


async def test_streams_get_one_item_per_step_and_plain_requests_their_result() -> None:
    engine = Engine(DEP, EngineConfig())
    runner = EngineRunner(engine, EmulatorMetrics(engine, "m"), time_scale=0)
    runner.start()
    try:
        streamed = runner.submit(Request("s", 40, 7, finish_reason="stop"), stream=True)
        plain = runner.submit(Request("p", 900, 5), stream=False)
        items = await drain(streamed)
        assert items == [(n, None) for n in range(1, 7)] + [(7, "stop")]
        assert await asyncio.wait_for(plain.done, timeout=30) == Finished("p", 5, "length")
    finally:
        await runner.stop()
    # At time scale 0 no virtual time passes while idle: the clock is the engine's busy time.
    assert runner._anchor_v == pytest.approx(engine.stats().busy_time)
    assert not engine.has_work()


async def test_abort_ends_a_stream_and_fails_a_waiter() -> None:
    engine = Engine(DEP, EngineConfig())
    runner = EngineRunner(engine, EmulatorMetrics(engine, "m"), time_scale=0)
    runner.start()
    try:
        streamed = runner.submit(Request("s", 40, 10_000), stream=True)
        plain = runner.submit(Request("p", 40, 10_000), stream=False)
        assert streamed.queue is not None
        first = await asyncio.wait_for(streamed.queue.get(), timeout=30)
        assert first == (1, None)
        runner.abort("s")
        runner.abort("p")
        items = await drain(streamed)
        assert items[-1] is None
        with pytest.raises(Aborted):
            await plain.done
        assert "s" not in engine and "p" not in engine
        assert engine.stats().kv_blocks_used == 0
    finally:
        await runner.stop()

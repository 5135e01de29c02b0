"""``emulate --engine-profile`` runs the profile's engine, the one ``sim`` runs for that profile."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from tests.sim.helpers import sim_config
from turbogate.cli import app as cli_app
from turbogate.emulator.app import EmulatorApp
from turbogate.emulator.runner import StreamItem
from turbogate.engine import Engine, EngineLoop, Request
from turbogate.perf.profiles import get_profile
from turbogate.sim.build import build_replicas
from turbogate.sim.cli import profiled_fleet
from turbogate.sim.replica import SimReplica

# A long request alone in the first step, two short ones queued behind it: under vLLM V0 their prefill
# runs without the first one's decode and decodes go in multi-step runs; under V1 they share steps.
REQUESTS = (Request("a", 512, 37), Request("b", 256, 23), Request("c", 300, 19))


def emulator(monkeypatch: pytest.MonkeyPatch, *options: str) -> EmulatorApp:
    """The app ``turbogate emulate OPTIONS`` would serve (the server is not started)."""
    served: list[EmulatorApp] = []
    monkeypatch.setattr("turbogate.emulator.server.run_server", lambda app, *_a, **_k: served.append(app))
    result = CliRunner().invoke(cli_app, ["emulate", "--time-scale", "0", *options])
    assert result.exit_code == 0, result.output
    assert len(served) == 1
    return served[0]


def sim_replica(engine_profile: str) -> SimReplica:
    """The first replica ``sim --engine-profile ENGINE_PROFILE`` would run for the test fleet (L4, 8 seqs)."""
    sc = sim_config()
    return build_replicas(replace(sc, fleet=profiled_fleet(sc.fleet, engine_profile, None)))[0][0]


def sim_finish_times(loop: EngineLoop) -> dict[str, float]:
    """Every request submitted at once at t = 0; when each finishes, in virtual seconds."""
    for req in REQUESTS:
        loop.submit(req, 0.0)
    done: dict[str, float] = {}
    while (end := loop.next_time()) is not None:
        done.update((f.request_id, end) for f in loop.advance(end).finished)
    return done


def sim_first_token_times(loop: EngineLoop) -> dict[str, float]:
    """Every request submitted at once at t = 0; when the sim's replica reports each first token."""
    for req in REQUESTS:
        loop.submit(req, 0.0)
    first: dict[str, float] = {}
    while (end := loop.next_time()) is not None:
        first.update((rid, end) for rid in loop.advance(end).first_token)
    return first


async def emulator_first_chunk_times(app: EmulatorApp) -> dict[str, float]:
    """The same requests streamed through the emulator's runner at time scale 0: the model time at which
    each stream's first chunk is handed out."""
    await app.startup()
    runner = app.runner
    assert runner is not None
    first: dict[str, float] = {}

    class Stamped(asyncio.Queue[StreamItem | None]):
        def __init__(self, rid: str) -> None:
            super().__init__()
            self.rid = rid

        def put_nowait(self, item: StreamItem | None) -> None:
            first.setdefault(self.rid, runner.model_now())
            super().put_nowait(item)

    try:
        handles = [runner.submit(req, stream=True) for req in REQUESTS]
        for h in handles:  # before the engine task delivers its first step
            h.queue = Stamped(h.request_id)
        await asyncio.wait_for(asyncio.gather(*(h.done for h in handles)), timeout=60)
    finally:
        await app.shutdown()
    return first


async def emulator_finish_times(app: EmulatorApp) -> dict[str, float]:
    """The same requests through the emulator's runner at time scale 0 (its clock: the model's)."""
    await app.startup()
    runner = app.runner
    assert runner is not None
    done: dict[str, float] = {}
    try:
        handles = [runner.submit(req, stream=False) for req in REQUESTS]
        for h in handles:  # the result is set as its step is delivered, before the runner moves on
            h.done.add_done_callback(lambda _f, rid=h.request_id: done.setdefault(rid, runner.model_now()))
        await asyncio.wait_for(asyncio.gather(*(h.done for h in handles)), timeout=60)
    finally:
        await app.shutdown()
    return done


def test_vllm_v0_emulator_carries_v0_scheduling_and_the_default_the_plain_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    v0 = get_profile("vllm-v0")
    default = emulator(monkeypatch).engine
    emulated = emulator(monkeypatch, "--engine-profile", "vllm-v0").engine
    assert (default.config.chunked_prefill, default.config.num_scheduler_steps) != (v0.chunked_prefill,
                                                                                    v0.num_scheduler_steps)
    assert emulated.config == replace(default.config, chunked_prefill=v0.chunked_prefill,
                                      num_scheduler_steps=v0.num_scheduler_steps,
                                      output_lag_steps=v0.output_lag_steps)
    assert emulated.deployment.factors == v0.factors


async def test_emulator_and_sim_answer_at_the_same_model_times_under_vllm_v0(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rep = sim_replica("vllm-v0")
    group = sim_config().fleet.pools[0].replicas[0]
    app = emulator(monkeypatch, "--engine-profile", "vllm-v0", "--gpu", group.gpu, "--model", group.model,
                   "--max-num-seqs", str(group.max_num_seqs),
                   "--max-num-batched-tokens", str(group.max_num_batched_tokens))
    assert app.engine.config == rep.config and app.engine.deployment == rep.deployment

    expected = sim_finish_times(rep.loop)
    assert await emulator_finish_times(app) == pytest.approx(expected)
    assert app.engine.stats().steps == rep.loop.engine.stats().steps
    # the case tells the schedulers apart: the default profile's engine answers at other times
    assert sim_finish_times(sim_replica("vllm-v1").loop) != pytest.approx(expected)


async def test_emulator_and_sim_show_the_first_token_after_vllm_v0s_output_lag(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The profile's output lag holds each first token one step in the engine both instruments run:
    the emulator's first chunk and the sim's first token come at the same model time, one step after
    the step that sampled it (what ``plan burst`` and the fidelity replay answer)."""
    rep = sim_replica("vllm-v0")
    assert rep.config.output_lag_steps == get_profile("vllm-v0").output_lag_steps == 1
    group = sim_config().fleet.pools[0].replicas[0]
    app = emulator(monkeypatch, "--engine-profile", "vllm-v0", "--gpu", group.gpu, "--model", group.model,
                   "--max-num-seqs", str(group.max_num_seqs),
                   "--max-num-batched-tokens", str(group.max_num_batched_tokens))
    expected = sim_first_token_times(rep.loop)
    assert set(expected) == {r.request_id for r in REQUESTS}
    assert await emulator_first_chunk_times(app) == pytest.approx(expected)

    # Without the lag the same engine, stepping at the same times, shows each first token at the end of
    # the step that sampled it: the lagged one is the end of the step after that.
    plain = EngineLoop(Engine(rep.deployment, replace(rep.config, output_lag_steps=0)))
    for req in REQUESTS:
        plain.submit(req, 0.0)
    ends: list[float] = []
    sampled: dict[str, float] = {}
    while (end := plain.next_time()) is not None:
        sampled.update((rid, end) for rid in plain.advance(end).first_token)
        ends.append(end)
    for rid, at in expected.items():
        assert at == pytest.approx(ends[ends.index(sampled[rid]) + 1])

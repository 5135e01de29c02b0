"""replay.closed_loop's client start: the benchmarks' protocol (every client at t = 0, fixed lengths) and the
staggered start the calibration replays (plan/fidelity.py CLOSED_LOOP_START)."""

from __future__ import annotations

import pytest

from turbogate.engine import EngineConfig
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.cells import published_cells
from turbogate.perf.profiles import get_profile
from turbogate.plan import fidelity
from turbogate.plan.replay import ReplayResult, Timing, closed_loop, fixed

DEP = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b")).with_factors(frontend_s=0.005,
                                                                              frontend_per_token_s=0.00003)
CFG = EngineConfig(max_num_batched_tokens=8192)
CLIENTS = 4


def _cycles(run: ReplayResult) -> list[list[Timing]]:
    """The run's requests in send order, one list per round of the clients."""
    ordered = sorted(run.timings, key=lambda t: (t.arrival, t.ttft))
    return [ordered[i:i + CLIENTS] for i in range(0, len(ordered), CLIENTS)]


def test_a_group_that_fits_one_step_stays_locked_and_every_ttft_is_the_groups_prefill() -> None:
    prompt = 500
    assert CLIENTS * prompt <= CFG.max_num_batched_tokens
    run = closed_loop(DEP, CFG, CLIENTS, 6 * CLIENTS, fixed(prompt, 64), start="together")
    group = DEP.frontend_time(prompt) + DEP.step_time(CLIENTS * prompt, 0, 0, 0, prefill_seqs=CLIENTS)
    for cycle in _cycles(run):
        assert len({t.arrival for t in cycle}) == 1 and len({t.finish for t in cycle}) == 1  # sent and done together
        assert [t.ttft for t in cycle] == pytest.approx([group] * CLIENTS, rel=1e-9)
    alone = DEP.frontend_time(prompt) + DEP.prefill_time(prompt)
    assert group > 2 * alone  # the lock, not the prompt, sets the TTFT
    # Staggered with a spread of outputs, the same clients mostly prefill alone.
    staggered = closed_loop(DEP, CFG, CLIENTS, 6 * CLIENTS, fixed(prompt, 64), output_spread=0.2)
    assert staggered.steady(CLIENTS).ttft("mean") < 0.6 * run.steady(CLIENTS).ttft("mean")


def test_a_group_that_needs_several_chunked_steps_stays_grouped_too() -> None:
    # The first tokens come a few steps apart, but every running request decodes a token in each of those
    # steps, so the requests finish a few decode steps apart, return within the next long prefill and queue
    # behind it again: the same TTFTs, round after round.
    prompt = 5000
    assert CLIENTS * prompt > CFG.max_num_batched_tokens
    run = closed_loop(DEP, CFG, CLIENTS, 6 * CLIENTS, fixed(prompt, 64), start="together")
    cycles = _cycles(run)
    alone = DEP.frontend_time(prompt) + DEP.prefill_time(prompt)
    steady = [sorted(t.ttft for t in cycle) for cycle in cycles[2:]]  # the herd's round and the next one settle
    for later in steady[1:]:
        assert later == pytest.approx(steady[0], rel=1e-6)
    assert steady[0][0] == pytest.approx(alone, rel=1e-6)  # the first back is prefilled alone ...
    assert steady[0][-1] > 2 * alone  # ... and the others wait behind it
    for cycle in cycles:
        assert max(t.finish for t in cycle) - min(t.finish for t in cycle) < DEP.prefill_time(prompt)


def test_the_start_is_checked_and_a_together_run_repeats() -> None:
    with pytest.raises(ValueError):
        closed_loop(DEP, CFG, 2, 4, fixed(100, 8), start="random")  # type: ignore[arg-type]
    a = closed_loop(DEP, CFG, 3, 9, fixed(700, 16), start="together")
    assert a.timings == closed_loop(DEP, CFG, 3, 9, fixed(700, 16), start="together").timings
    assert sorted(t.arrival for t in a.timings)[:3] == [0.0] * 3


def test_the_calibration_replays_a_published_cell_under_either_start() -> None:
    """``fidelity.engine`` takes the client start and the output spread, so the two bounds of a closed loop
    (benchmarks/closed_loop_lock.py) come from the calibration's own replay; the defaults are its constants."""
    cell = next(c for c in published_cells() if c.id == "nim18-70b-h100tp2-5000-500-c5-ttft")
    profile = get_profile(cell.engine_profile)
    default = fidelity.engine(cell, profile).predicted
    free = fidelity.engine(cell, profile, start=fidelity.CLOSED_LOOP_START,
                           output_spread=fidelity.CLOSED_LOOP_OUTPUT_SPREAD).predicted
    locked = fidelity.engine(cell, profile, start="together", output_spread=0.0).predicted
    assert free == default
    assert locked > 2 * free  # five 5,000-token prompts queue behind each other on every round

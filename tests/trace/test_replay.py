"""Replaying a trace: the window, the speed-up, the tiers, and the same requests in bench and sim."""

from __future__ import annotations

from pathlib import Path

import pytest

from turbogate.bench.options import build_load, with_trace
from turbogate.bench.workload import TierMix
from turbogate.emulator.tokens import CharEstimator, chat_prompt_tokens, completion_prompt_tokens
from turbogate.sim.requests import RequestSource
from turbogate.trace.format import Trace, TraceError, TraceHeader, TraceRequest, dump_lines
from turbogate.trace.importers import load_trace
from turbogate.trace.replay import ReplayOptions, bench_schedule, parse_window, plan_replay

EXCERPT = Path(__file__).resolve().parents[2] / "examples" / "traces" / "azure-conv-2min.csv"


def _load(**kw: object) -> object:
    args: dict[str, object] = dict(
        shape=None, qps=None, qps_start=None, qps_end=None, steps=4, duration=60.0, arrivals="poisson",
        burstiness=1.0, prompt_tokens="100", output_tokens="10", dataset=None, no_seed=False,
        tiers="turbo=0.25,standard=0.75", n_api_keys=2, random_seed=5, slo=None, knee_method="throughput",
        knee_k=2.0, knee_metric="e2e", fleet_cost=1.0, tier_cost=None)
    args.update(kw)
    return build_load(**args)  # type: ignore[arg-type]


def test_window_and_speedup_keep_every_gap_divided() -> None:
    trace = load_trace(EXCERPT)
    replay = plan_replay(trace, ReplayOptions(speedup=4.0, window=parse_window("30:90"), steps=3))
    inside = [r for r in trace.requests if 30 <= r.t < 90]
    assert len(replay.items) == len(inside) > 100
    for item, r in zip(replay.items, inside, strict=True):
        assert item.t == pytest.approx((r.t - 30) / 4, abs=1e-9)
        assert (item.prompt_tokens, item.output_tokens, item.trace_t) == (r.prompt_tokens, r.output_tokens, r.t)
    assert replay.duration_s == pytest.approx(15.0)
    assert [round(s.end_s, 6) for s in replay.steps] == [5.0, 10.0, 15.0]
    assert sum(s.offered_rps * s.duration_s for s in replay.steps) == pytest.approx(len(inside))


def test_bad_windows_are_named() -> None:
    with pytest.raises(TraceError, match="--window"):
        parse_window("90:30")
    with pytest.raises(TraceError, match="--window: '5' must be START:END"):
        parse_window("5")
    with pytest.raises(TraceError, match="holds none"):
        plan_replay(load_trace(EXCERPT), ReplayOptions(window=parse_window("1h:2h")))
    assert parse_window("10m:") == (600.0, None)


def test_tiers_by_stable_hash_are_the_same_in_any_window_and_speed() -> None:
    trace = load_trace(EXCERPT)
    share = TierMix.parse("turbo=0.3,standard=0.7")
    whole = plan_replay(trace, ReplayOptions(share=share))
    part = plan_replay(trace, ReplayOptions(share=share, speedup=3.0, window=parse_window("60:120")))
    tiers = {i.trace_t: i.tier for i in whole.items}
    assert all(tiers[i.trace_t] == i.tier for i in part.items)
    turbo = sum(i.tier == "turbo" for i in whole.items) / len(whole.items)
    assert 0.22 < turbo < 0.38  # ~450 draws of a 0.3 share


def test_the_trace_tier_wins_then_the_tenant_rule_then_the_share() -> None:
    reqs = (TraceRequest(0.0, 10, 5, "acme", "relax"), TraceRequest(1.0, 10, 5, "acme"),
            TraceRequest(2.0, 10, 5, "beta"), TraceRequest(3.0, None, None, "beta", status=429))
    trace = Trace(TraceHeader("test"), reqs)
    opts = ReplayOptions(share=TierMix.parse("standard=1"), by_tenant={"acme": "turbo"})
    items = plan_replay(trace, opts).items
    assert [i.tier for i in items] == ["relax", "turbo", "standard", "standard"]
    assert (items[3].prompt_tokens, items[3].output_tokens) == (10, 5)  # unknown: the median of the known
    items = plan_replay(trace, ReplayOptions(share=TierMix.parse("standard=1"), by_tenant={"acme": "turbo"},
                                             reassign=True)).items
    assert items[0].tier == "turbo"


@pytest.mark.parametrize("chat", [True, False])
def test_bench_and_sim_replay_the_same_requests(tmp_path: Path, chat: bool) -> None:
    reqs = tuple(TraceRequest(0.25 * i, 11 + 37 * i, 3 + i, ("acme", "beta", None)[i % 3]) for i in range(30))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(dump_lines(Trace(TraceHeader("test"), reqs))))
    load = with_trace(_load(), path, speedup=2.0)  # type: ignore[arg-type]
    replay = load.trace
    assert replay is not None and load.duration_s == pytest.approx(7.25 / 2)
    bench = bench_schedule(replay, chat=chat, seed=load.random_seed, n_api_keys=2)
    sim = list(RequestSource(load, chat=chat))
    est = CharEstimator()
    assert len(bench) == len(sim) == 30
    for b, s, r in zip(bench, sim, reqs, strict=True):
        engine = chat_prompt_tokens(est, [b.spec.prompt]) if chat else completion_prompt_tokens(est, b.spec.prompt)
        assert engine == s.prompt_tokens == max(r.prompt_tokens or 0, 11 if chat else 2)  # exact past the framing
        assert b.t == s.t == pytest.approx(r.t / 2)
        assert b.spec.max_tokens == s.max_tokens == s.output_tokens == r.output_tokens
        assert (b.spec.tier, b.spec.api_key, b.spec.seed, b.step) == (s.tier, s.api_key, s.seed, s.step)
    keys = {r.tenant: b.spec.api_key for b, r in zip(bench, reqs, strict=True)}
    assert keys == {"acme": 0, "beta": 1, None: 0}

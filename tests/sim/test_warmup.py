"""A warm-up before a simulated run: unrecorded traffic first, then the same measured requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sim.helpers import MODEL, gateway_data, sim_config
from turbogate.config import parse_config
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate


def test_warmup_leaves_the_measured_requests_and_their_times_as_a_cold_run_has_them() -> None:
    # An idle fleet (one request every 5 s): the warm-up's requests are long gone when measuring
    # starts, so every measured record is the cold run's, times shifted back onto the run's axis.
    cold = simulate(sim_config(qps=0.2, duration=30.0, arrivals="constant"))
    warm = simulate(replace(sim_config(qps=0.2, duration=30.0, arrivals="constant"), warmup_s=20.0))
    assert [r.id for r in warm.records] == [r.id for r in cold.records] == list(range(6))
    for a, b in zip(cold.records, warm.records, strict=True):
        assert (a.scheduled_s, a.tier_asked, a.prompt_tokens, a.output_tokens) == \
               (b.scheduled_s, b.tier_asked, b.prompt_tokens, b.output_tokens)
        assert b.sent_s == pytest.approx(a.sent_s) and b.end_s == pytest.approx(a.end_s)
        assert b.ttft_s == pytest.approx(a.ttft_s) and b.ok
    assert warm.steps == cold.steps


def test_a_warm_gateway_has_learned_each_replicas_limit_before_measuring() -> None:
    # 32-seq engines behind the default adaptive limit (it starts at 8 and slow-starts), at a
    # load above what those first limits carry (below it a learning pool does not hold the
    # lower tiers back: sched/admission.py ``_calm``): cold, the first Standard requests wait
    # in the gateway while the limit grows; after a warm-up at the same rate the limit is
    # already there.
    gw = gateway_data()
    gw["pools"][0]["replicas"][0]["max_concurrency"] = 32
    # The rate and the 0.2 s bound were chosen against the base perf model (issue 40's profiles came later).
    fleet = parse_fleet({"pools": [{"name": "p", "replicas": [{"count": 2, "gpu": "L4", "model": MODEL,
                                                                 "max_num_seqs": 32, "engine_profile": "base"}]}]})
    base = replace(sim_config(qps=12.0, duration=20.0), gateway=parse_config(gw), fleet=fleet)

    def early_standard_ttft_max(warmup_s: float) -> float:
        out = simulate(replace(base, warmup_s=warmup_s))
        assert all(r.ok for r in out.records) and len(out.records) == 227
        return max(r.ttft_s or 0.0 for r in out.records if r.scheduled_s < 5 and r.tier_asked == "standard")

    cold, warm = early_standard_ttft_max(0.0), early_standard_ttft_max(30.0)
    assert warm < 0.2  # warm: no wait beyond an unloaded TTFT (~0.1 s) ...
    assert cold > 2 * warm  # ... where the cold slow start shows

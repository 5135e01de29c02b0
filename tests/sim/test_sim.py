"""The simulator in virtual time: the gateway's own Flow over engine loops, no sockets."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sim.helpers import gateway_data, sim_config
from turbogate.config import parse_config
from turbogate.results import ALL
from turbogate.sim.replica import group_deployment
from turbogate.sim.run import simulate, summarize_sim

NET = {"network": {"client_gateway_ms": 1.0, "gateway_replica_ms": 0.5}}


def test_an_idle_fleet_answers_in_one_prefill_step_plus_the_network() -> None:
    # One request every 5 s: each finds the fleet idle, so TTFT is the wire plus one prefill step.
    sc = sim_config(fleet_extra=NET, qps=0.2, duration=30.0, arrivals="constant")
    out = simulate(sc)
    dep = group_deployment(sc.fleet.pools[0].replicas[0])
    prompt = 128 + 10  # chat framing, as the emulator counts it
    wire = 2 * 0.001 + 2 * 0.0005
    assert len(out.records) == 6
    for r in out.records:
        assert r.ok and r.status == 200 and r.prompt_tokens == prompt and r.output_tokens == 48
        assert r.ttft_s == pytest.approx(wire + dep.step_time(prompt, 0, 0, 0, prefill_seqs=1), rel=1e-9)
        assert r.e2e_s is not None and r.ttft_s < r.e2e_s
        assert r.tpot_s == pytest.approx((r.e2e_s - r.ttft_s) / 47)
        assert r.replica in ("p/0", "p/1") and r.tier_served == r.tier_asked


def test_every_request_gets_one_record_and_runs_are_reproducible() -> None:
    sc = sim_config(qps_start=1.0, qps_end=12.0, steps=3, duration=30.0)
    a, b = simulate(sc), simulate(sc)
    assert [r.id for r in a.records] == list(range(len(a.records)))
    assert a.records == b.records
    assert [s.index for s in a.steps] == [0, 1, 2]
    assert any(not r.ok for r in a.records) or max(r.ttft_s or 0 for r in a.records) > 1.0  # overload shows


def test_summary_is_a_sim_run_with_steps_and_a_knee() -> None:
    sc = sim_config(qps_start=1.0, qps_end=12.0, steps=4, duration=40.0)
    summary = summarize_sim(sc, simulate(sc))
    assert summary.kind == "sim" and len(summary.steps) == 4
    assert summary.config["policy"] == "turbogate" and summary.config["replicas"] == 2
    assert summary.knee(ALL) is not None


def test_a_replica_outage_loses_no_request() -> None:
    outage = {"failures": [{"replica": "p/1", "down_at_s": 8.0, "up_at_s": 16.0}]}
    sc = sim_config(fleet_extra=outage, qps=3.0, duration=24.0)
    out = simulate(sc)
    n = len(out.records)
    assert n > 50 and len({r.id for r in out.records}) == n
    # While p/1 is down nothing it serves can finish there.
    assert not [r for r in out.records if r.replica == "p/1" and r.ok and r.end_s is not None
                and r.sent_s is not None and r.sent_s > 8.0 and r.end_s < 16.0]
    # p/1 serves again after it recovers.
    assert any(r.replica == "p/1" and r.ok and r.sent_s is not None and r.sent_s > 17.0 for r in out.records)
    # Streams that had begun on p/1 break (no retry after bytes) and end as the flow closes them,
    # a 502 as the gateway's; nothing else fails upstream: a request caught before its first
    # byte, or refused while p/1 is down, goes to p/0.
    broken = [r for r in out.records if r.error and "stream broke" in r.error]
    assert broken and all(r.replica == "p/1" and r.scheduled_s < 8.0 and r.status == 502 for r in broken)
    assert not [r for r in out.records if (r.status == 502 and r not in broken) or r.status is None]


@pytest.mark.parametrize("policy", ["fifo", "round-robin", "least-outstanding"])
def test_baseline_policies_run(policy: str) -> None:
    out = simulate(sim_config(policy=policy, qps=2.0, duration=10.0))
    assert out.records and all(r.ok for r in out.records)


def test_the_pools_knee_guard_serves_turbo_as_standard_past_the_knee() -> None:
    # The gateway config's knee_rps reaches the simulated Flow: past it Turbo is granted as Standard.
    data = gateway_data()
    data["pools"][0]["knee_rps"] = 1.0
    sc = replace(sim_config(qps=6.0, duration=30.0), gateway=parse_config(data))
    out = simulate(sc)
    turbo = [r for r in out.records if r.tier_asked == "turbo"]
    assert turbo and any(r.tier_served == "standard" for r in turbo)
    plain = simulate(sim_config(qps=6.0, duration=30.0))
    assert all(r.tier_served == "turbo" for r in plain.records if r.tier_asked == "turbo" and r.status == 200)

"""The machine-bound verdict (bench/machine.py): synthetic runs whose fleet or machine saturates first."""

from __future__ import annotations

import os
import socket

import pytest

from tests.bench.synthetic import held_steps
from turbogate.bench.machine import (
    BEHIND_SAMPLE,
    CPU_SAMPLE,
    LocalCpu,
    apply_verdict,
    bound_line,
    judge,
    listening_pids,
)
from turbogate.bench.run import knee_line
from turbogate.results import ALL, Sample, Summary

CAPACITY = 20.0  # req/s the synthetic fleet completes
RATES = (5.0, 10.0, 15.0, 25.0, 30.0, 35.0)
STEP_S = 10.0


def _run(lag_from: float | None = None) -> Summary:
    """A ramp over RATES; the fleet completes at most CAPACITY req/s (the rest is shed), and from the rate
    ``lag_from`` on the bench sent each request 80 ms late (beyond a tenth of their 0.5 s)."""
    def fate(_k: int, j: int, rate: float) -> tuple[str, bool, float]:
        shed = rate > CAPACITY and (j % int(rate)) >= CAPACITY
        return "standard", shed, 0.08 if lag_from is not None and rate >= lag_from else 0.0

    return held_steps(RATES, STEP_S, fate)


def _behind(from_rate: float | None, share: float = 0.2) -> list[Sample]:
    """An emulator's lost-clock counter, growing by ``share`` per second from the step at ``from_rate``."""
    out, total = [], 0.0
    for t in range(int(len(RATES) * STEP_S) + 1):
        rate = RATES[min(len(RATES) - 1, int(t // STEP_S))]
        out.append(Sample(float(t), "http://e1/metrics", BEHIND_SAMPLE, total))
        if from_rate is not None and rate >= from_rate:
            total += share
    return out


def test_a_fleet_that_saturates_first_keeps_its_knee_and_recommendation() -> None:
    s = _run()
    assert s.knees[ALL].verdict == "knee"
    v = judge(s, _behind(None))
    assert not v.saturated_first and v.first_bound is None
    out = apply_verdict(s, v)
    assert out.recommendation == s.recommendation and out.knees[ALL].value == s.knees[ALL].value
    assert out.config["machine"]["saturated_first"] is False and bound_line(out) is None


def test_an_emulator_behind_its_clock_below_the_knee_bounds_the_run() -> None:
    s = _run()
    v = judge(s, _behind(15.0))
    assert v.saturated_first and v.first_bound is not None and v.first_bound.offered_rps == 15.0
    assert v.bound_at_rps == 10.0
    out = apply_verdict(s, v)
    assert all(k.value is None for k in out.knees.values())
    assert out.recommendation.startswith("No fleet recommendation")
    assert "add replicas" not in out.recommendation and "sell it" not in out.recommendation
    assert "bounded by this machine at 10 req/s; the fleet's knee is above 10" in out.recommendation
    assert knee_line(out).startswith("knee — bounded by this machine at 10 req/s")
    assert Summary.from_dict(out.to_dict()).config["machine"]["bound_at_rps"] == 10.0  # survives summary.json


def test_a_machine_that_saturates_only_past_the_knee_leaves_the_knee() -> None:
    v = judge(_run(), _behind(30.0))
    assert v.first_bound is not None and not v.saturated_first
    assert "only past the fleet's knee" in v.line()


def test_dispatch_lag_counts_against_the_requests_own_latency() -> None:
    v = judge(_run(lag_from=15.0), [])
    assert v.saturated_first and v.first_bound is not None and v.first_bound.offered_rps == 15.0
    assert "dispatch lag" in v.first_bound.why[0]
    # Under a looser limit (what a run with slow requests is judged by), the same lag is not machine-bound.
    slow = judge(_run(lag_from=15.0), [], max_lag_s=0.1)
    assert slow.first_bound is None


def test_a_busy_gateway_process_is_read_from_proc_and_bounds_the_run() -> None:
    cpu = [Sample(float(t), "cpu:http://127.0.0.1:1", CPU_SAMPLE, 0.95 * max(0, t - 20), {"pid": "7"})
           for t in range(61)]
    v = judge(_run(), cpu)  # a whole core's worth from t = 20 s, the 15 req/s step
    assert v.saturated_first and v.first_bound is not None and v.first_bound.offered_rps == 15.0
    assert "gateway CPU" in v.first_bound.why[0]


@pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="Linux /proc only")
def test_local_cpu_finds_the_process_listening_on_a_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert os.getpid() in listening_pids(port)
        samples = LocalCpu(f"http://127.0.0.1:{port}").read(0.0)
        assert [int(x.labels["pid"]) for x in samples] == [os.getpid()] and samples[0].value > 0
    assert LocalCpu("http://example.invalid:80").pids == []

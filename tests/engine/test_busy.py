"""DCGM-like busy shares from the step model (engine/busy.py): prefill is tensor-bound, decode
bandwidth-bound, a step in flight counts only its elapsed part, and the window averages."""

from __future__ import annotations

import pytest

from turbogate.engine import Engine, EngineConfig, Request
from turbogate.engine.busy import BusyMeter, BusyTotals, BusyWindow
from turbogate.perf import deployment, get_gpu, resolve_model


def _dep(gpu: str = "H100-SXM"):  # type: ignore[no-untyped-def]
    return deployment(get_gpu(gpu), resolve_model("llama-3.1-8b"))


def _shares(meter: BusyMeter, duration: float) -> tuple[float, float, float, float]:
    t = meter.totals(duration)
    return t.gpu / duration, t.sm / duration, t.tensor / duration, t.dram / duration


@pytest.mark.parametrize("gpu", ["H100-SXM", "A100-80G-SXM", "L4"])
def test_prefill_is_tensor_bound_and_decode_bandwidth_bound(gpu: str) -> None:
    dep = _dep(gpu)
    prefill = BusyMeter(dep)
    d = dep.step_time(8192, 0, 0)
    prefill.step(0.0, d, 8192, 0, 0)
    gpu_p, sm_p, tensor_p, dram_p = _shares(prefill, d)
    decode = BusyMeter(dep)
    ctx = 64 * 1500
    d2 = dep.step_time(0, 64, ctx)
    decode.step(0.0, d2, 0, 64, ctx)
    gpu_d, sm_d, tensor_d, dram_d = _shares(decode, d2)
    assert gpu_p == pytest.approx(1.0) and gpu_d == pytest.approx(1.0)
    for share in (sm_p, tensor_p, dram_p, sm_d, tensor_d, dram_d):
        assert 0.0 <= share <= 1.0
    # Prefill: the tensor pipes near the model's MFU, HBM mostly idle; decode the other way round.
    assert tensor_p > 0.35 and dram_p < 0.2
    assert dram_d > 0.5 and tensor_d < 0.2
    assert tensor_p > 2 * tensor_d and dram_d > 2 * dram_p
    # The kernels fill the step but for the host's overhead.
    assert 0.8 < sm_p <= 1.0 and 0.5 < sm_d <= 1.0


def test_a_step_in_flight_counts_only_what_has_run() -> None:
    dep = _dep()
    meter = BusyMeter(dep)
    d = dep.step_time(4096, 0, 0)
    meter.step(10.0, d, 4096, 0, 0)
    half = meter.totals(10.0 + d / 2)
    full = meter.totals(10.0 + d)
    later = meter.totals(10.0 + 5 * d)  # idle since: nothing more
    assert half.gpu == pytest.approx(d / 2) and full.gpu == pytest.approx(d)
    assert half.tensor == pytest.approx(full.tensor / 2)
    assert later == BusyTotals(10.0 + 5 * d, full.gpu, full.sm, full.tensor, full.dram)


def test_window_averages_over_at_least_its_length_whoever_reads() -> None:
    window = BusyWindow(1.0)
    # Busy the whole first second, idle after: tensor at 0.5 of the time, DRAM 0.1.
    first = window.read(BusyTotals(1.0, 1.0, 1.0, 0.5, 0.1))
    assert first.gpu_util == pytest.approx(1.0) and first.tensor_active == pytest.approx(0.5)
    # Frequent readings (every 0.1 s) still average over the last second or more, not 0.1 s.
    for i in range(1, 6):
        f = window.read(BusyTotals(1.0 + 0.1 * i, 1.0, 1.0, 0.5, 0.1))
    assert 0.0 < f.gpu_util < 1.0
    much_later = window.read(BusyTotals(10.0, 1.0, 1.0, 0.5, 0.1))
    much_later = window.read(BusyTotals(11.5, 1.0, 1.0, 0.5, 0.1))
    assert much_later.gpu_util == 0.0 and much_later.dram_active == 0.0
    with pytest.raises(ValueError, match="window_s"):
        BusyWindow(0.0)


def test_the_engine_meters_every_step_it_runs() -> None:
    engine = Engine(_dep("L4"), EngineConfig(max_num_seqs=8))
    for i in range(4):
        engine.add_request(Request(f"r{i}", prompt_tokens=2000 if i % 2 else 50, output_tokens=40), 0.0)
    now = 0.0
    while engine.has_work():
        now = engine.step(now).end
    busy = engine.busy.totals(now)
    assert busy.gpu == pytest.approx(engine.stats().busy_time)
    assert 0.0 < busy.tensor < busy.sm <= busy.gpu
    assert 0.0 < busy.dram < busy.sm


@pytest.mark.parametrize("tp", [1, 2])
def test_the_kernels_time_is_the_step_models_time_less_its_host_overhead(tp: int) -> None:
    """The meter's sums give back, per step, exactly the step model's roofline time (its longer of
    compute and memory) and nothing of its host overhead; this fails if roofline.py's overhead
    terms change without engine/busy.py."""
    dep = deployment(get_gpu("H100-SXM"), resolve_model("llama-3.1-8b"), tp=tp)
    f = dep.factors
    for prefill, decode, ctx, pctx, n in ((0, 64, 64 * 900, 0, 0), (3000, 10, 9000, 512, 2), (8192, 0, 0, 0, 1)):
        meter = BusyMeter(dep)
        d = dep.step_time(prefill, decode, ctx, pctx, prefill_seqs=n)
        meter.step(0.0, d, prefill, decode, ctx, pctx, n)
        host = f.step_overhead_s + f.per_seq_overhead_s * (decode + (1 if prefill else 0) * max(n, 1))
        host += dep.allreduce_time(prefill + decode)
        busy = meter.totals(d)
        assert busy.sm == pytest.approx(d - host)
        # The busier unit reaches the step model's efficiency of its peak over the kernels' time.
        assert max(busy.tensor / dep.effective_mfu, busy.dram / dep.bw_efficiency) == pytest.approx(d - host,
                                                                                                   rel=0.02)

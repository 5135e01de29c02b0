"""Phase-aware replica choice (sched/phase.py): DCGM names into ReplicaLoad, the pressure rule,
the picker's hook, and the flow handing each request's prefill share to it (pure)."""

from __future__ import annotations

import pytest

from turbogate.sched import (
    Dispatch,
    Flow,
    FlowPolicy,
    FlowRequest,
    Picker,
    PickerConfig,
    PoolSpec,
    Replica,
    ReplicaLoad,
    ReplicaSpec,
    TenantSpec,
    Tier,
    TierPolicy,
    load_from_samples,
)
from turbogate.sched.load import DCGM_DRAM_ACTIVE, DCGM_TENSOR_ACTIVE, FRACTION_NAMES, METRIC_NAMES
from turbogate.sched.phase import UNKNOWN_ACTIVE, prefill_share, pressure

#: A replica prefilling long prompts (tensor pipes busy) and one decoding long answers (HBM busy).
PREFILLING = ReplicaLoad(running=2, waiting=0, kv_usage=0.2, tensor_active=0.8, dram_active=0.15)
DECODING = ReplicaLoad(running=2, waiting=0, kv_usage=0.2, tensor_active=0.1, dram_active=0.85)


def test_dcgm_names_are_read_for_every_engine_kind() -> None:
    samples = {"vllm:num_requests_running": 3.0, DCGM_TENSOR_ACTIVE: 0.4, DCGM_DRAM_ACTIVE: 1.02}
    for kind in ("vllm", "emulator", "sglang", "unknown"):
        load = load_from_samples(kind, {**samples, "sglang:num_running_reqs": 3.0})
        assert (load.tensor_active, load.dram_active) == (0.4, 1.0)  # a resampled ratio over 1 is clamped
    assert load_from_samples("vllm", {"vllm:num_requests_running": 1.0}).tensor_active is None
    only_gauges = load_from_samples("vllm", {DCGM_DRAM_ACTIVE: 0.5})
    assert only_gauges.running is None and only_gauges.dram_active == 0.5
    # The shell keeps them (METRIC_NAMES) and takes the busiest GPU of a replica, not their sum.
    assert {DCGM_TENSOR_ACTIVE, DCGM_DRAM_ACTIVE} <= METRIC_NAMES & FRACTION_NAMES


def test_prefill_share_and_pressure() -> None:
    assert prefill_share(3000, 100) == pytest.approx(3000 / 3100)
    assert prefill_share(0, 0) == 0.0
    assert pressure(PREFILLING, 1.0) == pytest.approx(0.8)
    assert pressure(PREFILLING, 0.0) == pytest.approx(0.15)
    assert pressure(DECODING, 0.5) == pytest.approx(0.475)
    # No gauges: half busy on both, whatever the phase.
    assert pressure(None, 0.9) == pressure(ReplicaLoad(running=1), 0.1) == UNKNOWN_ACTIVE


def _pair(weight: float) -> tuple[Picker, Replica, Replica]:
    picker = Picker(PickerConfig(phase_weight=weight))
    a = picker.add(Replica(id="prefilling", pool="p", cap=8))
    b = picker.add(Replica(id="decoding", pool="p", cap=8))
    picker.on_metrics(a, PREFILLING, 0.0)
    picker.on_metrics(b, DECODING, 0.0)
    return picker, a, b


def test_picker_sends_each_phase_where_its_resource_is_free() -> None:
    picker, a, b = _pair(1.0)
    for _ in range(6):  # whatever the rotor says
        assert picker.pick("p", 0.1, prefill_share=0.95) is b
        assert picker.pick("p", 0.1, prefill_share=0.05) is a
    # Off (weight 0) or no share given: the rotor spreads equal scores over both.
    for picker_, share in ((_pair(0.0)[0], 0.95), (_pair(1.0)[0], None)):
        assert {picker_.pick("p", 0.1, prefill_share=share).id for _ in range(4)} == {"prefilling", "decoding"}


def test_in_flight_still_counts_between_scrapes() -> None:
    picker, a, b = _pair(1.0)
    # The decoding replica suits long prompts, but once it holds most of its limit the other takes them.
    for _ in range(6):
        picker.on_dispatch(b)
    assert picker.pick("p", 0.1, prefill_share=0.95) is a
    # The bands come first: a saturated replica is avoided however free its tensor pipes.
    picker.on_metrics(b, ReplicaLoad(running=2, waiting=0, kv_usage=0.95, tensor_active=0.0, dram_active=0.0), 0.2)
    for _ in range(6):
        picker.on_release(b)
    assert picker.pick("p", 0.3, prefill_share=0.95) is a


def _flow(weight: float) -> Flow:
    pool = PoolSpec("p", ("m",), (ReplicaSpec("prefilling", 8), ReplicaSpec("decoding", 8)))
    policy = FlowPolicy(tiers={t: TierPolicy() for t in Tier}, tenants=(TenantSpec("acme", frozenset(Tier)),),
                        pools=(pool,), picker=PickerConfig(initial_limit=8, phase_weight=weight))
    flow = Flow(policy)
    flow.scraped("prefilling", PREFILLING, 0.0)
    flow.scraped("decoding", DECODING, 0.0)
    return flow


@pytest.mark.parametrize("tier", ["priority", "default", "flex"])
def test_the_flow_hands_each_request_its_prefill_share(tier: str) -> None:
    flow = _flow(1.0)
    long_prompt = flow.open(tenant="acme", model="m", tier_body=tier, max_tokens=50, prompt_bytes=4 * 4000, now=0.1)
    long_answer = flow.open(tenant="acme", model="m", tier_body=tier, max_tokens=2000, prompt_bytes=4 * 50, now=0.1)
    assert isinstance(long_prompt, FlowRequest) and isinstance(long_answer, FlowRequest)
    assert long_prompt.prefill_share == pytest.approx(4000 / 4050)
    assert long_answer.prefill_share == pytest.approx(50 / 2050)
    sent = [a for a in flow.arrive(long_answer, 0.1) + flow.arrive(long_prompt, 0.1) if isinstance(a, Dispatch)]
    assert [(d.req, d.replica.id) for d in sent] == [(long_answer, "prefilling"), (long_prompt, "decoding")]


def test_off_by_default() -> None:
    assert PickerConfig().phase_weight == 0.0
    from turbogate.config import Bands

    assert Bands().phase_weight == 0.0


def test_the_gateways_scrape_keeps_dcgm_lines_and_takes_the_busiest_gpu() -> None:
    """What ``gateway/scrape.py`` hands the core from a replica's page (an emulator's, or an engine's
    with dcgm-exporter's lines appended): both GPUs' series, the busier one counted."""
    from turbogate.gateway.scrape import samples_from_text

    page = "\n".join([
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{model_name="m"} 5.0',
        "# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge",
        'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{UUID="GPU-a",device="nvidia0",gpu="0",modelName="L4"} 0.30',
        'DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{UUID="GPU-b",device="nvidia1",gpu="1",modelName="L4"} 0.45',
        "# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge",
        'DCGM_FI_PROF_DRAM_ACTIVE{UUID="GPU-a",device="nvidia0",gpu="0",modelName="L4"} 0.60',
        'DCGM_FI_PROF_DRAM_ACTIVE{UUID="GPU-b",device="nvidia1",gpu="1",modelName="L4"} 0.55',
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge",
        'DCGM_FI_PROF_SM_ACTIVE{UUID="GPU-a",device="nvidia0",gpu="0",modelName="L4"} 0.9',
    ]) + "\n"
    load = load_from_samples("vllm", samples_from_text(page))
    assert (load.running, load.tensor_active, load.dram_active) == (5.0, 0.45, 0.60)
    picker = Picker(PickerConfig(phase_weight=1.0))
    r = picker.add(Replica(id="r", pool="p"))
    picker.on_metrics(r, load, 0.0)
    state = next(iter(picker.describe(0.5)))  # what /admin/state shows of it
    assert (state["tensor_active"], state["dram_active"]) == (0.45, 0.60)

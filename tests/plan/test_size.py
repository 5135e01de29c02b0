"""``plan size``'s search (pure): the closed form's bound, the walk to the smallest fleet, pruning."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import pytest

from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.plan.knee import predicted_knee
from turbogate.plan.latency import latency_model
from turbogate.plan.size import (
    MAX_GROWTH,
    MAX_SIMS_PER_CANDIDATE,
    Candidate,
    Measured,
    SizeInputs,
    SizeResult,
    Skipped,
    TierSLO,
    closed_form_replicas,
    ordinal,
    size,
)
from turbogate.plan.size_cli import _summary
from turbogate.plan.size_sim import judge
from turbogate.results import RequestRecord

SLOS = {"turbo": TierSLO(0.5), "standard": TierSLO(3.0)}


def _candidate(gpu: str = "L4", tp: int = 1, model: str = "llama-3.1-8b") -> Candidate:
    dep = deployment(get_gpu(gpu), resolve_model(model), tp=tp)
    lm = latency_model(dep, 256, 128)
    return Candidate(dep.gpu.name, tp, dep.gpu.price_per_hour, lm, predicted_knee(lm))


def _measured(ok: bool) -> Measured:
    p95 = 0.1 if ok else 9.0
    tiers = ("turbo", "standard")
    return Measured({t: p95 for t in tiers}, {t: 0.01 for t in tiers}, {t: 0.0 for t in tiers},
                    {t: 100 for t in tiers}, {t: p95 for t in tiers})


class _Threshold:
    """A fake simulator: a candidate meets its SLOs from ``needed[gpu]`` replicas on."""

    def __init__(self, needed: dict[str, int]) -> None:
        self.needed = needed
        self.calls: list[tuple[str, int]] = []

    def __call__(self, c: Candidate, n: int) -> Measured:
        self.calls.append((c.gpu, n))
        return _measured(n >= self.needed[c.gpu])


@pytest.mark.parametrize(("peak", "share"), [(5.0, 0.2), (40.0, 0.5), (300.0, 0.1)])
def test_the_closed_form_bound_is_the_first_count_whose_means_meet(peak: float, share: float) -> None:
    c = _candidate()
    inputs = SizeInputs(peak, share, SLOS)
    n = closed_form_replicas(c, inputs)
    assert n is not None
    lm = c.model

    def means_meet(k: int) -> bool:
        x = peak / k
        turbo, standard = lm.tier_ttft(x, share)
        return x < lm.saturation_rate and turbo <= 0.5 and standard <= 3.0

    assert means_meet(n) and (n == 1 or not means_meet(n - 1))
    assert n >= math.ceil(peak / lm.saturation_rate)


def test_an_slo_under_the_unloaded_ttft_cannot_be_met() -> None:
    c = _candidate()
    inputs = SizeInputs(5.0, 0.2, {"turbo": TierSLO(c.model.ttft(0.0) / 2), "standard": TierSLO(3.0)})
    assert closed_form_replicas(c, inputs) is None
    result = size([c], inputs, _Threshold({"L4": 1}))
    assert not result.fleets and "unloaded" in result.skipped[0].reason
    assert result.skipped[0].kind == "over_slo_unloaded"


@pytest.mark.parametrize("needed_offset", [-3, -1, 0, 1, 2, 5])
def test_the_search_finds_the_smallest_count_with_one_fewer_missing(needed_offset: int) -> None:
    c = _candidate()
    inputs = SizeInputs(20.0, 0.2, SLOS, top=1)
    bound = closed_form_replicas(c, inputs)
    assert bound is not None
    needed = max(1, bound + needed_offset)
    sim = _Threshold({"L4": needed})
    result = size([c], inputs, sim)
    (fleet,) = result.fleets
    assert fleet.replicas == needed and fleet.closed_form_replicas == bound
    assert (needed == 1) == (fleet.smaller is None)
    if needed > 1:
        assert fleet.smaller_misses and (c.gpu, needed - 1) in sim.calls
    assert len(sim.calls) == len(set(sim.calls)) == result.simulations <= MAX_SIMS_PER_CANDIDATE


def test_candidates_are_confirmed_cheapest_bound_first_and_the_rest_pruned() -> None:
    cands = [_candidate("L4"), _candidate("A10G"), _candidate("H100-SXM"), _candidate("L40S")]
    inputs = SizeInputs(30.0, 0.2, SLOS, top=2)
    bounds = {c.gpu: closed_form_replicas(c, inputs) for c in cands}
    sim = _Threshold({g: n + 1 for g, n in bounds.items() if n is not None})
    result = size(cands, inputs, sim)
    costs = [f.cost_per_hour for f in result.fleets]
    assert costs == sorted(costs) and len(result.fleets) >= 2
    # Whatever was not simulated had a closed-form lower bound no cheaper than the second confirmed fleet.
    simulated = {g for g, _ in sim.calls}
    for s in result.skipped:
        assert s.gpu not in simulated and s.cost_lower_bound is not None and s.cost_lower_bound >= costs[1]
        assert s.kind == "pruned" and "the 2nd confirmed fleet" in s.reason
    assert simulated | {s.gpu for s in result.skipped} == {c.gpu for c in cands}


def test_a_candidate_that_never_meets_is_reported_not_confirmed() -> None:
    c = _candidate()
    sim = _Threshold({"L4": 10**6})
    inputs = SizeInputs(20.0, 0.2, SLOS)
    result = size([c], inputs, sim)
    assert not result.fleets and "not confirmed" in result.skipped[0].reason
    assert result.skipped[0].kind == "not_confirmed"
    bound = closed_form_replicas(c, inputs)
    assert bound is not None
    assert len(sim.calls) <= MAX_SIMS_PER_CANDIDATE and max(n for _, n in sim.calls) == MAX_GROWTH * bound + 4


def _record(i: int, tier: str, ttft: float | None, scheduled: float, status: int = 200) -> RequestRecord:
    ok = ttft is not None
    return RequestRecord(i, 0, 10.0, scheduled, scheduled, 0.0, 0.0, scheduled + 1.0, tier, tier if ok else None,
                         status, ok, None if ok else "shed", ttft, (), 0.02 if ok else None, 1.0 if ok else None,
                         100, 10 if ok else None)


def test_a_shed_request_counts_as_a_miss_and_a_late_queue_shows_in_the_second_half() -> None:
    # 100 Turbo requests at 0.1 s; 6 of them shed: more than 5 %, so p95 is not met.
    recs = [_record(i, "turbo", 0.1, i * 0.6) for i in range(94)] + [
        _record(94 + i, "turbo", None, i, status=503) for i in range(6)]
    m = judge(recs, window=60.0)
    assert m.ttft_p95_s["turbo"] is None and m.failed_share["turbo"] == pytest.approx(0.06)
    assert any("unserved" in x for x in m.misses({"turbo": TierSLO(0.5)}))
    # A queue that grows at the end: the last 4 of 100 slow; the whole window's p95 passes, the second
    # half's (4 of 50) does not.
    recs = [_record(i, "standard", 0.2 if i < 96 else 2.0 + i / 100, i * 0.6) for i in range(100)]
    m = judge(recs, window=60.0)
    misses = m.misses({"standard": TierSLO(2.5)})
    assert misses and all("second half" in x for x in misses)


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"peak_rps": 0.0}, "--peak-rps"), ({"turbo_share": 1.5}, "--turbo-share"), ({"top": 0}, "--top"),
    ({"slos": {"relax": TierSLO(1.0)}}, "unknown tiers"),
    ({"turbo_share": 0.0, "slos": {"turbo": TierSLO(0.5)}}, "has traffic"),
])
def test_bad_inputs_name_the_option(kwargs: dict[str, object], word: str) -> None:
    args: dict[str, object] = {"peak_rps": 10.0, "turbo_share": 0.2, "slos": SLOS, **kwargs}
    with pytest.raises(ValueError, match=word):
        SizeInputs(**args)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TTFT p95"):
        TierSLO(-1.0)


def test_searching_candidates_at_once_confirms_the_same_fleets() -> None:
    cands = [_candidate("L4"), _candidate("A10G"), _candidate("H100-SXM"), _candidate("L40S")]
    inputs = SizeInputs(30.0, 0.2, SLOS, top=4)
    needed = {c.gpu: (closed_form_replicas(c, inputs) or 0) + 2 for c in cands}
    one = size(cands, inputs, _Threshold(needed))
    with ThreadPoolExecutor(max_workers=3) as pool:
        many = size(cands, inputs, _Threshold(needed), executor=pool, jobs=3)
    assert [(f.candidate.gpu, f.replicas) for f in many.fleets] == [(f.candidate.gpu, f.replicas) for f in one.fleets]
    assert {f.candidate.gpu: f.replicas for f in many.fleets} == needed


def test_ordinals_read_as_english() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_the_summary_line_counts_each_reason_and_leaves_out_what_is_zero() -> None:
    skipped = (Skipped("L4", 1, "pruned", "pruned: …"), Skipped("A10G", 1, "pruned", "pruned: …"),
               Skipped("T4", 1, "over_slo_unloaded", "unloaded TTFT …"))
    line = _summary(SizeResult((), skipped, 7), 0, 1.34)
    assert line == "7 fleets simulated, 3 candidates not ranked (2 pruned by cost, 1 over an SLO even unloaded); " \
                   "--json lists them. 1.3 s."
    assert _summary(SizeResult((), (), 4), 8, 2.0) == ("4 fleets simulated, 8 GPU × TP cannot hold the model; "
                                                       "--json lists them. 2.0 s.")

"""Pure bench logic: lengths, tier mix, shapes, arrivals, schedule, knee search, request bodies."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from turbogate.bench.arrivals import Arrivals, build_schedule, send_times
from turbogate.bench.client import normalize_tier, parse_server_timing
from turbogate.bench.dataset import load_prompts
from turbogate.bench.findknee import KneeSearch
from turbogate.bench.shapes import Constant, ExpRamp, LinearRamp, Stepped, make_shape, shape_steps
from turbogate.bench.workload import TierMix, TruncNormal, Workload, request_body, synthetic_prompt


@settings(max_examples=40, deadline=None)
@given(mean=st.floats(10, 2000), std=st.floats(0.5, 800), lo_off=st.floats(0.05, 3), hi_off=st.floats(0.05, 3),
       seed=st.integers(0, 2**31))
def test_trunc_normal_stays_in_bounds_and_keeps_its_mean(mean: float, std: float, lo_off: float, hi_off: float,
                                                         seed: int) -> None:
    lo = max(1, math.floor(mean - lo_off * std))
    hi = max(lo + 1, math.ceil(mean + hi_off * std))
    dist = TruncNormal(mean, std, lo, hi)
    rng = random.Random(seed)
    n = 3000
    xs = [dist.sample(rng) for _ in range(n)]
    assert min(xs) >= lo and max(xs) <= hi
    # Standard error of the mean ≤ std/√n; 5 SE plus half a token of rounding.
    tol = 5 * std / math.sqrt(n) + 0.5
    assert abs(sum(xs) / n - dist.expected_mean()) <= tol


def test_trunc_normal_resamples_rather_than_clamps() -> None:
    # Half the raw mass lies below min: clamping would put ~50 % of draws exactly on 100.
    dist = TruncNormal(100, 50, 100, 300)
    xs = [dist.sample(random.Random(i)) for i in range(2000)]
    assert sum(1 for x in xs if x == 100) / len(xs) < 0.05


def test_trunc_normal_parse_and_errors() -> None:
    assert TruncNormal.parse("256") == TruncNormal(256, 0, 256, 256)
    assert TruncNormal.parse("100:20:50:150") == TruncNormal(100, 20, 50, 150)
    for bad in ("abc", "1:2:3", "100:-1:1:200", "100:0:200:300", "5:1:1000:2000", "100:10:0:200"):
        with pytest.raises(ValueError):
            TruncNormal.parse(bad, "--prompt-tokens")


def test_tier_mix() -> None:
    mix = TierMix.parse("turbo=1,standard=3")
    rng = random.Random(3)
    picks = [mix.pick(rng) for _ in range(8000)]
    assert abs(picks.count("turbo") / len(picks) - 0.25) < 0.03
    assert TierMix.parse(None).pick(rng) is None
    for bad in ("gold=1", "turbo", "turbo=x", "turbo=0"):
        with pytest.raises(ValueError, match="--tiers"):
            TierMix.parse(bad)


@settings(max_examples=30, deadline=None)
@given(a=st.floats(0.5, 500), b=st.floats(0.5, 500), d=st.floats(1, 600), frac=st.floats(0, 1))
def test_shapes_invert_their_cumulative(a: float, b: float, d: float, frac: float) -> None:
    for shape in (Constant(a, d), LinearRamp(a, b, d), ExpRamp(a, b, d), Stepped.sweep(a, b, 4, d)):
        t = frac * d
        assert shape.inverse(shape.cumulative(t)) == pytest.approx(t, rel=1e-6, abs=1e-6)


def test_shape_rates_and_steps() -> None:
    exp = ExpRamp(10, 40, 20)
    assert exp.rate_at(10) == pytest.approx(20)
    assert exp.cumulative(20) == pytest.approx((40 - 10) / math.log(4) * 20)
    lin = LinearRamp(10, 30, 10)
    assert [s.offered_rps for s in shape_steps(lin, 2)] == pytest.approx([15, 25])
    sw = Stepped.sweep(10, 40, 4, 40)
    assert [s.offered_rps for s in shape_steps(sw, 99)] == [10, 20, 30, 40]
    with pytest.raises(ValueError, match="exponential"):
        make_shape("exponential", start=0, end=10, duration=5, steps=1)
    with pytest.raises(ValueError, match="--shape"):
        make_shape("sine", start=1, end=10, duration=5, steps=1)


def test_arrival_processes() -> None:
    shape = Stepped.sweep(10, 30, 3, 30)  # 100 + 200 + 300
    assert len(send_times(shape, Arrivals("constant"), random.Random(0))) == 600
    n = len(send_times(Constant(200, 50), Arrivals("poisson"), random.Random(1)))
    assert abs(n - 10_000) < 5 * math.sqrt(10_000)
    gaps_cv = []
    for burst in (0.25, 4.0):
        ts = send_times(Constant(100, 50), Arrivals("gamma", burst), random.Random(2))
        gaps = [b - a for a, b in itertools.pairwise(ts)]
        m = sum(gaps) / len(gaps)
        sd = math.sqrt(sum((g - m) ** 2 for g in gaps) / len(gaps))
        gaps_cv.append(sd / m)
        assert abs(len(ts) - 5000) < 10 * math.sqrt(5000)
    # CV of gamma gaps is 1/√shape: bursty (2.0) vs regular (0.5).
    assert gaps_cv[0] == pytest.approx(2.0, rel=0.15) and gaps_cv[1] == pytest.approx(0.5, rel=0.15)
    with pytest.raises(ValueError, match="--arrivals"):
        Arrivals("uniform")


def test_schedule_is_reproducible_and_complete() -> None:
    shape = LinearRamp(5, 25, 20)
    steps = shape_steps(shape, 4)
    wl = Workload(prompt_tokens=TruncNormal(100, 30, 20, 200), tiers=TierMix.parse("turbo=0.2,standard=0.8"),
                  n_api_keys=3)
    a = build_schedule(shape, Arrivals(), wl, steps, random.Random(7))
    b = build_schedule(shape, Arrivals(), wl, steps, random.Random(7))
    c = build_schedule(shape, Arrivals(), wl, steps, random.Random(8))
    assert a == b and a != c
    assert all(x.t <= y.t for x, y in itertools.pairwise(a))
    assert all(steps[s.step].start_s <= s.t < steps[s.step].end_s for s in a)
    assert {s.spec.api_key for s in a} == {0, 1, 2}
    assert len({s.spec.seed for s in a}) == len(a)  # a fresh seed per request
    no_seed = Workload(per_request_seed=False)
    assert no_seed.make(random.Random(0)).seed is None


def test_synthetic_prompt_length() -> None:
    p = synthetic_prompt(100, random.Random(0))
    assert len(p) == 400  # ~4 characters per token


def test_request_body() -> None:
    spec = Workload(tiers=TierMix.parse("turbo=1")).make(random.Random(0))
    body = request_body(spec, model="m", chat=True, stream=True, ignore_eos=True, min_tokens=True, tier_in_body=True)
    assert body["messages"][0]["content"] == spec.prompt
    assert body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["min_tokens"] == body["max_tokens"] == spec.max_tokens
    assert body["service_tier"] == "priority" and body["seed"] == spec.seed
    comp = request_body(spec, model="m", chat=False, stream=False, ignore_eos=False, min_tokens=False,
                        tier_in_body=False)
    assert comp["prompt"] == spec.prompt and "service_tier" not in comp and "stream_options" not in comp


def test_knee_search_brackets_the_capacity() -> None:
    for cap in (3.0, 23.0, 180.0):
        ks = KneeSearch(start=5.0, growth=1.5, bisections=4)
        while (r := ks.next_rate()) is not None:
            ks.observe(r, r > cap)
        lo, hi = ks.bracket()
        assert lo is not None and hi is not None and lo <= cap < hi
        est = ks.estimate()
        assert est is not None and abs(est - cap) / cap < 0.1


def test_server_timing_and_tiers() -> None:
    assert parse_server_timing("l1;dur=0.4, l2;desc=\"pick\";dur=1.5,upstream;dur=12, bad;dur=x") == {
        "l1": 0.4, "l2": 1.5, "upstream": 12.0}
    assert parse_server_timing(None) == {}
    assert normalize_tier("priority") == "turbo" and normalize_tier("flex") == "relax"
    assert normalize_tier("Turbo") == "turbo" and normalize_tier(None) is None


def test_dataset_formats(tmp_path: Path) -> None:
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"prompt": "a b"}\n\n{"messages": [{"role": "user", "content": "c"}]}\n{"text": "d"}\n')
    assert load_prompts(jl) == ["a b", "c", "d"]
    sg = tmp_path / "sharegpt.json"
    sg.write_bytes(orjson.dumps([{"conversations": [{"from": "human", "value": "q1"}, {"from": "gpt", "value": "a"}]},
                                 {"conversations": []}]))
    assert load_prompts(sg) == ["q1"]
    empty = tmp_path / "e.jsonl"
    empty.write_text('{"x": 1}\n')
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(empty)
    with pytest.raises(ValueError, match="does not exist"):
        load_prompts(tmp_path / "nope.jsonl")

"""sim draws the very requests bench sends for the same seed (same RNG, same order)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from turbogate.bench.arrivals import build_schedule
from turbogate.bench.options import build_load
from turbogate.emulator.tokens import CharEstimator, chat_prompt_tokens, completion_prompt_tokens
from turbogate.sim.requests import RequestSource


def _load(tmp_path: Path, **kw: object) -> object:
    args: dict[str, object] = dict(
        shape="linear", qps=None, qps_start=2.0, qps_end=30.0, steps=4, duration=12.0, arrivals="poisson",
        burstiness=1.0, prompt_tokens="200:80:1:500", output_tokens="64:30:1:200", dataset=None, no_seed=False,
        tiers="turbo=0.2,standard=0.7,relax=0.1", n_api_keys=3, random_seed=11, slo=None,
        knee_method="throughput", knee_k=2.0, knee_metric="e2e", fleet_cost=1.0, tier_cost=None)
    args.update(kw)
    return build_load(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", ["synthetic", "gamma-completions", "dataset-noseed"])
def test_sim_requests_equal_bench_schedule(tmp_path: Path, variant: str) -> None:
    chat = True
    kw: dict[str, object] = {}
    if variant == "gamma-completions":
        kw = {"arrivals": "gamma", "burstiness": 0.5}
        chat = False
    elif variant == "dataset-noseed":
        data = tmp_path / "prompts.jsonl"
        data.write_text("\n".join(json.dumps({"prompt": "word " * n}) for n in (3, 40, 170)))
        kw = {"dataset": data, "no_seed": True}
    load = _load(tmp_path, **kw)
    shape, steps = load.shape_and_steps()  # type: ignore[attr-defined]
    bench = build_schedule(shape, load.arrivals, load.workload, steps, random.Random(load.random_seed))  # type: ignore[attr-defined]
    sims = list(RequestSource(load, chat=chat))  # type: ignore[arg-type]
    assert len(sims) == len(bench) > 100
    est = CharEstimator()
    for b, s in zip(bench, sims, strict=True):
        assert (s.t, s.step, s.offered_rps) == (b.t, b.step, b.offered_rps)
        assert (s.max_tokens, s.tier, s.api_key, s.seed) == (b.spec.max_tokens, b.spec.tier, b.spec.api_key,
                                                             b.spec.seed)
        want = chat_prompt_tokens(est, [b.spec.prompt]) if chat else completion_prompt_tokens(est, b.spec.prompt)
        assert s.prompt_tokens == want
        assert s.output_tokens == s.max_tokens  # ignore_eos (bench's default) gives exact lengths


def test_without_ignore_eos_lengths_stop_early_and_say_so(tmp_path: Path) -> None:
    sims = list(RequestSource(_load(tmp_path), ignore_eos=False))  # type: ignore[arg-type]
    assert all(1 <= s.output_tokens <= s.max_tokens for s in sims)
    early = [s for s in sims if s.output_tokens < s.max_tokens]
    assert early and all(s.finish_reason == "stop" for s in early)
    assert all(s.finish_reason == "length" for s in sims if s.output_tokens == s.max_tokens)


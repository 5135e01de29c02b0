"""A step from 0.2× to 2× of capacity in the simulator (issue 38), four seeds per fleet:
``benchmarks/surge.py``'s fleets (each time scale as the scrape interval in engine time: the
L4 one's 0.2 as 5 s), default tier policy, ``max_num_seqs`` configured.

What holds here, in every seed: no Turbo request is refused (what the pool cannot give Turbo is
served Standard at once, first in Standard's line); the Standard requests served at 2× meet
Standard's 5-s objective; on every fleet Turbo's p95 in every 5-s window after the step, the
first included, stays within 1.5× of unloaded (H100, 30 % Turbo, 1.03–1.04×; L4 1.10–1.20×;
A100, below).  The L4 fleet's first window reached 4.1× in one seed of four while the arrival
rate was read over windows reaching back into the quiet minute before the step (sched/surge.py
``too_fast``; docs/gateway.md, "Surges and graceful degradation").  On the A100 fleet
(512-token prompts: a prefill adds 4.8 decode steps to a step) the lower tiers' prefills are
gated by what one costs Turbo (sched/surge.py ``prefill_gate``), and the pool's service time
follows the engines' pace (sched/service_time.py ``TokenPace``); Turbo's supply is bounded by
its own prefills (sched/turbo_supply.py ``prefill_supply_rps``) and, while the lower tiers queue
or a surge is told, they leave one replica clear of their prefills (sched/surge.py
``keeps_clear``); among replicas with as many prefills under way, Turbo goes where the latest was
sent first (sched/picker.py); and a Turbo request that finds every replica's prefill just begun is
served Standard at once (sched/turbo_supply.py ``prefill_clear``), and a lower-tier head that L2
holds back does not hold a queued Turbo request back (sched/flow_pump.py): every seed's worst
window within 1.5× (1.31–1.46×; 1.32–1.57× before the last two rules, 1.37–1.79× where Turbo broke
that tie by score, 2.0–2.6× without the two rules before it, 6.4–18.6× with an eighth of the batch
as the gate); over 24 seeds, within 1.5× in 18 (6 before the last two rules).  Each ratio is
over the fleet's Turbo p95 at 0.2× across the seeds (``unloaded_p95``).  At 0.2× from the cold
gateway, every tier's p95 TTFT stays within 1.5× of Turbo's on the L4 and H100 fleets.

A gateway restarted 10 s into the 2× overload (benchmarks/surge.py ``simulated_restart``: the
engines abort what it held, it answers again a second later and takes what the old one wrote to
the store) does on the A100 fleet, from the third scrape interval after it is back, what the same
run does uninterrupted: within 1.3× of its worst window in every seed (1.0–1.13×; 0.9–1.9× with
only the replicas' learned state in the store, no pool service time: Turbo's headroom is then
empty in the new gateway's first seconds).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from turbogate.bench.options import build_load
from turbogate.config import hash_key, parse_config
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate

KEY = "sk-surge-sim"
SEEDS = range(1, 5)
MODEL = "llama-3.1-8b"
WINDOW_S = 5.0
FLEETS: dict[str, dict[str, Any]] = {
    "l4": dict(gpu="L4", seqs=16, replicas=2, scrape_s=5.0, prompt=256, output=128,
               mix="turbo=0.2,standard=0.7,relax=0.1"),
    "h100": dict(gpu="H100-SXM", seqs=8, replicas=3, scrape_s=1.0, prompt=128, output=256,
                 mix="turbo=0.3,standard=0.6,relax=0.1"),
    # Its 1.5 time scale: a 1-s scrape interval is 2/3 s of engine time.
    "a100": dict(gpu="A100-80G-SXM", seqs=32, replicas=2, scrape_s=1.0 / 1.5, prompt=512, output=128,
                 mix="turbo=0.25,standard=0.6,relax=0.15"),
}


@functools.cache
def run(name: str, seed: int) -> tuple[list[Any], float, float]:
    """Records, the step's time and the window length, in engine time (one run per fleet and
    seed, shared by the tests here: nothing changes them)."""
    f = FLEETS[name]
    dep = deployment(get_gpu(f["gpu"]), resolve_model(MODEL))
    cap = f["replicas"] * saturated_rate(dep, EngineConfig(max_num_seqs=f["seqs"]), f["prompt"], f["output"])
    hold = 30.0 * f["scrape_s"]  # thirty scrapes at each rate
    gateway = parse_config({
        "tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "scrape": {"interval_s": f["scrape_s"]},
        "pools": [{"name": "p", "models": [MODEL],
                   "replicas": [{"url": f"http://r{i}", "max_num_seqs": f["seqs"]} for i in range(f["replicas"])]}],
    })
    fleet = parse_fleet({"pools": [{"name": "p", "replicas": [{"count": f["replicas"], "gpu": f["gpu"], "model": MODEL,
                                                                "max_num_seqs": f["seqs"]}]}]})
    load = build_load(shape="steps", qps=None, qps_start=0.2 * cap, qps_end=2.0 * cap, steps=2, duration=2 * hold,
                      arrivals="poisson", burstiness=1.0, prompt_tokens=str(f["prompt"]),
                      output_tokens=str(f["output"]), dataset=None, no_seed=False, tiers=f["mix"], n_api_keys=1,
                      random_seed=seed, slo=None, knee_method="throughput", knee_k=2.0, knee_metric="e2e",
                      fleet_cost=1.0, tier_cost=None)
    records = simulate(SimConfig(gateway=gateway, fleet=fleet, load=load, api_keys=(KEY,))).records
    return list(records), hold, WINDOW_S * f["scrape_s"]  # a 5-s wall window at the fleet's time scale


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def test_a_step_to_twice_capacity_with_30_percent_turbo_holds_from_the_first_window() -> None:
    worst = [max(turbo_ratios("h100", seed)) for seed in SEEDS]
    assert max(worst) <= 1.5, worst


def test_a_step_to_twice_capacity_on_the_l4_fleet_holds_from_the_first_window() -> None:
    worst = [max(turbo_ratios("l4", seed)) for seed in SEEDS]
    assert max(worst) <= 1.5, worst


def test_a_step_to_twice_capacity_on_the_a100_fleet_holds_from_the_first_window() -> None:
    """1.31-1.46x over the four seeds; 1.32-1.54x before a lower-tier head L2 held back stopped
    ending the dispatch round while Turbo queued (seed 2: a Turbo request waited 38 ms behind an
    owed Relax one); 1.32-1.57x before a Turbo request finding every replica's
    prefill just begun was served Standard; 1.37-1.79x before Turbo broke a tie in prefills under way by
    when they were sent; 2.0-2.6x (median 2.4) before Turbo's supply was bounded by
    its own prefills and a replica kept clear of the lower tiers' (2.4-2.9x before a step up was
    told within ten arrivals).  2.2-7.1x (median 3.5) with the service time from
    completions alone: seed 3's 7.1 was Turbo waiting in the gateway for slots the lower tiers took
    while the estimate still read the quiet minute's.  6.4-18.6x (median 7.9) with an eighth of
    the batch as the gate."""
    worst = [max(turbo_ratios("a100", seed)) for seed in SEEDS]
    assert max(worst) <= 1.5, worst


def test_on_the_a100_fleet_turbo_is_not_sent_where_every_prefill_has_just_begun() -> None:
    """Over 24 seeds (the reference pooled over all of them), the worst window is within 1.5× in 18:
    14 with such a Turbo request served Standard (sched/turbo_supply.py ``prefill_clear``) but a
    lower-tier head L2 held back ending the dispatch round (sched/flow_pump.py), 6 with neither.  No
    Turbo request is refused: the rule holds only while downgraded requests leave Standard's line
    within Turbo's objective."""
    seeds = range(1, 25)
    base = unloaded_p95("a100", seeds)
    within = sum(max(turbo_ratios("a100", seed, base)) <= 1.5 for seed in seeds)
    assert within >= 15, within


def test_a_cold_gateway_at_a_fifth_of_capacity_does_not_hold_the_lower_tiers_back() -> None:
    """Before the pool's service time is measured, Turbo's headroom has no evidence to be sized
    on (sched/headroom.py): the lower tiers go at once, as Turbo does."""
    worst = []
    for name in ("l4", "h100"):
        for seed in SEEDS:
            records, hold, _ = run(name, seed)
            light = [r for r in records if r.scheduled_s < hold and r.ok and r.ttft_s is not None]
            p95s = {tier: p95([r.ttft_s for r in light if r.tier_served == tier]) for tier in ("turbo", "standard",
                                                                                               "relax")}
            worst.append((name, seed, round(max(p95s["standard"], p95s["relax"]) / p95s["turbo"], 2)))
    assert all(ratio <= 1.5 for _, _, ratio in worst), worst


def unloaded_p95(name: str, seeds: Iterable[int] = SEEDS) -> float:
    """The fleet's Turbo p95 at 0.2×, over the four seeds' 0.2× halves (71–102 answers).  One
    seed's own 17–26 put its p95 at about its maximum, and a single collision at 0.2× doubles it
    (the A100 fleet's seed 3: 0.142 s against the other seeds' 0.078–0.080)."""
    light = [r.ttft_s for seed in seeds for records, hold, _ in [run(name, seed)] for r in records
             if r.scheduled_s < hold and r.tier_served == "turbo" and r.ok]
    return p95(light)


def turbo_ratios(name: str, seed: int, base: float | None = None) -> list[float]:
    """Turbo's p95 per window after the step ÷ ``base``, by default the fleet's at 0.2×
    (``unloaded_p95``), after checking that no Turbo request was refused and Standard met its
    objective."""
    records, hold, window = run(name, seed)
    base = unloaded_p95(name) if base is None else base
    ratios = []
    t = hold
    while t + window <= 2 * hold:
        w = [r.ttft_s for r in records if t <= r.scheduled_s < t + window and r.tier_served == "turbo" and r.ok]
        ratios.append(p95(w) / base)
        t += window
    heavy = [r for r in records if r.scheduled_s >= hold]
    assert not [r for r in heavy if r.tier_asked == "turbo" and r.status in (429, 503)], seed
    served = [r for r in heavy if r.scheduled_s >= hold + 2 * window and r.tier_served == "standard" and r.ok]
    assert served and sum(r.ttft_s <= 5.0 for r in served) >= 0.9 * len(served), seed
    return ratios


def test_a_gateway_restarted_under_an_overload_does_as_one_that_never_stopped() -> None:
    """The A100 fleet is where a restart cost most (before the pool's service time travelled in the
    store: a median worst window of 5.6× against 3.2× uninterrupted).  Its windows sit at its
    engine floor, and one run's trajectory after any perturbation drifts from the same run's
    uninterrupted one (seed 5: 4.2× against 1.75× with nothing else changed), so the restart is
    judged on the median over eight seeds, not seed by seed."""
    bench = surge_benchmark()
    figure = bench.simulated_restart(bench.FLEETS["a100"], 25.0, seeds=range(1, 9))
    restarted, uninterrupted = figure["restarted_median"], figure["uninterrupted_median"]
    assert restarted <= 1.3 * uninterrupted, figure


def surge_benchmark() -> ModuleType:
    """benchmarks/surge.py, whose simulated restart is the one its JSON reports."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "surge.py"
    spec = importlib.util.spec_from_file_location("surge_benchmark", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module

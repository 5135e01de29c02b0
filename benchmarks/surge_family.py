"""Turbo at the onset of a surge on fleets nothing was tuned on (issue 38), in the simulator.

``benchmarks/surge.py`` steps three fleets chosen up front; a rule tuned while watching them can
still break on the next fleet.  This draws ``--fleets`` fleets at random from a fixed generator
(``--family-seed``: GPU, sequence limit, replicas, time scale, request shape, 20–30 % Turbo and a
Standard / Relax split), and runs each through ``surge.py``'s simulated step (0.2× → 2× of
capacity, the gateway's own core, ``max_num_seqs`` configured) for ``--seeds``.  Per fleet:

- ``mixed``: the largest 5-s window p95 ratio of Turbo's TTFT after the step, per seed;
- ``alone``: the same with Turbo alone at the rate it asks at 2× (``surge.engine_floor``): what
  the engines give Turbo's own load, which no scheduling of the other tiers gets under;
- ``class``: ``engine`` where Turbo alone already passes ``ENGINE_BOUND`` in some seed (long
  prompts whose prefills meet each other), ``thin`` where the unloaded reference has fewer than
  ``MIN_REFERENCE`` Turbo answers (its p95 is about its maximum),
  else ``scheduling``: what the gateway's rules answer for.  Each half lasts ``--hold`` seconds,
  or long enough for ``REFERENCE_SENT`` Turbo requests at 0.2× (a slow fleet's run is longer).

The summary counts the scheduling fleets' runs within the 1.5× target, and gives per class what
the lower tiers get (Standard's goodput within its objective at 2×, every tier at 0.2× from a cold
gateway against Turbo): a rule is judged on both.  Virtual time (engine
seconds, as ``surge.py --floor-only``): the figures do not depend on the machine's load.

    python benchmarks/surge_family.py [--fleets 24] [--family-seed 2026] [--seeds 1,2,3,4] [--hold 25]
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Sequence
from typing import Any

from surge import Fleet, analyse, ratio, simulated
from turbogate.sim.progress import Bar

GPUS = ("L4", "A10G", "L40S", "A100-80G-SXM", "H100-SXM", "H200")
SHAPES = ((128, 256), (256, 128), (512, 128), (1024, 64), (64, 512), (256, 256))
TARGET = 1.5
#: Turbo alone above this in some seed: the engines, not the gateway, set the ratio.
ENGINE_BOUND = 1.3
#: Fewest Turbo answers at 0.2× whose p95 is a reference (the run's unloaded figure).
MIN_REFERENCE = 20
#: Turbo requests the 0.2× half is made long enough to send (a slow fleet's run is longer).
REFERENCE_SENT = 50
#: The longest half a slow fleet gets (seconds).
MAX_HOLD_S = 240.0


def draw_fleets(count: int, family_seed: int) -> list[Fleet]:
    """``count`` fleets from a generator fixed by ``family_seed`` (drawn before anything is run)."""
    rng = random.Random(family_seed)
    fleets = []
    for i in range(count):
        gpu, seqs, replicas = rng.choice(GPUS), rng.choice((8, 16, 32, 64)), rng.choice((2, 3, 4))
        scale, (prompt, output) = rng.choice((0.2, 0.5, 1.0, 1.5)), rng.choice(SHAPES)
        turbo = rng.choice((0.2, 0.25, 0.3))
        standard = round((1 - turbo) * rng.choice((0.6, 0.7, 0.8, 0.9)), 2)
        relax = round(1 - turbo - standard, 2)
        fleets.append(Fleet(f"f{i}", gpu, seqs, replicas, scale, prompt, output,
                            f"turbo={turbo},standard={standard},relax={relax}"))
    return fleets


def hold_for(fleet: Fleet, hold_s: float) -> float:
    """Each half's length: ``hold_s``, or long enough for ``REFERENCE_SENT`` Turbo requests at
    0.2× (at most ``MAX_HOLD_S``)."""
    return min(MAX_HOLD_S, max(hold_s, math.ceil(REFERENCE_SENT / (0.2 * fleet.capacity_rps() * fleet.turbo_share))))


def judge(fleet: Fleet, hold_s: float, seeds: Sequence[int]) -> dict[str, Any]:
    """One fleet's mixed and Turbo-alone worst windows per seed, over the mixed run's reference."""
    hold_s = hold_for(fleet, hold_s)
    mixed: list[float | None] = []
    alone: list[float | None] = []
    goodput: list[float] = []
    asked_goodput: list[float] = []
    served: list[float] = []
    kept: list[float | None] = []
    cold: list[float | None] = []
    thin = False
    for seed in seeds:
        m = analyse(simulated(fleet, hold_s, seed, turbo_alone=False), fleet, hold_s)
        base = m["turbo_unloaded_ttft_s"]
        goodput.append(m["goodput_at_2x"]["standard"]["goodput_rps"])
        asked_goodput.append(m["goodput_at_2x"]["standard"]["asked_goodput_rps"])
        served.append(round(sum(t["served_rps"] for t in m["goodput_at_2x"].values()), 3))
        asked = m["turbo_asked_at_2x"]
        told = m["turbo_downgraded"] + m["turbo_refused_at_once"] + m["turbo_shed_after_wait"]
        kept.append(round(1.0 - told / asked, 3) if asked else None)
        cold.append(max((m["cold_light"][t]["ratio_to_turbo"] or 0.0 for t in ("standard", "relax")), default=None))
        thin = thin or base["n"] < MIN_REFERENCE
        a = analyse(simulated(fleet, hold_s, seed, turbo_alone=True), fleet, hold_s)
        worst = max((w["p95_ratio"] * a["turbo_unloaded_ttft_s"]["p95"] for w in a["turbo_windows"]
                     if w["p95_ratio"] is not None), default=None)
        mixed.append(m["max_window_p95_ratio"])
        alone.append(ratio(worst, base["p95"]))
    engine_bound = any(v is not None and v > ENGINE_BOUND for v in alone)
    kind = "thin" if thin else "engine" if engine_bound else "scheduling"
    return {"fleet": fleet.name,
            "shape": f"{fleet.replicas}x {fleet.gpu}, {fleet.seqs} seqs, x{fleet.scale}, "
                     f"{fleet.prompt}/{fleet.output} tokens, {fleet.mix}",
            "hold_s": hold_s, "mixed": mixed, "alone": alone, "class": kind,
            "standard_goodput_rps": goodput, "standard_asked_goodput_rps": asked_goodput,
            "served_rps": served, "turbo_served_turbo": kept, "cold_ratio": cold}


def _geomean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v]
    return round(math.exp(sum(math.log(v) for v in known) / len(known)), 3) if known else None


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per class: fleets, runs within the target, the geometric mean of the worst windows and of
    Standard's goodput within its objective at 2× (what a rule costs the lower tiers: compare two
    versions' by their ratio; a run without any is counted apart), and the worst cold ratio (every
    lower tier's p95 over Turbo's at 0.2×).  Standard's goodput counts the Turbo requests served
    Standard, so beside it: the goodput of the requests that asked for Standard
    (``geomean_standard_asked_goodput_rps``), every tier's answers at 2× (``geomean_served_rps``,
    what a rule costs the fleet) and the share of Turbo's requests at 2× served Turbo
    (``mean_turbo_served_turbo``).
    ``all`` is every fleet, whatever its class: a rule that bounds Turbo's own load moves fleets
    between the classes, and ``all`` compares two versions on the same runs."""
    out: dict[str, Any] = {}
    for kind in ("scheduling", "engine", "thin", "all"):
        mine = [r for r in rows if kind in ("all", r["class"])]
        kept = [v for r in mine for v in r["turbo_served_turbo"] if v is not None]
        worst = [v for r in mine for v in r["mixed"]]
        out[kind] = {"fleets": len(mine), "runs": len(worst),
                     "within_target": sum(1 for v in worst if v is not None and v <= TARGET),
                     "geomean_worst_window": _geomean(worst),
                     "geomean_standard_goodput_rps": _geomean([v for r in mine for v in r["standard_goodput_rps"]]),
                     "geomean_standard_asked_goodput_rps": _geomean(
                         [v for r in mine for v in r["standard_asked_goodput_rps"]]),
                     "runs_without_standard_goodput": sum(1 for r in mine for v in r["standard_goodput_rps"] if not v),
                     "geomean_served_rps": _geomean([v for r in mine for v in r["served_rps"]]),
                     "mean_turbo_served_turbo": round(sum(kept) / len(kept), 3) if kept else None,
                     "max_cold_ratio": max((v for r in mine for v in r["cold_ratio"] if v is not None), default=None)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fleets", type=int, default=24, help="how many fleets to draw")
    ap.add_argument("--family-seed", type=int, default=2026, help="the fleets' generator seed")
    ap.add_argument("--seeds", default="1,2,3,4", help="comma-separated load seeds per fleet")
    ap.add_argument("--hold", type=float, default=25.0, help="seconds at 0.2× and then at 2× (each)")
    args = ap.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        ap.error(f"--seeds: comma-separated integers, not {args.seeds!r}")
    if args.fleets < 1 or not seeds:
        ap.error("--fleets must be at least 1 and --seeds must name a seed")
    fleets = draw_fleets(args.fleets, args.family_seed)
    rows = []
    with Bar(True, "fleets", len(fleets)) as advance:
        for fleet in fleets:
            rows.append(judge(fleet, args.hold, seeds))
            advance(1)
    print(json.dumps({"family_seed": args.family_seed, "seeds": seeds, "hold_s": args.hold, "target": TARGET,
                      "engine_bound": ENGINE_BOUND, "min_reference": MIN_REFERENCE,
                      "summary": summary(rows), "fleets": rows}))


if __name__ == "__main__":
    main()

"""The knee guard in ``turbogate sim``: A/B/C over one ramp from 0.5× to 2× the fleet's knee.

* **A** — Turbo always granted (the full policy, no guard);
* **B** — the knee guard on, its knee from a run folder (a sim ramp of A, measured first);
* **B-plan**, **B-online** — the same guard with the planner's knee, and with the knee learnt
  online from live signals (no knee given);
* **C** — Standard only (Turbo switched off: every request asking Turbo is served Standard).

Same fleet as benchmarks/sim_fidelity.py (2 × L4, Llama-3.1-8B, 8 seqs, 128/48 tokens,
20 % of requests ask Turbo), same seed, same requests in every run.  Per load band (one held
step of the ramp) and policy: Turbo p95 TTFT (requests served Turbo), the same for every request
that asked Turbo, Standard p95 TTFT (requests that asked Standard), total goodput (answers whose
TTFT met the SLO of the tier they were served), shed rate, the fleet's cost per 1k answers and
the price billed per 1k answers (tier weights by the tier served: a downgrade is billed Standard).

    python benchmarks/guard_abc.py [--step-s 120] [--steps 7] [--turbo-slo-ms 500] [--table]

prints one JSON object (``--table`` also writes the Markdown tables to stderr).  Acceptance (B;
``accept_plan`` and ``accept_online`` for the other knee sources): ``turbo_p95_within_slo_at_2x``
and ``goodput_within_5pct_of_c_at_2x``, with the worst band's goodput gap beside them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from turbogate.bench.options import LoadOptions, build_load
from turbogate.config import hash_key, parse_config
from turbogate.configpolicy import knee_source
from turbogate.results import RequestRecord, write_run
from turbogate.results.percentile import percentile
from turbogate.sim.build import SimConfig
from turbogate.sim.fleet import parse_fleet
from turbogate.sim.run import simulate, summarize_sim

KEY = "sk-guard-abc"
GPU, MODEL, SEQS, PROMPT, OUTPUT, REPLICAS = "L4", "llama-3.1-8b", 8, 128, 48, 2
TIER_PRICE = {"turbo": 2.0, "standard": 1.0, "relax": 0.5}  # billed per answer, by the tier served
SCRAPE_S = 0.5


def gateway_data(knee: dict[str, Any] | None = None, turbo: bool = True,
                 guard: dict[str, Any] | None = None) -> dict[str, Any]:
    """The gateway config of every run; ``knee`` adds the pool's knee source (the guard),
    ``guard`` its thresholds (``knee_guard:``)."""
    return {
        "tenants": [{"name": "abc", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "emu", "models": [MODEL],
                   "replicas": [{"url": f"http://127.0.0.1:{9000 + i}", "engine": "emulator", "max_concurrency": SEQS}
                                for i in range(REPLICAS)], **(knee or {})}],
        "tiers": {"turbo": {"enabled": turbo}},
        "scrape": {"interval_s": SCRAPE_S, "stale_after_s": 3.0, "timeout_s": 1.0},
        # The limit held at the engines' 8 seqs, as in sim_fidelity (docs/sim.md, "Fidelity").
        "concurrency": {"initial": SEQS, "queue_tolerance": 1000},
        "health": {"interval_s": 0.5},
        "knee_guard": guard or {},
    }


PLAN = {"gpu": GPU, "model": MODEL, "prompt_tokens": PROMPT + 10, "output_tokens": OUTPUT, "max_num_seqs": SEQS}


def fleet_data() -> dict[str, Any]:
    return {"pools": [{"name": "emu", "replicas": [{"count": REPLICAS, "gpu": GPU, "model": MODEL,
                                                     "max_num_seqs": SEQS}]}],
            "scrape": {"interval_s": SCRAPE_S}}


def load_options(lo: float, hi: float, steps: int, step_s: float, seed: int, turbo_share: float,
                 shape: str = "steps") -> LoadOptions:
    return build_load(shape=shape, qps=None, qps_start=lo, qps_end=hi, steps=steps, duration=steps * step_s,
                      arrivals="poisson", burstiness=1.0, prompt_tokens=str(PROMPT), output_tokens=str(OUTPUT),
                      dataset=None, no_seed=False, tiers=f"turbo={turbo_share},standard={1 - turbo_share}",
                      n_api_keys=1, random_seed=seed,
                      slo=None, knee_method="throughput", knee_k=2.0, knee_metric="ttft", fleet_cost=1.0,
                      tier_cost=None)


def run_sim(gw: dict[str, Any], load: LoadOptions, label: str) -> tuple[list[RequestRecord], Any]:
    sc = SimConfig(gateway=parse_config(gw), fleet=parse_fleet(fleet_data()), load=load, api_keys=(KEY,),
                   label=label)
    outcome = simulate(sc)
    return outcome.records, summarize_sim(sc, outcome)


p95 = partial(percentile, q=95)


def band_row(records: Sequence[RequestRecord], done: Sequence[RequestRecord], window_s: float,
             slo: dict[str, float], gpu_hour_cost: float) -> dict[str, Any]:
    """One policy's figures over one load band: latencies of the requests scheduled in it
    (``records``), rates of the answers that ended in it (``done``: what the fleet delivered
    then, whenever those requests arrived)."""
    ok = [r for r in records if r.ok and r.ttft_s is not None]
    delivered = [r for r in done if r.ok and r.ttft_s is not None]
    asked_turbo = [r for r in records if r.tier_asked == "turbo"]
    served_turbo = [r.ttft_s for r in ok if r.tier_served == "turbo" and r.ttft_s is not None]
    good = [r for r in delivered if r.ttft_s is not None and r.ttft_s <= slo.get(r.tier_served or "", math.inf)]
    answered = len(delivered)
    per_s = REPLICAS * gpu_hour_cost / 3600.0
    return {
        "turbo_p95_ttft_s": p95(served_turbo),
        "turbo_asked_p95_ttft_s": p95([r.ttft_s for r in ok if r.tier_asked == "turbo" and r.ttft_s is not None]),
        "turbo_served_share": round(len(served_turbo) / len(asked_turbo), 4) if asked_turbo else None,
        "standard_p95_ttft_s": p95([r.ttft_s for r in ok if r.tier_asked == "standard" and r.ttft_s is not None]),
        "goodput_rps": round(len(good) / window_s, 4),
        "achieved_rps": round(answered / window_s, 4),
        "shed_rate": round(sum(1 for r in records if not r.ok) / len(records), 4) if records else 0.0,
        "cost_per_1k": round(1000 * per_s * window_s / answered, 5) if answered else None,
        "billed_per_1k": round(1000 * sum(TIER_PRICE.get(r.tier_served or "", 1.0) for r in delivered) / answered, 1)
        if answered else None,
    }


def bands(runs: dict[str, list[RequestRecord]], summary: Any, knee: float, slo: dict[str, float],
          gpu_hour_cost: float) -> list[dict[str, Any]]:
    out = []
    for st in summary.steps:
        step = st.step
        window = step.end_s - step.start_s
        row: dict[str, Any] = {"x_knee": round(step.offered_rps / knee, 3), "offered_rps": round(step.offered_rps, 3)}
        for name, recs in runs.items():
            ended = [r for r in recs if r.end_s is not None and step.start_s <= r.end_s < step.end_s]
            row[name] = band_row([r for r in recs if r.step == step.index], ended, window, slo, gpu_hour_cost)
        out.append(row)
    return out


def accept(rows: list[dict[str, Any]], slo_s: float, guarded: str = "B") -> dict[str, Any]:
    """The issue's acceptance at 2× the knee (the last band), and the worst band beside it."""
    top = rows[-1]
    t95 = top[guarded]["turbo_p95_ttft_s"]
    gaps = [1 - r[guarded]["goodput_rps"] / r["C"]["goodput_rps"] for r in rows if r["C"]["goodput_rps"] > 0]
    gap_2x = 1 - top[guarded]["goodput_rps"] / top["C"]["goodput_rps"] if top["C"]["goodput_rps"] > 0 else None
    return {"turbo_p95_at_2x_s": t95, "turbo_served_share_at_2x": top[guarded]["turbo_served_share"],
            "turbo_p95_within_slo_at_2x": t95 is not None and t95 <= slo_s,
            "goodput_gap_vs_c_at_2x": None if gap_2x is None else round(gap_2x, 4),
            "goodput_within_5pct_of_c_at_2x": gap_2x is not None and gap_2x <= 0.05,
            "worst_band_goodput_gap_vs_c": round(max(gaps), 4) if gaps else None,
            "goodput_within_5pct_of_c_every_band": bool(gaps) and max(gaps) <= 0.05}


def markdown(rows: list[dict[str, Any]], policies: Sequence[str]) -> str:
    def ms(v: float | None) -> str:
        return "–" if v is None else f"{v * 1000:.0f} ms"

    lines = []
    for r in rows:
        lines += [f"\n**{r['x_knee']:.2f}× knee ({r['offered_rps']:.2f} req/s offered)**\n",
                  "| policy | Turbo p95 TTFT (served Turbo) | asked Turbo: served Turbo, p95 TTFT | Standard p95 TTFT "
                  "| goodput req/s | shed | cost / 1k | billed / 1k |",
                  "|---|---|---|---|---|---|---|---|"]
        for p in policies:
            b = r[p]
            share = "–" if b["turbo_served_share"] is None else f"{b['turbo_served_share']:.0%}"
            lines.append(f"| {p} | {ms(b['turbo_p95_ttft_s'])} | {share}, {ms(b['turbo_asked_p95_ttft_s'])} | "
                         f"{ms(b['standard_p95_ttft_s'])} | {b['goodput_rps']:.2f} | {b['shed_rate']:.1%} | "
                         f"{b['cost_per_1k']} | {b['billed_per_1k']} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step-s", type=float, default=120.0, help="virtual seconds per load band (default 120)")
    ap.add_argument("--steps", type=int, default=7, help="load bands from 0.5× to 2× the knee (default 7)")
    ap.add_argument("--turbo-slo-ms", type=float, default=500.0, help="Turbo's TTFT SLO (default 500 ms)")
    ap.add_argument("--standard-slo-ms", type=float, default=None,
                    help="Standard's TTFT SLO (default none: every Standard answer counts toward goodput; "
                    "Standard's own 30 s queue budget sheds the rest)")
    ap.add_argument("--turbo-share", type=float, default=0.5, help="share of requests asking Turbo (default 0.5)")
    ap.add_argument("--guard", type=json.loads, default=None, metavar="JSON",
                    help="knee_guard thresholds for the B runs, e.g. '{\"enter_closed\": 3}' (default: the config's)")
    ap.add_argument("--gpu-hour-cost", type=float, default=1.0, help="cost units per GPU-hour (default 1)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--table", action="store_true", help="also write the Markdown tables to stderr")
    args = ap.parse_args()
    slo = {"turbo": args.turbo_slo_ms / 1000}
    if args.standard_slo_ms is not None:
        slo["standard"] = args.standard_slo_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        # 1. The knee: a sim ramp of A well past saturation, measured as bench would (a run folder).
        probe_load = load_options(1.0, 9.0, 9, 60.0, args.seed, args.turbo_share)
        records, summary = run_sim(gateway_data(), probe_load, "guard_abc: knee probe")
        run_dir = write_run(Path(tmp) / "knee-probe", records, [], summary, report=False)
        knee = summary.knee()
        if knee is None:
            raise SystemExit("the knee probe found no knee; ramp higher")
        # 2. The same ramp, 0.5× → 2× the knee, under each policy.
        load = load_options(0.5 * knee, 2.0 * knee, args.steps, args.step_s, args.seed, args.turbo_share)
        g = args.guard
        variants = {"A": gateway_data(), "B": gateway_data({"knee_from": str(run_dir)}, guard=g),
                    "B-plan": gateway_data({"knee_from": "plan", "plan": PLAN}, guard=g),
                    "B-online": gateway_data({"knee_from": "online"}, guard=g), "C": gateway_data(turbo=False)}
        runs: dict[str, list[RequestRecord]] = {}
        ref = None
        for name, gw in variants.items():
            runs[name], summ = run_sim(gw, load, f"guard_abc: {name}")
            ref = ref or summ
    plan_src = knee_source(parse_config(variants["B-plan"]).pools[0])
    rows = bands(runs, ref, knee, slo, args.gpu_hour_cost)
    out = {"setup": {"replicas": REPLICAS, "gpu": GPU, "model": MODEL, "max_num_seqs": SEQS, "prompt": PROMPT,
                     "output": OUTPUT, "turbo_share_asked": args.turbo_share, "step_s": args.step_s,
                     "steps": args.steps,
                     "seed": args.seed, "slo_ttft_s": slo, "knee_measured_rps": round(knee, 3),
                     "knee_planned_rps": None if plan_src is None else round(plan_src.knee_rps, 3),
                     "guard": args.guard or "the config's defaults (docs/gateway.md)"},
           "bands": rows, "accept": accept(rows, slo["turbo"]),
           "accept_online": accept(rows, slo["turbo"], "B-online"),
           "accept_plan": accept(rows, slo["turbo"], "B-plan")}
    print(json.dumps(out))
    if args.table:
        sys.stderr.write(markdown(rows, list(variants)) + "\n")


if __name__ == "__main__":
    main()

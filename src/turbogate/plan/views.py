"""Rich tables of ``turbogate plan roi`` and ``plan matrix`` (the shell's rendering, no I/O).

Every latency column names its statistic: the closed form (and a run given with ``--from-run``)
gives *means*; the tail that Turbo is sold on comes from ``plan size`` or ``sim`` (percentiles).
"""

from __future__ import annotations

import math

from rich.table import Table

from turbogate.plan.matrix import LABELS, Decision, Thresholds, TpChoice
from turbogate.plan.roi import RoiReport

TAIL_HINT = "for p95 per tier: turbogate plan size, or turbogate sim on the fleet"


def ms(x: float | None) -> str:
    return "—" if x is None or math.isinf(x) else f"{x * 1000:.1f}"


def _slo(met: bool, unset: bool) -> str:
    return "none" if unset else ("met" if met else "missed")


def roi_table(r: RoiReport, measured: bool = False) -> Table:
    source = "the run's measured means" if measured else "the closed form's means"
    t = Table(title=f"ROI of enabling Turbo (fleet cost {r.inputs.fleet_cost_per_hour:.2f} USD/h, Standard price "
                    f"{r.price_per_mtok:.4f} USD/1M tok, Turbo ×{r.inputs.turbo_multiplier:g}, "
                    f"knee {r.knee_rps:.2f} req/s ({r.knee_source}), saturation {r.saturation_rps:.2f} req/s)",
              caption=f"TTFT: a mean per tier ({source}), and the SLO column judges that mean; a mean hides the "
                      f"tail ({TAIL_HINT}).", caption_justify="left")
    for col in ("band", "load req/s", "tier", "served req/s", "shed", "attempts/req", "mean TTFT ms",
                "SLO (on mean)", "USD/1M tok", "USD/1k req", "Turbo-off USD/1M tok", "ROI"):
        t.add_column(col, justify="right")
    for row in r.rows:
        off = row.turbo_off
        for k, tc in enumerate(row.turbo_on):
            t.add_row(row.band if k == 0 else "", f"{row.load_rps:.2f}" if k == 0 else "", tc.tier,
                      f"{tc.served_rps:.2f}", f"{tc.shed_rate:.0%}", f"{tc.attempts_per_request:.2f}",
                      ms(tc.ttft_s), _slo(tc.slo_met, tc.tier == "standard" and r.inputs.standard_slo_ttft_s is None),
                      "—" if tc.cost_per_mtok is None else f"{tc.cost_per_mtok:.4f}",
                      "—" if tc.cost_per_1k_requests is None else f"{tc.cost_per_1k_requests:.4f}",
                      ("—" if off.cost_per_mtok is None else f"{off.cost_per_mtok:.4f}") if k == 0 else "",
                      f"{row.roi:+.1%}" if k == 0 else "")
    return t


def decision_table(d: Decision, replicas: int) -> Table:
    needed = (f"{d.replicas_needed} replica(s) put the peak at the knee (the fleet has {replicas}); "
              if d.replicas_needed != replicas else f"{replicas} replica(s) put the peak at the knee; ")
    t = Table(title=f"Recommendation: {d.label}   (peak {d.per_replica_rps:.2f} req/s per replica, knee "
                    f"{d.knee_rps:.2f} ({d.knee_source}), saturation {d.saturation_rps:.2f}, "
                    f"Turbo cap {d.turbo_cap_share:.0%} of traffic)",
              caption=f"{needed}knee: mean E2E at the knee factor × unloaded; {TAIL_HINT}.", caption_justify="left")
    t.add_column("rule")
    t.add_column("verdict")
    t.add_column("reason")
    for r in d.rules:
        t.add_row(r.name, LABELS[r.verdict], r.reason)
    return t


def tp_table(choices: tuple[TpChoice, ...], current_tp: int, gpu: str) -> Table:
    t = Table(title=f"Which TP? Replicas of {gpu} that put the peak at the knee, cheapest first (closed form)",
              caption="knee and saturation per replica, req/s; plan size confirms a fleet's p95 in the simulator.",
              caption_justify="left")
    for col in ("TP", "replicas", "GPUs", "USD/h", "knee req/s", "saturation req/s", ""):
        t.add_column(col, justify="right" if col else "left")
    for i, c in enumerate(choices):
        mark = ", ".join(x for x in ("cheapest" if i == 0 else "", "this run's --tp" if c.tp == current_tp else "")
                         if x)
        t.add_row(str(c.tp), str(c.replicas), str(c.gpus), f"{c.cost_per_hour:.2f}", f"{c.knee_rps:.2f}",
                  f"{c.saturation_rps:.2f}", mark)
    return t


def thresholds_table(th: Thresholds, what: str) -> Table:
    n = th.replicas
    t = Table(title=f"Up to what load is Turbo on, capped, off? {what}, {n} replica(s); knee {th.knee_rps:.2f} "
                    f"req/s per replica ({th.knee_source}), saturation {th.saturation_rps:.2f}",
              caption="Give --peak-rps for the recommendation at one load.")
    for col, right in (("fleet req/s", True), ("per replica req/s", True), ("recommendation", False),
                       ("why", False)):
        t.add_column(col, justify="right" if right else "left")
    for b in th.bands:
        if b.to_rps is None:
            fleet, per = f"from {b.from_rps * n:.2f}", f"from {b.from_rps:.2f}"
        elif b.from_rps == 0:
            fleet, per = f"up to {b.to_rps * n:.2f}", f"up to {b.to_rps:.2f}"
        else:
            fleet, per = f"{b.from_rps * n:.2f} – {b.to_rps * n:.2f}", f"{b.from_rps:.2f} – {b.to_rps:.2f}"
        t.add_row(fleet, per, b.label, "; ".join(b.reasons))
    return t

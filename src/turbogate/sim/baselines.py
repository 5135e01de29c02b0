"""``--compare-policies``: one workload under each gateway policy, one table per load level.

Per policy and load level: each tier's p95 TTFT and shed rate, all tiers' p95 TPOT, goodput and
shed rate.  A tier's p95 counts only its served requests, so its shed rate belongs beside it (a
policy that sheds Turbo can show a fine Turbo p95).

Besides the Flow's modes (sched/policy.py), ``phase-aware``: the full policy with phase-aware
replica choice (sched/phase.py) at the config's ``bands.phase_weight``, or
:data:`DEFAULT_PHASE_WEIGHT` where the config leaves it off.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import orjson
from rich.console import Console
from rich.table import Table

from turbogate.results import ALL, Summary
from turbogate.results.fmt import fmt_num
from turbogate.sched.policy import FlowPolicy

PHASE_AWARE = "phase-aware"
#: The weight ``phase-aware`` runs at when the config's ``bands.phase_weight`` is 0 (off).
DEFAULT_PHASE_WEIGHT = 1.0


def phase_aware(policy: FlowPolicy) -> FlowPolicy:
    """``policy`` with phase-aware replica choice on (its own weight, else the default)."""
    weight = policy.picker.phase_weight or DEFAULT_PHASE_WEIGHT
    return replace(policy, picker=replace(policy.picker, phase_weight=weight))


@dataclass(frozen=True, slots=True)
class BaselineRow:
    policy: str
    offered_rps: float
    turbo_p95_ttft_s: float | None
    turbo_shed_rate: float | None
    standard_p95_ttft_s: float | None
    standard_shed_rate: float | None
    goodput_rps: float
    shed_rate: float
    relax_p95_ttft_s: float | None = None
    relax_shed_rate: float | None = None
    p95_tpot_s: float | None = None  # all tiers


def baseline_rows(summaries: Mapping[str, Summary]) -> list[BaselineRow]:
    rows: list[BaselineRow] = []
    for policy, summ in summaries.items():
        for st in summ.steps:
            tiers = st.tiers
            all_ = tiers.get(ALL)
            turbo, std, relax = tiers.get("turbo"), tiers.get("standard"), tiers.get("relax")
            rows.append(BaselineRow(
                policy, st.step.offered_rps,
                None if turbo is None else turbo.pct("ttft", "p95"), None if turbo is None else turbo.shed_rate,
                None if std is None else std.pct("ttft", "p95"), None if std is None else std.shed_rate,
                0.0 if all_ is None else all_.goodput_rps, 0.0 if all_ is None else all_.shed_rate,
                None if relax is None else relax.pct("ttft", "p95"), None if relax is None else relax.shed_rate,
                None if all_ is None else all_.pct("tpot", "p95")))
    return rows


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.0f} ms"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.1%}"


_COLUMNS = ("policy", "Turbo p95 TTFT", "Turbo shed", "Standard p95 TTFT", "Standard shed", "Relax p95 TTFT",
            "Relax shed", "p95 TPOT", "goodput req/s", "shed (all)")


def _cells(r: BaselineRow) -> tuple[str, ...]:
    return (r.policy, _ms(r.turbo_p95_ttft_s), _pct(r.turbo_shed_rate), _ms(r.standard_p95_ttft_s),
            _pct(r.standard_shed_rate), _ms(r.relax_p95_ttft_s), _pct(r.relax_shed_rate), _ms(r.p95_tpot_s),
            fmt_num(r.goodput_rps), _pct(r.shed_rate))


def print_baselines(rows: list[BaselineRow], console: Console) -> None:
    for load in sorted({r.offered_rps for r in rows}):
        t = Table(title=f"offered {fmt_num(load, 4)} req/s")
        for col in _COLUMNS:
            t.add_column(col)
        for r in rows:
            if r.offered_rps == load:
                t.add_row(*_cells(r))
        console.print(t)


def write_baselines(out: Path, rows: list[BaselineRow]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    fields = list(BaselineRow.__dataclass_fields__)
    (out / "baselines.json").write_bytes(orjson.dumps([{f: getattr(r, f) for f in fields} for r in rows],
                                                      option=orjson.OPT_INDENT_2))
    (out / "baselines.md").write_text(markdown(rows), encoding="utf-8")
    with (out / "baselines.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        w.writerows([["" if getattr(r, k) is None else getattr(r, k) for k in fields] for r in rows])


def markdown(rows: list[BaselineRow]) -> str:
    """The tables as Markdown (for docs and issues)."""
    lines: list[str] = []
    for load in sorted({r.offered_rps for r in rows}):
        lines += [f"**offered {fmt_num(load, 4)} req/s**", "", "| " + " | ".join(_COLUMNS) + " |",
                  "|" + "---|" * len(_COLUMNS)]
        lines += ["| " + " | ".join(_cells(r)) + " |" for r in rows if r.offered_rps == load]
        lines.append("")
    return "\n".join(lines)

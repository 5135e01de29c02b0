"""``turbogate bench``'s printed summary gives each tier's goodput when the run has an ``--slo``."""

from __future__ import annotations

from rich.console import Console

from tests.results.helpers import saturating_run
from turbogate.bench.cli import print_summary
from turbogate.results import SLO, summarize
from turbogate.results.fmt import fmt_num


def printed(slo: SLO | None) -> tuple[dict[str, str], dict[str, float]]:
    """The "Overall per tier" table's goodput cell per tier, and each tier's goodput."""
    records, steps, _ = saturating_run(capacity=20.0, rates=(5, 10, 20, 40), hold=5.0)
    summary = summarize(records, steps, kind="bench", started_at="2026-12-05T00:00:00+00:00", duration_s=20.0,
                        config={}, slo=slo)
    console = Console(record=True, width=240)
    print_summary(summary, console)
    lines = console.export_text().splitlines()
    header = next(line for line in lines if "┃ tier" in line and "req/s" in line).split("┃")
    cells: dict[str, str] = {}
    if any(c.strip() == "goodput/s" for c in header):
        col = next(i for i, c in enumerate(header) if c.strip() == "goodput/s")
        for tier in summary.overall:
            row = next(line for line in lines if line.startswith(f"│ {tier} "))
            cells[tier] = row.split("│")[col].strip()
    return cells, {tier: g.goodput_rps for tier, g in summary.overall.items()}


def test_each_tier_shows_its_goodput_within_the_runs_slo() -> None:
    cells, goodput = printed(SLO(e2e_s=1.0))
    assert set(cells) == set(goodput) and len(cells) >= 2
    assert all(cells[tier] == fmt_num(goodput[tier]) for tier in cells), (cells, goodput)
    _, achieved = printed(None)  # without an SLO every answer counts
    assert any(goodput[tier] < achieved[tier] for tier in goodput)


def test_without_an_slo_there_is_no_goodput_column() -> None:
    cells, _ = printed(None)
    assert cells == {}

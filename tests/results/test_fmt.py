"""One number formatter: separators, units, no exponent form, no ``-0.0``, no ``8–8`` ranges (issue 42)."""

from __future__ import annotations

import pytest

from turbogate.results.fmt import fmt_cost, fmt_count, fmt_num, fmt_pct, fmt_range, fmt_rate, fmt_signed_pct


@pytest.mark.parametrize(("value", "text"), [
    (4000.0, "4,000"), (537530, "537,530"), (3.19, "3.19"), (0.0123, "0.0123"), (1e6, "1,000,000"),
    (0.00007287, "0.0000729"), (-0.0, "0"), (1e-18, "0.000000000000000001"), (None, "–"),
])
def test_numbers_never_take_exponent_form(value: float | None, text: str) -> None:
    assert fmt_num(value) == text
    assert "e+" not in fmt_num(value) and "e-" not in fmt_num(value)


def test_every_figure_carries_its_unit() -> None:
    assert fmt_rate(4000) == "4,000 req/s"
    assert fmt_rate(12.5, "tok/s") == "12.5 tok/s"
    assert fmt_cost(0.00007287) == "0.00007287 cost units"
    assert fmt_cost(0.0729, per="1k req") == "0.0729 cost units / 1k req"
    assert fmt_count(537530) == "537,530"


def test_a_range_whose_ends_read_the_same_is_one_figure() -> None:
    assert fmt_range(8.0, 8.001) == "8 req/s"
    assert fmt_range(8, 12) == "8–12 req/s"


@pytest.mark.parametrize("tiny", [-0.0001, -0.00049, 0.0, -0.0])
def test_no_negative_zero_percentages(tiny: float) -> None:
    assert fmt_signed_pct(tiny) == "0.0 %"
    assert fmt_pct(tiny) == "0.0 %"


def test_knee_notes_at_thousands_of_req_s_read_without_exponents() -> None:
    from tests.results.helpers import saturating_run
    from turbogate.results import ALL, summarize

    records, steps, _ = saturating_run(capacity=1e6, rates=(1000, 2000, 3000, 4000), hold=0.05)
    s = summarize(records, steps, kind="bench", started_at="2026-12-04T00:00:00+00:00", duration_s=0.2, config={})
    note = s.knees[ALL].note
    assert "4,000 req/s" in note and "e+" not in note, note


def test_plans_signed_percentages_have_no_negative_zero() -> None:
    from turbogate.plan.cli_common import pct

    assert pct(-0.0001) == "+0.0%" and pct(-0.05) == "-5.0%" and pct(0.1234) == "+12.3%"

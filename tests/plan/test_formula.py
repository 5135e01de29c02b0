"""The formula evaluator that fills the workbook's cached values: Excel's semantics on the subset used."""

from __future__ import annotations

import pytest

from turbogate.plan.formula import Book, col_letter, col_number, parse


def _eval(formula: str, cells: dict[tuple[int, int], object] | None = None) -> object:
    grid = {"s": {(1, 1): formula, **(cells or {})}, "t": {(2, 2): 7, (3, 2): "x"}}
    return Book(grid).value("s", 1, 1)


@pytest.mark.parametrize(("formula", "expected"), [
    ("=1+2*3", 7.0),
    ("=-2^2", 4.0),  # unary minus binds tighter than ^ (Excel)
    ("=2^3^2", 64.0),  # ^ is left-associative
    ("=(1+2)*3", 9.0),
    ("=1E+300*10>1", True),
    ("=INT(-1.5)", -2.0),
    ("=ROUNDUP(-1.2,0)", -2.0),  # away from zero
    ("=ROUND(2.5,0)", 3.0),  # half away from zero
    ("=MOD(-1,3)", 2.0),  # sign of the divisor
    ("=SQRT(16)", 4.0),
    ("=MAX(1,MIN(5,3),2)", 3.0),
    ('=IF("AUTO"="auto",1,2)', 1.0),  # text compares without case
    ("=IF(FALSE,1/0,5)", 5.0),  # only the branch taken is evaluated
    ("=CHOOSE(2,1/0,8,1/0)", 8.0),
    ("=AND(TRUE,NOT(FALSE),OR(FALSE,1))", True),
    ("=1/0", "#DIV/0!"),
    ("=SQRT(-1)+1", "#NUM!"),
    ("=t!$B$2*2", 14.0),
    ("=INDEX(t!$B$2:$B$3,MATCH(\"X\",t!$B$2:$B$3,0))", "x"),
    ("=MATCH(\"nope\",t!$B$2:$B$3,0)", "#N/A"),
    ('=t!B9=""', True),  # a blank cell equals "" and 0
    ("=t!B9+1", 1.0),
])
def test_formulas(formula: str, expected: object) -> None:
    assert _eval(formula) == expected


def test_references_and_vlookup() -> None:
    cells = {(2, 1): "=A3*2", (3, 1): 21, (5, 1): "bf16", (5, 2): 2, (6, 1): "fp8", (6, 2): 1}
    assert _eval("=A2+VLOOKUP(\"fp8\",$A$5:$B$6,2,FALSE)", cells) == 43.0


def test_cycles_and_bad_syntax_are_refused() -> None:
    with pytest.raises(ValueError, match="circular"):
        Book({"s": {(1, 1): "=A2", (2, 1): "=A1"}}).value("s", 1, 1)
    with pytest.raises(ValueError):
        parse("=1+")
    with pytest.raises(ValueError, match="unsupported function"):
        parse("=LAMBDA(1)")


def test_column_letters_round_trip() -> None:
    for n in (1, 26, 27, 52, 702, 703, 16384):
        assert col_number(col_letter(n)) == n
    assert col_letter(28) == "AB"

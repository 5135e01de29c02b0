"""The spreadsheet functions, values and comparison of :mod:`turbogate.plan.formula` (pure).

Excel's semantics on the subset the workbook uses: IF and CHOOSE evaluate only the branch taken,
ROUND rounds half away from zero, ROUNDUP away from zero, MOD takes the divisor's sign, MATCH and
VLOOKUP look up exactly (text without case), a blank compares as 0, "" or FALSE as the other side.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from turbogate.errors import TurbogateError

Value = float | str | bool | None  # None: a blank cell
Node = Callable[["Evaluator", str], object]  # (evaluator, current sheet) → Value or a range (list of rows)

ERRORS = ("#DIV/0!", "#N/A", "#NUM!", "#VALUE!", "#REF!")


class XlError(TurbogateError):
    """A spreadsheet error value (``#DIV/0!``, …) travelling up the expression."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class Evaluator(Protocol):
    def cell(self, sheet: str, row: int, col: int) -> Value: ...
    def scalar(self, node: Node, sheet: str) -> Value: ...
    def num(self, node: Node, sheet: str) -> float: ...
    def truth(self, node: Node, sheet: str) -> bool: ...
    def flat(self, node: Node, sheet: str) -> list[Value]: ...


def compare(op: str, a: Value, b: Value) -> bool:
    # A blank compares as the other side's kind; else Excel orders number < text < logical.
    if a is None:
        a = "" if isinstance(b, str) else False if isinstance(b, bool) else 0.0
    if b is None:
        b = "" if isinstance(a, str) else False if isinstance(a, bool) else 0.0

    def key(v: Value) -> tuple[int, float | str]:
        if isinstance(v, bool):
            return 2, float(v)
        if isinstance(v, str):
            return 1, v.lower()
        return 0, float(v or 0.0)

    ka, kb = key(a), key(b)
    return {"=": ka == kb, "<>": ka != kb, "<": ka < kb, ">": ka > kb, "<=": ka <= kb, ">=": ka >= kb}[op]


# ---- the functions ---------------------------------------------------------------------------------------

Function = Callable[[Evaluator, str, list[Node]], Value]


def _if(b: Evaluator, s: str, a: list[Node]) -> Value:
    if b.truth(a[0], s):
        return b.scalar(a[1], s)
    return b.scalar(a[2], s) if len(a) > 2 else False


def _choose(b: Evaluator, s: str, a: list[Node]) -> Value:
    k = int(b.num(a[0], s))
    if not 1 <= k < len(a):
        raise XlError("#VALUE!")
    return b.scalar(a[k], s)


def _numbers(b: Evaluator, s: str, a: list[Node]) -> list[float]:
    return [float(v) for n in a for v in b.flat(n, s) if isinstance(v, int | float) and not isinstance(v, bool)]


def _round(x: float, digits: float, up: bool) -> float:
    f = 10.0 ** int(digits)
    scaled = abs(x) * f
    r = math.ceil(scaled) if up else math.floor(scaled + 0.5)
    return math.copysign(r / f, x) if r else 0.0


def _sqrt(x: float) -> float:
    if x < 0:
        raise XlError("#NUM!")
    return math.sqrt(x)


def _ln(x: float) -> float:
    if x <= 0:
        raise XlError("#NUM!")
    return math.log(x)


def _mod(x: float, y: float) -> float:
    if y == 0:
        raise XlError("#DIV/0!")
    return x - y * math.floor(x / y)


def _match(b: Evaluator, s: str, a: list[Node]) -> Value:
    want = b.scalar(a[0], s)
    for i, v in enumerate(b.flat(a[1], s), start=1):
        if v is not None and compare("=", v, want):
            return float(i)
    raise XlError("#N/A")


def _index(b: Evaluator, s: str, a: list[Node]) -> Value:
    rng = a[0](b, s)
    rows = rng if isinstance(rng, list) else [[rng]]
    r = int(b.num(a[1], s))
    c = int(b.num(a[2], s)) if len(a) > 2 else 1
    if len(rows) == 1 and len(a) == 2:  # one row: the index runs along it
        r, c = 1, r
    if not (1 <= r <= len(rows) and 1 <= c <= len(rows[0])):
        raise XlError("#REF!")
    v = rows[r - 1][c - 1]
    assert not isinstance(v, list)
    return v  # type: ignore[return-value]


def _vlookup(b: Evaluator, s: str, a: list[Node]) -> Value:
    want, rows, k = b.scalar(a[0], s), a[1](b, s), int(b.num(a[2], s))
    if not isinstance(rows, list):
        raise XlError("#VALUE!")
    for row in rows:
        if row[0] is not None and compare("=", row[0], want):
            return row[k - 1]  # type: ignore[no-any-return]
    raise XlError("#N/A")


FUNCTIONS: dict[str, Function] = {
    "IF": _if,
    "CHOOSE": _choose,
    "AND": lambda b, s, a: all([b.truth(n, s) for n in a]),
    "OR": lambda b, s, a: any([b.truth(n, s) for n in a]),
    "NOT": lambda b, s, a: not b.truth(a[0], s),
    "MAX": lambda b, s, a: max(_numbers(b, s, a), default=0.0),
    "MIN": lambda b, s, a: min(_numbers(b, s, a), default=0.0),
    "INT": lambda b, s, a: float(math.floor(b.num(a[0], s))),
    "ROUND": lambda b, s, a: _round(b.num(a[0], s), b.num(a[1], s), up=False),
    "ROUNDUP": lambda b, s, a: _round(b.num(a[0], s), b.num(a[1], s), up=True),
    "MOD": lambda b, s, a: _mod(b.num(a[0], s), b.num(a[1], s)),
    "SQRT": lambda b, s, a: _sqrt(b.num(a[0], s)),
    "LN": lambda b, s, a: _ln(b.num(a[0], s)),
    "MATCH": _match,
    "INDEX": _index,
    "VLOOKUP": _vlookup,
}

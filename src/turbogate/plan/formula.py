"""A small spreadsheet-formula evaluator (pure): the cached values written beside the workbook's formulas.

A workbook written with formulas alone shows blanks in anything that does not recalculate
(pandas, openpyxl ``data_only``, file previewers).  :mod:`turbogate.plan.xlsx` therefore
evaluates every formula here and stores the result with it.  Evaluating the very formula text
that goes into the file (rather than re-deriving each cell from the Python model) means the
cached value is what a spreadsheet computes from that cell, and the tests that compare it with
the CLI check the formulas themselves.

Only the subset the workbook uses: numbers, strings, TRUE/FALSE, ``+ - * / ^``, comparisons,
A1 references and ranges (``$`` allowed, ``sheet!`` prefix), and the functions of
:mod:`.formula_functions`.  Unary minus binds tighter than ``^`` and ``^`` is left-associative,
as in Excel; errors (``#DIV/0!``, ``#N/A``, ``#NUM!``, ``#VALUE!``) propagate as values.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from turbogate.plan.formula_functions import ERRORS, FUNCTIONS, Node, Value, XlError, compare

Grid = Mapping[str, Mapping[tuple[int, int], object]]  # sheet → (row, col) 1-based → constant or "=formula"


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<str>"(?:[^"]|"")*")
  | (?P<func>[A-Za-z_][A-Za-z0-9_.]*(?=\())
  | (?P<sheet>[A-Za-z_][A-Za-z0-9_]*!)
  | (?P<cell>\$?[A-Za-z]{1,3}\$?\d+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<op><>|<=|>=|[-+*/^=<>(),:&])
""", re.VERBOSE)


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError(f"cannot read formula at {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "ws":
            out.append((str(m.lastgroup), m.group()))
    return out


def col_letter(n: int) -> str:
    """1 → A, 27 → AA."""
    out = ""
    while n > 0:
        n, rem = divmod(n - 1, 26)
        out = chr(65 + rem) + out
    return out


def col_number(letters: str) -> int:
    n = 0
    for ch in letters.upper():
        n = n * 26 + ord(ch) - 64
    return n


def _cell_ref(text: str) -> tuple[int, int]:
    m = re.fullmatch(r"\$?([A-Za-z]{1,3})\$?(\d+)", text)
    assert m is not None
    return int(m.group(2)), col_number(m.group(1))


# ---- parsing to closures: each node is a function of the evaluator -------------------------------



def _comparison(op: str, x: Node, y: Node) -> Node:
    return lambda b, s: compare(op, b.scalar(x, s), b.scalar(y, s))


def _joined(x: Node, y: Node) -> Node:
    return lambda b, s: _text(b.scalar(x, s)) + _text(b.scalar(y, s))


def _arithmetic(op: str, x: Node, y: Node) -> Node:
    return lambda b, s: _arith(op, b.num(x, s), b.num(y, s))


@dataclass
class _Parser:
    toks: list[tuple[str, str]]
    i: int = 0

    def peek(self) -> str:
        return self.toks[self.i][1] if self.i < len(self.toks) else ""

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ValueError("formula ends too early")
        tok = self.toks[self.i]
        if expected is not None and tok[1] != expected:
            raise ValueError(f"expected {expected!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        left = self.concat()
        while self.peek() in ("=", "<>", "<", ">", "<=", ">="):
            op = self.take()[1]
            left = _comparison(op, left, self.concat())
        return left

    def concat(self) -> Node:
        left = self.additive()
        while self.peek() == "&":
            self.take()
            left = _joined(left, self.additive())
        return left

    def _binary(self, ops: tuple[str, ...], sub: Callable[[], Node]) -> Node:
        left = sub()
        while self.peek() in ops:
            op = self.take()[1]
            left = _arithmetic(op, left, sub())
        return left

    def additive(self) -> Node:
        return self._binary(("+", "-"), self.term)

    def term(self) -> Node:
        return self._binary(("*", "/"), self.power)

    def power(self) -> Node:
        return self._binary(("^",), self.unary)

    def unary(self) -> Node:
        if self.peek() in ("-", "+"):
            sign = self.take()[1]
            inner = self.unary()
            return (lambda b, s: -b.num(inner, s)) if sign == "-" else (lambda b, s: b.num(inner, s))
        return self.primary()

    def primary(self) -> Node:
        kind, text = self.take()
        if kind == "num":
            v = float(text)
            return lambda b, s: v
        if kind == "str":
            sv = text[1:-1].replace('""', '"')
            return lambda b, s: sv
        if kind == "name" and text.upper() in ("TRUE", "FALSE"):
            bv = text.upper() == "TRUE"
            return lambda b, s: bv
        if kind == "func":
            name = text.upper()
            self.take("(")
            args: list[Node] = []
            if self.peek() != ")":
                args.append(self.expr())
                while self.peek() == ",":
                    self.take()
                    args.append(self.expr())
            self.take(")")
            fn = FUNCTIONS.get(name)
            if fn is None:
                raise ValueError(f"unsupported function {name}")
            return lambda b, s: fn(b, s, args)
        if kind == "sheet":
            return self._ref(text[:-1], self.take()[1])
        if kind == "cell":
            return self._ref(None, text)
        if text == "(":
            inner = self.expr()
            self.take(")")
            return inner
        raise ValueError(f"unexpected {text!r} in formula")

    def _ref(self, sheet: str | None, first: str) -> Node:
        r1, c1 = _cell_ref(first)
        if self.peek() == ":":
            self.take()
            r2, c2 = _cell_ref(self.take()[1])
            return lambda b, s: [[b.cell(sheet or s, r, c) for c in range(c1, c2 + 1)] for r in range(r1, r2 + 1)]
        return lambda b, s: b.cell(sheet or s, r1, c1)


@functools.lru_cache(maxsize=4096)
def parse(formula: str) -> Node:
    p = _Parser(_tokens(formula.removeprefix("=")))
    node = p.expr()
    if p.i != len(p.toks):
        raise ValueError(f"unexpected {p.peek()!r} in formula")
    return node


# ---- values ------------------------------------------------------------------------------------------


def _text(v: Value) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    return v


def _arith(op: str, a: float, b: float) -> float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            raise XlError("#DIV/0!")
        return a / b
    if a == 0 and b <= 0:
        raise XlError("#DIV/0!" if b < 0 else "#NUM!")
    if a < 0 and not float(b).is_integer():
        raise XlError("#NUM!")
    return float(a**b)


class Book:
    """Evaluates every formula of a grid of sheets; each cell once (memoised), cycles refused."""

    def __init__(self, grid: Grid) -> None:
        self.grid = grid
        self._done: dict[tuple[str, int, int], Value | XlError] = {}
        self._busy: set[tuple[str, int, int]] = set()

    def cell(self, sheet: str, row: int, col: int) -> Value:
        key = (sheet, row, col)
        if key not in self._done:
            if key in self._busy:
                raise ValueError(f"circular reference at {sheet}!R{row}C{col}")
            raw = self.grid.get(sheet, {}).get((row, col))
            self._busy.add(key)
            try:
                self._done[key] = self._evaluate(raw, sheet)
            except XlError as err:
                self._done[key] = err
            finally:
                self._busy.discard(key)
        v = self._done[key]
        if isinstance(v, XlError):
            raise v
        return v

    def value(self, sheet: str, row: int, col: int) -> Value:
        """The cell's value, an error as its code (``#DIV/0!``)."""
        try:
            return self.cell(sheet, row, col)
        except XlError as err:
            return err.code

    def _evaluate(self, raw: object, sheet: str) -> Value:
        if isinstance(raw, str) and raw.startswith("="):
            return self.scalar(parse(raw), sheet)
        if raw is None or raw == "":
            return None
        if isinstance(raw, bool | str):
            return raw
        if isinstance(raw, int | float):
            return float(raw)
        raise ValueError(f"unsupported cell content {raw!r}")

    def scalar(self, node: Node, sheet: str) -> Value:
        v = node(self, sheet)
        if isinstance(v, list):
            raise XlError("#VALUE!")
        if isinstance(v, str) and v in ERRORS:
            raise XlError(v)
        assert v is None or isinstance(v, float | str | bool), v
        return v

    def num(self, node: Node, sheet: str) -> float:
        v = self.scalar(node, sheet)
        if v is None:
            return 0.0
        if isinstance(v, str):
            try:
                return float(v)
            except ValueError:
                raise XlError("#VALUE!") from None
        return float(v)

    def truth(self, node: Node, sheet: str) -> bool:
        return self.num(node, sheet) != 0.0

    def flat(self, node: Node, sheet: str) -> list[Value]:
        v = node(self, sheet)
        if isinstance(v, list):
            return [x for row in v for x in row]
        return [self.scalar(node, sheet)]

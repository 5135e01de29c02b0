"""Readable numbers for terminals and reports: no exponents, no ``-0.0 %``, no 15-digit floats (pure)."""

from __future__ import annotations

import math
from typing import Any


def fmt_num(v: float | None, sig: int = 3) -> str:
    """About ``sig`` significant digits, never in exponent form: 0.0123, 3.19, 31.9, 3,190, 1,000."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return "∞" if v > 0 else "−∞"
    if v == 0:
        return "0"
    mag = math.floor(math.log10(abs(v)))
    decimals = max(0, sig - 1 - mag)
    text = f"{v:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def fmt_count(n: int | None) -> str:
    """A count with thousands separators: 537530 → "537,530"."""
    return "–" if n is None else f"{n:,}"


def fmt_rate(v: float | None, unit: str = "req/s") -> str:
    """A rate with its unit: "3.19 req/s", "4,000 req/s" (never "4e+03")."""
    return "–" if v is None else f"{fmt_num(v)} {unit}"


def fmt_range(lo: float | None, hi: float | None, unit: str = "req/s") -> str:
    """"8–12 req/s"; one figure when both ends read the same ("8 req/s", never "8–8")."""
    a, b = fmt_num(lo), fmt_num(hi)
    return f"{a} {unit}" if a == b else f"{a}–{b} {unit}"


COST_UNIT = "cost units"  # what --fleet-cost-per-hour is counted in (any currency the user chose)


def fmt_cost(v: float | None, per: str = "") -> str:
    """A cost with its unit: "0.0729 cost units / 1k req" (4 significant digits, never exponent form)."""
    if v is None:
        return "–"
    return f"{fmt_num(v, 4)} {COST_UNIT}" + (f" / {per}" if per else "")


def fmt_ms(seconds: float | None) -> str:
    """A duration: ms below a second, s above (0.0734 → "73 ms", 2.4 → "2.4 s", 16.04 → "16 s")."""
    if seconds is None:
        return "–"
    if abs(seconds) < 1:
        ms = seconds * 1000
        return f"{fmt_num(round(ms)) if abs(ms) >= 10 else fmt_num(ms, 2)} ms"
    return f"{fmt_num(seconds, 2)} s"


def fmt_pct(fraction: float | None, decimals: int = 1) -> str:
    """A fraction as a percentage, with a clean zero (never ``-0.0 %``)."""
    return _percent(fraction, decimals, "")


def fmt_signed_pct(fraction: float | None, decimals: int = 1) -> str:
    """As :func:`fmt_pct`, with the sign of a change ("+3.2 %", "-1.0 %"; zero unsigned)."""
    return _percent(fraction, decimals, "+")


def _percent(fraction: float | None, decimals: int, sign: str) -> str:
    if fraction is None:
        return "–"
    v = round(fraction * 100, decimals)
    return f"{0:.{decimals}f} %" if v == 0 else f"{v:{sign}.{decimals}f} %"


def fmt_value(v: Any) -> str:
    """A configuration value for display: floats rounded readably, lists and dicts item by item."""
    if isinstance(v, bool) or v is None:
        return str(v).lower() if isinstance(v, bool) else "–"
    if isinstance(v, float):
        return fmt_num(v, 4)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {fmt_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    return str(v)

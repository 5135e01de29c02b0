"""``turbogate demo`` (placeholder until bench and gateway land)."""

from __future__ import annotations

from turbogate.notlanded import not_landed


def demo() -> None:
    """Emulated fleet + gateway + a short Turbo-vs-Standard ramp + report."""
    not_landed("demo", "the demo (needs bench and the gateway)")

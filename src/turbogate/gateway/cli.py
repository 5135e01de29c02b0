"""``turbogate serve`` (placeholder until the gateway lands)."""

from __future__ import annotations

from turbogate.notlanded import not_landed


def serve() -> None:
    """Run the tiered gateway."""
    not_landed("serve", "the gateway")

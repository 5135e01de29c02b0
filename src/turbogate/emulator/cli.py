"""``turbogate emulate`` (placeholder until the emulator lands)."""

from __future__ import annotations

from turbogate.notlanded import not_landed


def emulate() -> None:
    """Run an OpenAI-compatible engine emulator."""
    not_landed("emulate", "the engine emulator")

"""Capture, import and replay traffic traces (docs/bench.md, "Replaying a trace")."""

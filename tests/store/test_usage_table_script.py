"""benchmarks/usage_table_cost.py stays runnable and measures what it says: each layout takes its
rows, and only the layouts with a key drop a replayed record (the store's INSERT OR IGNORE relies on
the key).  The costs themselves are read from full runs (docs/gateway.md, "Tenth pass")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "usage_table_cost.py"


def test_each_layout_is_timed_and_only_keyed_ones_drop_a_replay() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--prefill", "2000", "--batches", "20", "--rounds", "1"],
                         check=True, capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result = json.loads(lines[0])
    for layout in ("current", "id_key_two_time_indexes", "no_index"):
        got = result[layout]
        assert got["row_us"][0] > 0 and got["batch_p50_us"][0] > 0
        assert got["rows_in_window"] > got["rows_of_tenant"] > 0  # a window of 30 s, one tenant of seven
    assert not result["current"]["replay_made_a_row"]
    assert not result["id_key_two_time_indexes"]["replay_made_a_row"]
    assert result["no_index"]["replay_made_a_row"]

"""benchmarks/critical_path.py stays runnable: at a small size it prints its one JSON object with
every hop of every request timed, in both proxies.  It times a request by wrapping turbogate's own
methods (the HTTP server's ``data_received``, the upstream client's ``_send`` and
``data_received``, the cycle's ``send_whole``): a renamed method fails here, not in a later full run.
A calibrated floor (``--floor-work``) must spend at least the busy work it was given on each
side.  The figures themselves are read from full runs (docs/gateway.md, "Eighth pass" and
"Ninth pass")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "critical_path.py"
HOPS = ("own_request_us", "upstream_write_us", "upstream_wait_us", "own_answer_us", "client_write_us", "resident_us")


def test_every_request_is_timed_at_every_hop_in_both_proxies() -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "0.5", "--store", "memory",
                          "--floor-work", "0,0", "40,30"], check=True, capture_output=True, text=True, timeout=240)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    result = json.loads(lines[0])
    paths = result["paths"]
    for name in ("turbogate", "python_floor", "python_floor_work_40_30"):
        run, hops = paths[name]["run"], paths[name]["segments_us"]
        assert run["errors"] == 0 and run["requests"] > 20, run
        assert set(hops) == set(HOPS), hops
        for hop in HOPS:  # every request but the run's last (its end has no next request to close it)
            assert hops[hop]["n"] >= run["requests"] - 1, (name, hop, hops[hop], run)
            assert 0 <= hops[hop]["p50"] <= hops[hop]["p99"], (name, hop, hops[hop])
        assert hops["resident_us"]["p50"] >= hops["own_request_us"]["p50"], hops
    assert paths["stub_direct"]["run"]["errors"] == 0
    calibrated = paths["python_floor_work_40_30"]["segments_us"]
    assert calibrated["own_request_us"]["p50"] >= 40 and calibrated["own_answer_us"]["p50"] >= 30, calibrated
    assert paths["python_floor"]["segments_us"]["own_request_us"]["p50"] < 40, paths["python_floor"]
    assert set(result["summary"]) == {"turbogate", "python_floor", "python_floor_work_40_30"}, result["summary"]
    for figures in result["summary"].values():
        # the added p50 splits into own work and the rest, each rounded to the µs
        assert abs(figures["added_p50_ms"] - figures["own_work_p50_ms"] - figures["handover_excess_ms"]) <= 0.002
        assert figures["p99_holds"] == (figures["p99_ms"] <= figures["p99_limit_ms"]), figures

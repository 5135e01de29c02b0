"""report.html: self-contained, and clean in headless Chromium (scripts/check_report.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.results.helpers import saturating_run
from turbogate.results import SLO, summarize, write_run

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "check_report.py"
sys.path.insert(0, str(ROOT / "scripts"))
from check_report import find_chromium  # noqa: E402

needs_chromium = pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed (apt install chromium)")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    records, steps, samples = saturating_run()
    s = summarize(records, steps, kind="bench", started_at="2026-01-01T00:00:00+00:00", duration_s=70.0,
                  config={"label": "<script>alert(1)</script>"}, slo=SLO(e2e_s=1.5))
    out = tmp_path_factory.mktemp("run")
    write_run(out, records, samples, s)
    return out / "report.html"


def test_report_is_self_contained(report: Path) -> None:
    text = report.read_text()
    # plotly.js is inlined once (Chromium's check below proves nothing is fetched over the network).
    assert "Plotly.newPlot" in text and len(text) > 1_000_000
    for section in ("latency", "throughput", "distributions", "waterfall", "queue", "timelines"):
        assert f'id="fig-{section}"' in text, section
    assert "<script>alert(1)</script>" not in text  # config is escaped


def _check(path: Path) -> tuple[int, dict[str, object]]:
    proc = subprocess.run([sys.executable, str(CHECK), str(path), "--timeout", "60"], capture_output=True,
                          text=True, timeout=180)
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


@needs_chromium
def test_report_loads_in_chromium_without_console_errors(report: Path) -> None:
    rc, result = _check(report)
    assert rc == 0, result
    assert result["errors"] == [] and result["figures"] == 6 and result["rendered"] == 6


@needs_chromium
def test_checker_catches_console_errors(report: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.html"
    bad.write_text(report.read_text().replace("</body>", "<script>console.error('boom')</script></body>"))
    rc, result = _check(bad)
    assert rc == 1
    assert any("boom" in str(e) for e in result["errors"])  # type: ignore[union-attr]

"""``turbogate trace`` and ``sim --trace`` end to end through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.trace.importers import load_trace

ROOT = Path(__file__).resolve().parents[2]
EXCERPT = ROOT / "examples" / "traces" / "azure-conv-2min.csv"
GATEWAY = ROOT / "examples" / "gateway.yaml"


def _run(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.output


def test_what_if_over_two_fleets_with_the_trace_drawn_in_each_report(tmp_path: Path) -> None:
    out = tmp_path / "whatif"
    code, text = _run("sim", "--config", str(GATEWAY), "--fleet", str(ROOT / "examples" / "fleet-2xl4.yaml"),
                      "--fleet", str(ROOT / "examples" / "fleet-4xh100.yaml"), "--trace", str(EXCERPT),
                      "--window", "0:60", "--speedup", "2", "--tiers", "turbo=0.2,standard=0.8", "--slo", "ttft=0.5",
                      "--no-progress", "--jobs", "1", "--out", str(out))
    assert code == 0, text
    assert "What if" in text
    table = json.loads((out / "whatif.json").read_text())
    rows = {(r["fleet"], r["tier"]): r for r in table["rows"]}
    assert set(rows) == {(f, t) for f in ("fleet-2xl4", "fleet-4xh100") for t in ("turbo", "standard", "all")}
    small, big = rows[("fleet-2xl4", "all")], rows[("fleet-4xh100", "all")]
    assert small["requests"] == big["requests"] == len([r for r in load_trace(EXCERPT).requests if r.t < 60])
    assert big["cost_per_hour"] > small["cost_per_hour"] > 0
    assert big["within_slo"] >= small["within_slo"]  # four H100s keep a 0.5 s TTFT better than two L4s
    assert big["ttft_p95_s"] < small["ttft_p95_s"]
    for fleet in ("fleet-2xl4", "fleet-4xh100"):
        summary = json.loads((out / fleet / "summary.json").read_text())
        assert summary["config"]["trace"]["speedup"] == 2.0
        assert "fig-trace" in (out / fleet / "report.html").read_text()


@pytest.mark.parametrize(("args", "words"), [
    (["--sweep", "qps=1:2:1"], "drop --sweep and --warmup"),
    (["--window", "30:10"], "--window"),
    (["--speedup", "0"], "--speedup must be > 0"),
    (["--tier-by-tenant", "acme=gold"], "--tier-by-tenant"),
])
def test_sim_trace_options_are_checked(tmp_path: Path, args: list[str], words: str) -> None:
    code, text = _run("sim", "--config", str(GATEWAY), "--fleet", str(ROOT / "examples" / "fleet-2xl4.yaml"),
                      "--trace", str(EXCERPT), "--no-progress", "--out", str(tmp_path / "x"), *args)
    assert code != 0 and words in text, text


def test_import_then_show(tmp_path: Path) -> None:
    out = tmp_path / "azure.jsonl"
    code, text = _run("trace", "import", str(EXCERPT), "-o", str(out))
    assert code == 0, text
    assert "attribution" in text and "Splitwise" in text
    header = orjson.loads(out.read_bytes().splitlines()[0])
    assert header["format"] == "turbogate-trace" and "CC BY 4.0" in header["attribution"]
    code, text = _run("trace", "show", str(out))
    assert code == 0, text
    shown = json.loads(text)
    assert shown["requests"] == len(EXCERPT.read_text().splitlines()) - 1
    assert shown["peak_rps"] >= shown["mean_rps"] > 0 and shown["prompt"]["max"] >= shown["prompt"]["p99"]


def _usage_line(ts: float, tenant: str) -> bytes:
    return orjson.dumps({"id": f"{tenant}-{ts}", "ts": ts, "tenant": tenant, "model": "m", "tier_asked": "standard",
                         "tier_served": "standard", "status": 200, "prompt_tokens": 30, "completion_tokens": 4,
                         "queue_s": 0.0, "latency_s": 0.5, "cost_units": 34.0, "downgrade": None})


def test_export_from_journal_files_with_window_and_tenant(tmp_path: Path) -> None:
    journal = tmp_path / "buffer"
    journal.mkdir()
    (journal / "usage-1-j0.jsonl").write_bytes(b"\n".join(_usage_line(1000.0 + i, ("acme", "beta")[i % 2])
                                                          for i in range(10)) + b"\n" + b"\0" * 64)
    out = tmp_path / "t.jsonl"
    code, text = _run("trace", "export", "--usage", str(journal), "--since", "1001", "--until", "1007",
                      "--tenant", "acme", "-o", str(out))
    assert code == 0, text
    trace = load_trace(out)
    # arrivals are ts − 0.5: 999.5 … 1008.5; acme's in [1001, 1007) are 1001.5, 1003.5, 1005.5
    assert [r.t for r in trace.requests] == [0.0, 2.0, 4.0]
    assert trace.header.start_unix == pytest.approx(1001.5)
    assert {r.tenant for r in trace.requests} == {"acme"}


def test_export_needs_one_source(tmp_path: Path) -> None:
    code, text = _run("trace", "export", "-o", str(tmp_path / "t.jsonl"))
    assert code == 2 and "exactly one of --config, --gateway or --usage" in text


def test_plan_size_takes_its_peak_and_lengths_from_a_trace() -> None:
    code, text = _run("plan", "size", "--trace", str(EXCERPT), "--trace-speedup", "2", "--gpus", "H100-SXM", "--tp",
                      "1", "--duration", "30", "--jobs", "1", "--no-progress", "--json")
    assert code == 0, text
    got = json.loads(text)["inputs"]
    shown = json.loads(_run("trace", "show", str(EXCERPT), "--speedup", "2")[1])
    assert got["peak_rps"] == pytest.approx(shown["peak_rps"])
    assert (got["prompt_tokens"], got["output_tokens"]) == (round(shown["prompt"]["mean"]),
                                                            round(shown["output"]["mean"]))

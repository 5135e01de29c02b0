"""The workbook: live formulas with cached values a data-only reader sees, and a headless LibreOffice
recalculation agreeing with the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import openpyxl
import pytest
from typer.testing import CliRunner

from turbogate.cli import app
from turbogate.perf import deployment, get_gpu, get_model
from turbogate.perf.profiles import DEFAULT_PROFILE, with_profile
from turbogate.plan.latency import latency_model
from turbogate.plan.matrix import LABELS, MatrixInputs, decide
from turbogate.plan.xlsx import RECOMMENDATION_COLUMN, Scenario, build_sheets, write_workbook

# Three input rows that land on the three recommendations (checked against the CLI below).
ROWS: list[dict[str, object]] = [
    {"gpu": "H100-SXM", "model": "llama-3.1-8b", "tp": 1, "dtype": "bf16", "prompt": 512, "max_tokens": 256,
     "batch": 256, "peak": 15.0, "replicas": 1, "lora": False, "http2": True},
    {"gpu": "A100-40G", "model": "mixtral-8x7b", "tp": 4, "dtype": "bf16", "prompt": 1000, "max_tokens": 300,
     "batch": 128, "peak": 8.0, "replicas": 1, "lora": False, "http2": True},
    {"gpu": "L4", "model": "llama-3.2-1b", "tp": 1, "dtype": "fp8", "prompt": 333, "max_tokens": 101,
     "batch": 64, "peak": 100.0, "replicas": 1, "lora": True, "http2": False},
]


def _scenario(i: int, row: dict[str, object]) -> Scenario:
    dep = with_profile(deployment(get_gpu(str(row["gpu"])), get_model(str(row["model"])), tp=int(str(row["tp"])),
                                  weight_dtype=str(row["dtype"])), DEFAULT_PROFILE)  # the CLI's default
    inputs = MatrixInputs(peak_rps=float(str(row["peak"])), replicas=int(str(row["replicas"])),
                          lora_hot_loading=bool(row["lora"]), http2_reuse=bool(row["http2"]))
    return Scenario(f"row{i}", dep, int(str(row["prompt"])), int(str(row["max_tokens"])), int(str(row["batch"])),
                    8192, inputs, DEFAULT_PROFILE)


def _cli_decision(row: dict[str, object], *extra: str) -> dict[str, object]:
    args = ["plan", "matrix", "--gpu", str(row["gpu"]), "--model", str(row["model"]), "--tp", str(row["tp"]),
            "--dtype", str(row["dtype"]), "--prompt-tokens", str(row["prompt"]), "--max-tokens",
            str(row["max_tokens"]), "--batch-size", str(row["batch"]), "--peak-rps", str(row["peak"]),
            "--replicas", str(row["replicas"]), "--lora" if row["lora"] else "--no-lora",
            "--http2" if row["http2"] else "--no-http2", "--json", *extra]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out: dict[str, object] = json.loads(result.output)
    return out


def test_workbook_has_live_formulas(tmp_path: Path) -> None:
    path = write_workbook(tmp_path / "m.xlsx", [_scenario(i, r) for i, r in enumerate(ROWS)])
    wb = openpyxl.load_workbook(path)
    assert {"inputs", "hardware", "matrix", "knee"} <= set(wb.sheetnames)
    matrix = wb["matrix"]
    headers = [c.value for c in matrix[1]]
    assert "recommendation" in headers and "KV utilization at peak" in headers
    for r in range(2, 2 + len(ROWS)):
        rec = matrix[f"{RECOMMENDATION_COLUMN}{r}"].value
        assert isinstance(rec, str) and rec.startswith("=") and "CHOOSE(" in rec
        for cell in matrix[r]:
            assert isinstance(cell.value, str) and cell.value.startswith("="), cell.coordinate
        # the derived cells reach back to the inputs and hardware sheets
        assert any("inputs!" in str(c.value) for c in matrix[r])
        assert any("hardware!" in str(c.value) for c in matrix[r])
    # inputs are plain values the user edits
    inputs = wb["inputs"]
    assert inputs["B2"].value == "H100-SXM"
    assert not any(isinstance(c.value, str) and c.value.startswith("=") for c in inputs[2])
    assert wb["hardware"]["A2"].value == "A10G"


def test_empty_workbook_is_refused() -> None:
    with pytest.raises(ValueError):
        build_sheets([])


def test_data_only_read_gives_the_cli_numbers(tmp_path: Path) -> None:
    """What pandas or a previewer sees (the cached values, no recalculation) is what the CLI printed."""
    seen = set()
    for i, row in enumerate(ROWS):
        path = tmp_path / f"cli{i}.xlsx"
        cli = _cli_decision(row, "--xlsx", str(path))
        assert cli["xlsx"] == str(path)
        ws = openpyxl.load_workbook(path, data_only=True)["matrix"]
        col = {c.value: k for k, c in enumerate(ws[1])}
        values = [c.value for c in ws[2]]
        assert all(v is not None for v in values), values  # no blank cell
        assert not any(isinstance(v, str) and v.startswith("#") for v in values), values  # no error value
        assert values[col["recommendation"]] == cli["label"]
        assert values[col["knee (req/s per replica)"]] == pytest.approx(cli["knee_rps"], rel=1e-9)
        assert values[col["KV utilization at peak"]] == pytest.approx(cli["kv_utilization"], rel=1e-9)
        assert values[col["peak per replica (req/s)"]] == pytest.approx(cli["per_replica_rps"])
        assert values[col["saturation rate (req/s)"]] == pytest.approx(cli["saturation_rps"], rel=1e-9)
        assert values[col["Turbo cap (share of traffic)"]] == pytest.approx(cli["turbo_cap_share"], rel=1e-9)
        assert values[col["replicas for peak at knee"]] == cli["replicas_needed"]
        seen.add(cli["label"])
    assert seen == set(LABELS.values())


def _recalculate(src: Path, out_dir: Path) -> Path:
    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        pytest.skip("LibreOffice (soffice) is not installed: apt-get install libreoffice-calc")
    profile = out_dir / "lo-profile"
    # The file carries cached values; make LibreOffice recompute every formula on load anyway
    # (OOXMLRecalcMode 0 = always), so what is read back is LibreOffice's own arithmetic.
    (profile / "user").mkdir(parents=True)
    (profile / "user" / "registrymodifications.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"'
        ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        '<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">'
        "<value>0</value></prop></item>\n</oor:items>\n")
    subprocess.run(
        [soffice, f"-env:UserInstallation=file://{profile}", "--headless", "--calc", "--convert-to",
         "xlsx:Calc MS Excel 2007 XML", "--outdir", str(out_dir / "out"), str(src)],
        check=True, capture_output=True, timeout=240,
    )
    return out_dir / "out" / src.name


@pytest.mark.slow
def test_libreoffice_recalculation_matches_cli(tmp_path: Path) -> None:
    scenarios = [_scenario(i, r) for i, r in enumerate(ROWS)]
    src = write_workbook(tmp_path / "matrix.xlsx", scenarios)
    done = _recalculate(src, tmp_path)
    wb = openpyxl.load_workbook(done, data_only=True)
    ws = wb["matrix"]
    headers = [c.value for c in ws[1]]
    col = {h: i for i, h in enumerate(headers)}
    seen = set()
    for i, (row, sc) in enumerate(zip(ROWS, scenarios, strict=True)):
        values = [c.value for c in ws[i + 2]]
        cli = _cli_decision(row)
        assert values[col["recommendation"]] == cli["label"], (row, values)
        seen.add(cli["label"])
        # and the numbers behind it agree with the Python model
        lm = latency_model(sc.dep, sc.prompt_tokens, sc.max_tokens, sc.max_num_seqs, sc.max_num_batched_tokens)
        d = decide(lm, sc.matrix)
        assert values[col["saturation rate (req/s)"]] == pytest.approx(lm.saturation_rate, rel=1e-9)
        assert values[col["knee (req/s per replica)"]] == pytest.approx(d.knee_rps, rel=1e-6)
        assert values[col["KV utilization at peak"]] == pytest.approx(d.kv_utilization, rel=1e-9)
        assert values[col["KV bytes/token"]] == sc.dep.kv_bytes_per_token
    assert seen == set(LABELS.values())  # the three rows cover the three modes


@pytest.mark.slow
def test_editing_an_input_recomputes_the_recommendation(tmp_path: Path) -> None:
    """Change the peak load in the inputs sheet only; LibreOffice's answer follows the CLI's."""
    src = write_workbook(tmp_path / "edit.xlsx", [_scenario(0, ROWS[0])])
    wb = openpyxl.load_workbook(src)
    wb["inputs"]["L2"] = 40.0  # peak_rps column: past one H100's saturation
    assert wb["inputs"]["L1"].value.startswith("peak load")
    wb.save(src)
    ws = openpyxl.load_workbook(_recalculate(src, tmp_path), data_only=True)["matrix"]
    assert ws[f"{RECOMMENDATION_COLUMN}2"].value == _cli_decision({**ROWS[0], "peak": 40.0})["label"]
    assert ws[f"{RECOMMENDATION_COLUMN}2"].value == "Standard only"

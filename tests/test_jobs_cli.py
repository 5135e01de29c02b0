"""``turbogate jobs lint``: a valid file, and each kind of problem, through the real command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from turbogate.cli import app

REPO = Path(__file__).resolve().parent.parent
runner = CliRunner()


def step(sid: str, deps: tuple[str, ...] = (), content: Any = "hi", model: str = "llama-3.1-8b") -> dict[str, Any]:
    return {"id": sid, "depends_on": list(deps),
            "request": {"model": model, "messages": [{"role": "user", "content": content}]}}


def lint(tmp_path: Path, job: Any, *options: str, suffix: str = ".yaml") -> tuple[int, str]:
    path = tmp_path / f"job{suffix}"
    path.write_text(json.dumps(job) if suffix == ".json" else yaml.safe_dump(job))
    result = runner.invoke(app, ["jobs", "lint", str(path), *options])
    return result.exit_code, result.output


def test_the_shipped_diamond_is_valid_and_its_shape_is_printed() -> None:
    result = runner.invoke(app, ["jobs", "lint", str(REPO / "examples" / "job-diamond.yaml")])
    assert result.exit_code == 0, result.output
    assert "4 steps, depth 2 (limit 2), fan-out 2 (limit 3)" in result.output
    assert "order: a → b → c → d" in result.output and "ok:" in result.output


def test_json_output_of_a_valid_file(tmp_path: Path) -> None:
    code, out = lint(tmp_path, {"steps": [step("x"), step("y", ("x",))]}, "--json", suffix=".json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["order"] == ["x", "y"] and report["depth"] == 1
    assert report["fan_out"] == 1 and report["problems"] == []


@pytest.mark.parametrize(("steps", "kind", "step_named"), [
    ([step("a", ("b",)), step("b", ("a",))], "cycle", "'a'"),
    ([step("a"), step("b", ("a",)), step("c", ("b",)), step("d", ("c",))], "too_deep", "'d'"),
    ([step("r"), *(step(f"s{i}", ("r",)) for i in range(4))], "too_wide", "'r'"),
    ([step("a"), step("b", ("a",), {"$ref": "z.choices[0].message.content"})], "unknown_reference", "'b'"),
    ([step("a", ("ghost",))], "unknown_step", "'a'"),
    ([step("a"), step("a")], "duplicate_step", "'a'"),
    ([{"id": "a", "request": {"model": "m"}}], "invalid", "'a'"),
])
def test_each_kind_of_problem_is_named_with_its_step_and_exits_1(tmp_path: Path, steps: list[dict[str, Any]],
                                                                kind: str, step_named: str) -> None:
    code, out = lint(tmp_path, {"steps": steps})
    assert code == 1, out
    assert f"[{kind}] step {step_named}" in out


def test_every_problem_is_printed_and_a_cycle_leaves_the_depth_undefined(tmp_path: Path) -> None:
    steps = [step("a", ("a",)), step("r"), *(step(f"s{i}", ("r",), {"$ref": "nope.x"}) for i in range(4))]
    code, out = lint(tmp_path, {"steps": steps})
    assert code == 1
    assert "depth undefined (a cycle)" in out and "1 steps cannot be ordered" in out
    assert out.count("[unknown_reference]") == 4 and "[too_wide] step 'r'" in out and "[cycle] step 'a'" in out
    assert "6 problems:" in out


def test_limits_come_from_options_or_the_gateway_config(tmp_path: Path) -> None:
    chain = {"steps": [step("a"), step("b", ("a",)), step("c", ("b",)), step("d", ("c",))]}
    assert lint(tmp_path, chain, "--max-depth", "3")[0] == 0
    code, out = lint(tmp_path, chain, "--max-steps", "3")
    assert code == 1 and "[too_many_steps] job" in out
    config = yaml.safe_load((REPO / "examples" / "local-gateway.yaml").read_text())
    config["jobs"] = {"max_depth": 3}
    cfg_path = tmp_path / "gateway.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    assert lint(tmp_path, chain, "--config", str(cfg_path))[0] == 0
    code, out = lint(tmp_path, {"steps": [step("a", model="gpt-9")]}, "--config", str(cfg_path))
    assert code == 1 and "[unknown_model] step 'a'" in out


def test_an_unreadable_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [unclosed")
    # A box as wide as the terminal, as the bench's CLI tests set it: a long tmp path must not wrap the message.
    result = runner.invoke(app, ["jobs", "lint", str(bad)], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "not valid YAML" in result.output, result.output
    assert runner.invoke(app, ["jobs", "lint", str(tmp_path / "missing.yaml")]).exit_code == 2

"""Every bad input, through the command line: one line on stderr, ``turbogate <command>: error:``, exit 2.

The table holds the newcomer's cases of issue 42 and every bad-input kind the other test files check
one command at a time (config fields, fleets, plan, emulate, jobs lint, bench options).  A traceback
appears only with ``--debug``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.gateway.test_config import minimal
from turbogate.cli import app
from turbogate.config import hash_key

# A case: the command's words, its arguments (a function of a scratch folder that may write files there),
# and a fragment the one line must hold (the field or option it names).
Case = tuple[str, Callable[[Path], list[str]], str]


def _args(*words: str) -> Callable[[Path], list[str]]:
    return lambda _tmp: list(words)


def _serve_with(**overrides: Any) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        path = tmp / "gateway.yaml"
        path.write_text(yaml.safe_dump(minimal(**overrides)))
        return ["--config", str(path)]
    return make


def _serve_knee(spec: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        return [*_serve_with()(tmp), "--knee-from", spec.replace("TMP", str(tmp))]
    return make


FLEET_OK = {"pools": [{"name": "p", "replicas": [{"count": 1, "gpu": "L4", "model": "llama-3.1-8b"}]}]}


def _sim_with(fleet: dict[str, Any], *extra: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        gw, fl = tmp / "gateway.yaml", tmp / "fleet.yaml"
        gw.write_text(yaml.safe_dump(minimal(pools=[{"name": "p", "models": ["llama-3.1-8b"],
                                                     "replicas": [{"url": "http://127.0.0.1:9"}]}])))
        fl.write_text(yaml.safe_dump(fleet))
        return ["--config", str(gw), "--fleet", str(fl), "--qps", "1", "--duration", "5", "--no-progress",
                "--no-report", *extra]
    return make


def _file(name: str, text: str, *before: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        (tmp / name).write_text(text)
        return [*before, str(tmp / name)]
    return make


def _jobs_bad_config(tmp: Path) -> list[str]:
    (tmp / "job.yaml").write_text("steps: []\n")
    (tmp / "gw.yaml").write_text(yaml.safe_dump(minimal(listen={"port": 70000})))
    return [str(tmp / "job.yaml"), "--config", str(tmp / "gw.yaml")]


CASES: list[Case] = [
    # issue 42, as a newcomer met them
    ("bench", _args("--qps", "0"), "--qps"),
    ("bench", _args("--qps-start", "1", "--qps-end", "0"), "--qps-end"),
    ("bench", _args("--tiers", "turbo=0.5,standard=0.8"), "1.3"),
    ("sim", _args("--config", "nope.yaml"), "--fleet"),
    ("sim", lambda tmp: ["--config", "nope.yaml", "--fleet", str(tmp / "nope.yaml")], "cannot read"),
    ("serve", _args("--config", "nope.yaml"), "nope.yaml"),
    ("plan capacity", _args("--gpu", "B100"), "unknown GPU"),
    # bench options (tests/bench/test_emulator.py, test_workers.py)
    ("bench", _args("--host", "127.0.0.1:8000"), "--host"),
    ("bench", _args("--prompt-tokens", "1:2:3"), "--prompt-tokens"),
    ("bench", _args("--tiers", "gold=1"), "--tiers"),
    ("bench", _args("--shape", "exponential", "--qps-start", "0", "--qps-end", "5"), "exponential"),
    ("bench", _args("--arrivals", "uniform"), "--arrivals"),
    ("bench", _args("--slo", "ttft=fast"), "--slo"),
    ("bench", _args("--metrics", "gpu-util,magic"), "--metrics"),
    ("bench", _args("--workers", "2", "--find-knee"), "--workers"),
    ("bench", _args("--ray", "local"), "--workers"),
    ("bench", _args("--max-error-rate", "2"), "--max-error-rate"),
    ("bench", _args("--no-such-option"), "--no-such-option"),
    ("bench compare", lambda tmp: [str(tmp), str(tmp / "nope")], "not a run folder"),
    # gateway config fields, through serve (tests/gateway/test_config.py, test_knee_guard.py)
    ("serve", _serve_with(tiers={"turbo": {"weight": 4}}), "'weight' was removed"),
    ("serve", _serve_with(aging_s=10), "'aging_s' was removed"),
    ("serve", _serve_with(tiers={"standard": {"min_share": 1.5}}), "tiers.standard.min_share"),
    ("serve", _serve_with(tiers={"gold": {"deadline_s": 1}}), "tiers.gold"),
    ("serve", _serve_with(tiers={"turbo": {"deadline_s": 0}}), "tiers.turbo.deadline_s"),
    ("serve", _serve_with(tenants=[{"name": "a", "key_sha256": "not-a-hash"}]), "tenants.0.key_sha256"),
    ("serve", _serve_with(tenants=[{"name": "a", "key_sha256": hash_key("k"), "tiers": ["relax"],
                                    "default_tier": "standard"}]), "default_tier"),
    ("serve", _serve_with(pools=[{"name": "p", "models": ["m"], "replicas": [{"url": "ftp://x"}]}]),
     "pools.0.replicas.0.url"),
    ("serve", _serve_with(pools=[{"name": "p", "models": ["m"], "replicas": [{"url": "http://x", "engine": "magic"}]}]),
     "pools.0.replicas.0.engine"),
    ("serve", _serve_with(tenants=[]), "tenants"),
    ("serve", _serve_with(listen={"port": 70000}), "listen.port"),
    ("serve", _serve_with(surprise=1), "surprise"),
    ("serve", lambda tmp: _serve_with(regions={"geoip_db": str(tmp / "none.mmdb")})(tmp), "regions.geoip_db"),
    ("serve", _args(), "--config"),
    ("serve", _serve_knee("TMP/no-run"), "knee_from"),
    ("serve", _serve_knee("nope=online"), "no pool 'nope'"),
    ("serve", _serve_knee("plan"), "needs a plan block"),
    # sim fleets and flags (tests/sim/test_cli.py)
    ("sim", _sim_with({"pools": [{"name": "nope", "replicas": [{"gpu": "L4", "model": "llama-3.1-8b"}]}]}),
     "pools.0.name"),
    ("sim", _sim_with({"pools": [{"name": "p", "replicas": [{"gpu": "Z80", "model": "llama-3.1-8b"}]}]}),
     "pools.0.replicas.0"),
    ("sim", _sim_with({"pools": [{"name": "p", "replicas": [{"gpu": "L4", "model": "llama-3.1-8b", "tp": 0}]}]}),
     "tp"),
    ("sim", _sim_with(FLEET_OK, "--policy", "lifo"), "--policy"),
    ("sim", _sim_with(FLEET_OK, "--sweep", "rate=1:2:1"), "--sweep"),
    # plan (tests/plan/test_cli.py, test_thresholds.py)
    ("plan matrix", _args("--gpu", "L4", "--model", "llama-3.1-70b", "--peak-rps", "1"), "GiB"),
    ("plan roi", _args("--model", "gpt-5"), "unknown model"),
    ("plan capacity", _args("--rates", "1,x"), "--rates"),
    ("plan capacity", _args("--from-run", "/nonexistent/run"), "not a run folder"),
    ("plan capacity", _args("--dtype", "fp7"), "dtype"),
    ("plan matrix", _args("--xlsx", "m.xlsx"), "--peak-rps"),
    # emulate (tests/emulator/test_cli.py, test_calibrate.py); --port 1 is never reached
    ("emulate", _args("--gpu", "no-such-gpu", "--port", "1"), "unknown GPU"),
    ("emulate", _args("--model", "llama-3.1-70b", "--gpu", "L4", "--port", "1"), "--tp"),
    ("emulate", _args("--tokenizer", "/no/such/tokenizer.json", "--port", "1"), "tokenizer"),
    ("emulate", _args("--max-model-len", "10000", "--num-gpu-blocks", "4", "--port", "1"), "--max-model-len"),
    ("emulate", lambda tmp: ["--calibrate-from", str(tmp), "--port", "1"], "not a run folder"),
    # jobs lint (tests/test_jobs_cli.py)
    ("jobs lint", _file("bad.yaml", "steps: [unclosed"), "not valid YAML"),
    ("jobs lint", lambda tmp: [str(tmp / "missing.yaml")], "cannot read"),
    ("jobs lint", _jobs_bad_config, "listen.port"),
    # trace, plan burst, plan profile
    ("trace show", _args("/no/such/trace.jsonl"), "cannot read"),
    ("trace import", lambda tmp: ["/no/such/trace.csv", "--out", str(tmp / "t.jsonl")], "cannot read"),
    ("plan burst", _args("--gpu", "B100", "--requests", "4"), "unknown GPU"),
    ("plan profile", lambda tmp: ["--out", str(tmp / "p.json"), "--gpu", "B100", "--tiny"], "unknown GPU"),
    # demo's own bounds
    ("demo", _args("--turbo-share", "2"), "--turbo-share"),
]


@pytest.mark.parametrize(("command", "make_args", "needle"), CASES,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_bad_input_is_one_line_with_the_prefix_and_exit_2(command: str, make_args: Callable[[Path], list[str]],
                                                           needle: str, tmp_path: Path) -> None:
    args = make_args(tmp_path)
    result = CliRunner().invoke(app, [*command.split(), *args], env={"COLUMNS": "80"})
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.exit_code == 2, (args, result.output)
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"turbogate {command}: error: "), line
    assert line.endswith(")"), line  # (what to do)
    assert needle in line, (needle, line)
    assert "Traceback" not in result.output and "╭" not in result.output


def _turbogate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "turbogate", *args], capture_output=True, text=True, timeout=120)


def test_the_console_path_is_the_same_and_debug_adds_the_traceback() -> None:
    plain = _turbogate("plan", "capacity", "--gpu", "B100")
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    assert plain.stderr.strip().startswith("turbogate plan capacity: error: unknown GPU 'B100'")
    assert len(plain.stderr.strip().splitlines()) == 1
    debug = _turbogate("plan", "capacity", "--gpu", "B100", "--debug")
    assert debug.returncode == 2 and "Traceback" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == plain.stderr.strip()


def test_turbo_bench_speaks_the_same_way() -> None:
    proc = subprocess.run([sys.executable, "-c", "from turbogate.bench.cli import turbo_bench_main; turbo_bench_main()",
                           "--qps", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and ": error: --qps must be > 0" in lines[0], proc.stderr


def test_an_unexpected_failure_is_one_line_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug is not bad input: exit 1, still one line, and it says how to see the traceback."""
    import turbogate.plan.cli_common as plan_cli

    def broken(*_a: object, **_k: object) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(plan_cli, "get_gpu", broken)
    result = CliRunner().invoke(app, ["plan", "capacity"])
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert result.exit_code == 1 and len(lines) == 1
    assert lines[0].startswith("turbogate plan capacity: error: internal error: KeyError") and "--debug" in lines[0]

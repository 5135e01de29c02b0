"""``plan matrix`` prints the replicas it needs and the TP choice; ``plan roi`` says its TTFT is a mean."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from turbogate.errors import CatalogError
from turbogate.perf import deployment, get_gpu, resolve_model
from turbogate.plan.cli import app
from turbogate.plan.latency import LatencyModel, latency_model
from turbogate.plan.matrix import MatrixInputs, decide, tp_choices

ARGS = ["--prompt-tokens", "1000", "--output-tokens", "200"]


def _models(gpu: str, model: str) -> dict[int, LatencyModel]:
    out = {}
    for tp in (1, 2, 4, 8):
        try:
            out[tp] = latency_model(deployment(get_gpu(gpu), resolve_model(model), tp=tp), 1000, 200)
        except CatalogError:
            continue
    return out


@pytest.mark.parametrize(("gpu", "model", "peak"), [("H100-SXM", "llama-3.1-70b", 50.0),
                                                     ("L4", "llama-3.1-8b", 12.0), ("H200", "llama-3.1-70b", 7.0)])
def test_each_tp_needs_what_decide_says_and_the_cheapest_comes_first(gpu: str, model: str, peak: float) -> None:
    models = _models(gpu, model)
    price = get_gpu(gpu).price_per_hour
    choices = tp_choices(models, peak, price)
    assert {c.tp for c in choices} == set(models)
    for c in choices:
        d = decide(models[c.tp], MatrixInputs(peak_rps=peak))
        assert c.replicas == d.replicas_needed and c.cost_per_hour == pytest.approx(c.replicas * c.tp * price)
    assert [c.cost_per_hour for c in choices] == sorted(c.cost_per_hour for c in choices)


def test_matrix_prints_the_replica_count_and_the_tp_table() -> None:
    base = ["matrix", "--gpu", "H100-SXM", "--model", "llama-3.1-70b", "--tp", "4", *ARGS, "--peak-rps", "50"]
    r = CliRunner().invoke(app, [*base, "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    needed = data["replicas_needed"]
    assert data["tp_choices"][0]["tp"] == min(data["tp_choices"], key=lambda c: c["cost_per_hour"])["tp"]
    text = CliRunner().invoke(app, base).output
    assert f"{needed} replica(s) put the peak at the knee" in text
    assert "Which TP?" in text and "cheapest" in text
    for c in data["tp_choices"]:
        assert f"│ {c['tp']:>2} │ {c['replicas']:>8} │" in text


def test_roi_labels_its_ttft_a_mean() -> None:
    base = ["roi", "--gpu", "H100-SXM", "--model", "llama-3.1-70b", "--tp", "4", "--replicas", "9", *ARGS,
            "--loads", "50"]
    text = CliRunner().invoke(app, base).output
    assert "mean TTFT ms" in text and "SLO (on mean)" in text and "TTFT ms ┃" not in text.replace("mean TTFT ms", "")
    data = json.loads(CliRunner().invoke(app, [*base, "--json"]).output)
    assert data["ttft_statistic"] == "mean"

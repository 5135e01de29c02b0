"""The engine's measured saturation rate agrees with the closed form where the closed form is
known to hold (short prompts, a batch bounded by max_num_seqs)."""

from __future__ import annotations

import pytest

from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model, saturation


@pytest.mark.parametrize(("gpu", "seqs"), [("L4", 16), ("L4", 8)])
def test_measured_saturation_matches_the_closed_form(gpu: str, seqs: int) -> None:
    dep = deployment(get_gpu(gpu), resolve_model("llama-3.1-8b"))
    measured = saturated_rate(dep, EngineConfig(max_num_seqs=seqs), 256, 128)
    predicted = saturation(dep, 256, 128, max_num_seqs=seqs).request_rate
    assert measured == pytest.approx(predicted, rel=0.1)

"""plan's closed form of the measured knee (plan/knee.py ``plateau_knee``) against the stepped engine that the
emulator and the simulator run (engine/capacity.py), over a family of fleets and request shapes."""

from __future__ import annotations

import math

import pytest

from turbogate.engine.capacity import saturated_rate
from turbogate.engine.types import EngineConfig
from turbogate.perf import deployment, get_gpu, get_model, saturation
from turbogate.plan.knee import PlannedPool, plateau_knee

FAMILY = [("A100-80G-SXM", "llama-3.1-8b", 8, 266, 128), ("A100-80G-SXM", "llama-3.1-8b", 32, 266, 128),
          ("H100-SXM", "llama-3.1-8b", 16, 522, 64), ("L4", "llama-3.2-1b", 16, 522, 64),
          ("H100-SXM", "llama-3.2-1b", 64, 1010, 200)]


@pytest.mark.parametrize(("gpu", "model", "seqs", "prompt", "output"), FAMILY)
def test_plateau_errs_slow_by_a_few_percent_against_the_engine(gpu: str, model: str, seqs: int, prompt: int,
                                                               output: int) -> None:
    c = math.floor(0.9 * seqs)
    dep = deployment(get_gpu(gpu), get_model(model))
    engine = saturated_rate(dep, EngineConfig(max_num_seqs=c), prompt, output, completions=800)
    planned = plateau_knee(PlannedPool(gpu, model, 1, prompt_tokens=prompt, output_tokens=output,
                                       max_num_seqs=seqs), capacity_share=0.9)
    assert 0.9 * engine < planned <= 1.01 * engine
    # The tier's capacity share is what makes the pool's plateau lower than the engine's own saturation.
    assert planned < saturation(dep, prompt, output, max_num_seqs=seqs).request_rate


def test_replicas_share_the_tiers_slots() -> None:
    one = plateau_knee(PlannedPool("L4", "llama-3.2-1b", 1, max_num_seqs=10), 0.9)  # 9 sequences
    # three replicas: ⌊0.9 × 30⌋ = 27 sequences, 9 each
    assert plateau_knee(PlannedPool("L4", "llama-3.2-1b", 3, max_num_seqs=10), 0.9) == pytest.approx(3 * one)
    # two: ⌊0.9 × 20⌋ = 18, 9 each again; five of 7 seqs: ⌊31.5⌋ = 31, one replica runs 7, four run 6
    assert plateau_knee(PlannedPool("L4", "llama-3.2-1b", 2, max_num_seqs=10), 0.9) == pytest.approx(2 * one)
    six = plateau_knee(PlannedPool("L4", "llama-3.2-1b", 1, max_num_seqs=6), 1.0)
    seven = plateau_knee(PlannedPool("L4", "llama-3.2-1b", 1, max_num_seqs=7), 1.0)
    assert plateau_knee(PlannedPool("L4", "llama-3.2-1b", 5, max_num_seqs=7), 0.9) == pytest.approx(4 * six + seven)
    with pytest.raises(ValueError, match="capacity_share"):
        plateau_knee(PlannedPool("L4", "llama-3.2-1b", 1), 0.0)

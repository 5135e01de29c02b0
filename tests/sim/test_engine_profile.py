"""``sim --engine-profile`` runs the profile's engine: its factors and its scheduling terms."""

from __future__ import annotations

from dataclasses import replace

from turbogate.engine import EngineConfig
from turbogate.perf.profiles import DEFAULT_PROFILE, get_profile
from turbogate.sim.build import build_replicas
from turbogate.sim.cli import profiled_fleet

from .helpers import sim_config


def test_vllm_v0_replicas_run_v0_scheduling_and_the_default_profile_the_plain_engine() -> None:
    sc = sim_config()
    group = sc.fleet.pools[0].replicas[0]
    assert group.engine_profile == DEFAULT_PROFILE
    plain = EngineConfig(max_num_seqs=group.max_num_seqs, max_num_batched_tokens=group.max_num_batched_tokens,
                         policy=sc.gateway.pools[0].scheduling_policy, num_gpu_blocks=group.num_gpu_blocks)
    default_reps, _ = build_replicas(sc)
    assert [r.config for r in default_reps] == [plain] * group.count

    v0 = get_profile("vllm-v0")
    v0_reps, _ = build_replicas(replace(sc, fleet=profiled_fleet(sc.fleet, "vllm-v0", None)))
    assert len(v0_reps) == group.count
    for rep in v0_reps:
        assert rep.deployment.factors == v0.factors
        assert rep.config == replace(plain, chunked_prefill=v0.chunked_prefill,
                                     num_scheduler_steps=v0.num_scheduler_steps, output_lag_steps=v0.output_lag_steps)
        assert rep.loop.engine.config == rep.config
    assert v0_reps[0].config != plain

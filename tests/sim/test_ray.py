"""``--ray``: the same sweep on a (local) Ray instance gives the same runs as local processes."""

from __future__ import annotations

import pytest

from tests.sim.helpers import sim_config
from turbogate.sim.run import simulate
from turbogate.sim.sweep import point_config, run_points

pytest.importorskip("ray", reason="ray is not installed (pip install 'turbogate[ray]')")


def test_a_sweep_on_a_local_ray_instance_equals_the_local_runs() -> None:
    configs = [point_config(sim_config(duration=10.0), q) for q in (1.0, 6.0)]
    done: list[int] = []
    outs = run_points(configs, jobs=2, ray_address="local", on_done=done.append)
    assert sorted(done) == [0, 1]
    assert [o.records for o in outs] == [simulate(c).records for c in configs]
    assert all(o.records for o in outs)

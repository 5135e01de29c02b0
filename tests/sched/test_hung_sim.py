"""The hung-replica rule under ``turbogate sim``: a fleet file's ``failures`` entry of kind
``freeze`` stops a replica the way SIGSTOP does (it takes requests and answers nothing, its
scrapes and probes time out), and the simulated gateway — the same Flow — ejects it and sends
what it held elsewhere, as the real one does (benchmarks/hung_replica.py)."""

from __future__ import annotations

import pytest

from tests.sim.helpers import sim_config
from turbogate.errors import ConfigError
from turbogate.sim.run import simulate

FREEZE_AT = 8.0


@pytest.mark.parametrize("qps", [0.5, 1.2])  # one replica completes about 1.6 req/s
def test_a_frozen_replica_is_ejected_and_its_requests_are_served_elsewhere(qps: float) -> None:
    freeze = {"failures": [{"replica": "p/1", "down_at_s": FREEZE_AT, "kind": "freeze"}]}
    out = simulate(sim_config(fleet_extra=freeze, qps=qps, duration=60.0))
    records = out.records
    assert len(records) > 20
    # Nothing is lost that had sent nothing to its client: what did not end well began its
    # stream on p/1 before the freeze and was cut off there.
    failed = [r for r in records if not r.ok]
    assert all(r.replica == "p/1" and r.status == 502 and r.scheduled_s < FREEZE_AT for r in failed), failed
    # Everything sent from shortly after the freeze on is served by p/0, within seconds.
    late = [r for r in records if r.scheduled_s > FREEZE_AT + 10.0]
    assert late and all(r.ok and r.replica == "p/0" for r in late)
    held = [r for r in records if r.ok and r.scheduled_s < FREEZE_AT + 10.0 and r.end_s is not None
            and r.end_s > FREEZE_AT + 1.0 and r.ttft_s is not None]
    assert max(r.ttft_s for r in held) < 10.0  # a held request waits for the ejection (seconds), not a deadline


def test_a_freeze_has_no_recovery_time() -> None:
    with pytest.raises(ConfigError, match="freeze has no up_at_s"):
        sim_config(fleet_extra={"failures": [{"replica": "p/1", "down_at_s": 1.0, "up_at_s": 2.0, "kind": "freeze"}]})

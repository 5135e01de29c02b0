"""The lower tiers' prefill gate (sched/surge.py ``prefill_gate``), measured per replica by the
flow: a stream sent while none awaited a first token there times the replica's first token, a
whole stream its time per output token, and the gate lets through as many lower-tier prefills
as Turbo's time to a first token can take (pure core, a fake clock)."""

from __future__ import annotations

from turbogate.config import parse_config
from turbogate.configpolicy import flow_policy
from turbogate.sched import Dispatch, Flow, FlowRequest, PoolSpec, ReplicaSpec, Tier
from turbogate.sched.surge import prefill_gate


def test_without_measures_the_gate_is_an_eighth_of_the_batch() -> None:
    assert prefill_gate(32) == 4
    assert prefill_gate(8) == 2
    assert prefill_gate(32, first_s=0.08) == 4  # no pace measured yet
    assert prefill_gate(32, first_s=0.01, step_s=0.01) == 4  # first token within 1.5 steps: no prefill cost seen


def test_the_gate_lets_through_the_prefills_half_of_turbos_first_token_time_pays_for() -> None:
    # A 512-token prefill adding 4.8 decode steps to a step: one lower prefill costs Turbo 0.76 of
    # its TTFT, more than half, but one always goes (else the lower tiers would never start).
    assert prefill_gate(32, first_s=0.078, step_s=0.0125) == 1
    # A 256-token one (0.7 of a step) costs a third of the TTFT: half pays for one, not two,
    # whether the first runs in the step Turbo waits out or in Turbo's own.
    assert prefill_gate(16, first_s=0.147, step_s=0.067) == 1
    # A cheap one (a fifth of the TTFT): two.
    assert prefill_gate(32, first_s=0.05, step_s=0.026) == 2
    # Never more than the eighth of the batch, however cheap.
    assert prefill_gate(8, first_s=0.0122, step_s=0.0066) == 2
    assert prefill_gate(16, first_s=0.05, step_s=0.032) == 2


def flow_of(seqs: int | None) -> Flow:
    replica: dict[str, object] = {"url": "http://x"}
    if seqs is not None:
        replica["max_num_seqs"] = seqs
    config = parse_config({
        "tenants": [{"name": "t", "key_sha256": "0" * 64, "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "p", "models": ["m"], "replicas": [replica]}],
    })
    pool = PoolSpec("p", ("m",), (ReplicaSpec("r0", max_num_seqs=seqs),))
    return Flow(flow_policy(config, pools=[pool]))


def send(flow: Flow, tier: Tier, now: float) -> tuple[FlowRequest, bool]:
    """Open and admit a stream; whether it was dispatched at once."""
    req = flow.open(tenant="t", model="m", tier_body=tier.value, stream=True, now=now)
    assert isinstance(req, FlowRequest)
    return req, any(isinstance(a, Dispatch) and a.req is req for a in flow.arrive(req, now))


def answer(flow: Flow, req: FlowRequest, first_at: float, tokens: int, step_s: float) -> float:
    """The replica answers ``req``: its first token at ``first_at``, ``tokens`` in all, a step apart."""
    flow.first_byte(req, first_at)
    end = first_at + (tokens - 1) * step_s
    req.completion_tokens = tokens
    flow.finished(req, end)
    return end


def answered_alone(flow: Flow, now: float, count: int, step_s: float) -> float:
    """``count`` Standard streams, each alone on the replica: a first token 78 ms after it is sent,
    128 tokens ``step_s`` apart; returns a second after the last one ended."""
    for _ in range(count):
        req, sent = send(flow, Tier.STANDARD, now)
        assert sent
        now = answer(flow, req, now + 0.078, 128, step_s) + 1.0
    return now


def test_the_flow_measures_the_replica_and_narrows_the_gate_where_a_prefill_is_dear() -> None:
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    assert replica.prefill_gate == 4
    now = answered_alone(flow, 0.0, 3, 0.0125)  # each times the replica's first token and its pace
    assert abs(replica.first_s - 0.078) < 1e-9 and abs(replica.step_s - 0.0125) < 1e-9
    assert replica.prefill_gate == 1
    first, sent = send(flow, Tier.STANDARD, now)
    assert sent
    second, sent = send(flow, Tier.STANDARD, now + 0.001)
    assert not sent  # waits in the gateway while the first one's prefill is under way
    # The first one's prefill is done: the gate opens, and the lone request queued behind it
    # goes at once.
    actions = flow.first_byte(first, now + 0.08)
    assert [a.req for a in actions if isinstance(a, Dispatch)] == [second]
    assert second.replica is replica
    assert replica.lower_prefills == 1 and replica.awaiting_first == 1


def test_a_turbo_prefill_under_way_shuts_the_replica_to_the_lower_tiers() -> None:
    """A lower-tier prefill sent while Turbo's awaits its first token would join Turbo's engine
    step (on a 4 × H100 fleet of 256-token prompts, 26 ms against 16 alone: Turbo 1.6× unloaded
    at a surge).  It waits in the gateway until Turbo's first token, then goes at once."""
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    now = answered_alone(flow, 0.0, 3, 0.0125)
    turbo, sent = send(flow, Tier.TURBO, now)
    assert sent
    standard, sent = send(flow, Tier.STANDARD, now + 0.001)
    assert not sent
    second_turbo, sent = send(flow, Tier.TURBO, now + 0.002)
    assert sent  # Turbo is never gated
    assert replica.last_sent == now + 0.002  # the latest prefill sent (Turbo's pick breaks ties on it)
    assert flow.first_byte(turbo, now + 0.05) == []  # the other Turbo prefill is still under way
    actions = flow.first_byte(second_turbo, now + 0.06)
    assert [a.req for a in actions if isinstance(a, Dispatch)] == [standard]
    assert standard.replica is replica and replica.turbo_prefills == 0
    assert replica.last_sent == now + 0.06


def test_turbo_shuts_no_replica_whose_batch_is_not_known() -> None:
    """Without a known batch there is no gate: a slow start grows its limit on the lower tiers."""
    flow = flow_of(None)
    answered_alone(flow, 0.0, 3, 0.0125)
    _, sent = send(flow, Tier.TURBO, 10.0)
    assert sent
    _, sent = send(flow, Tier.STANDARD, 10.001)
    assert sent


def test_a_backlog_behind_the_gate_waits_for_the_next_event_not_the_first_token() -> None:
    """Sent at the first token, a saturated pool's next lower-tier prefill would join the very
    next engine step, and every step would hold one for Turbo's prefill to wait out."""
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    now = answered_alone(flow, 0.0, 3, 0.0125)
    assert replica.prefill_gate == 1
    first, _ = send(flow, Tier.STANDARD, now)
    backlog = [send(flow, Tier.STANDARD, now + 0.001 * i)[0] for i in range(1, 4)]
    assert all(r.replica is None for r in backlog)
    assert flow.first_byte(first, now + 0.08) == []
    assert replica.lower_prefills == 0
    # The next event (here an arrival) dispatches the head of the backlog.
    actions = flow.arrive(*_opened(flow, Tier.STANDARD, now + 0.09))
    assert backlog[0] in [a.req for a in actions if isinstance(a, Dispatch)]


def _opened(flow: Flow, tier: Tier, now: float) -> tuple[FlowRequest, float]:
    req = flow.open(tenant="t", model="m", tier_body=tier.value, stream=True, now=now)
    assert isinstance(req, FlowRequest)
    return req, now


def test_a_stream_sent_behind_another_prefill_does_not_time_the_replica() -> None:
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    first, _ = send(flow, Tier.STANDARD, 0.0)
    second, _ = send(flow, Tier.TURBO, 0.01)
    flow.first_byte(first, 0.08)
    flow.first_byte(second, 0.5)  # it waited behind the first: not the replica's first-token time
    assert abs(replica.first_s - 0.08) < 1e-9


def test_a_replica_whose_batch_is_not_known_has_no_gate() -> None:
    flow = flow_of(None)
    replica = flow.picker.get("r0")
    answered_alone(flow, 0.0, 3, 0.0125)
    assert replica.first_s > 0.0 and replica.prefill_gate == 1 << 30  # its slow start needs the lower tiers


def test_streams_slowed_by_prefills_do_not_open_the_gate() -> None:
    """Under an overload every other engine step carries a prefill and the streams' pace slows
    with them; read as the decode step, that pace left a prefill's own cost looking small and
    opened the gate to the eighth of the batch.  The decode step is the lowest the pace has been."""
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    now = answered_alone(flow, 0.0, 3, 0.0125)
    assert replica.prefill_gate == 1
    answered_alone(flow, now, 20, 0.05)  # four times slower a token: prefills between the decode steps
    assert replica.pace_s > 0.04 and abs(replica.step_s - 0.0125) < 1e-9
    assert replica.prefill_gate == 1


def test_a_lower_tier_head_the_gate_holds_back_does_not_hold_back_a_queued_turbo_request() -> None:
    """An owed lower tier's head goes before Turbo's (its minimum share), but where L2 has no
    replica for it (its gate is full, Turbo's prefill shuts the replica), Turbo's head goes in
    its turn: strict precedence.  Else Turbo waited for the next completion or arrival (on the
    simulated A100 fleet, 30-40 ms: 1.5x its unloaded TTFT)."""
    flow = flow_of(32)
    replica = flow.picker.get("r0")
    now = answered_alone(flow, 0.0, 3, 0.0125)
    assert replica.prefill_gate == 1
    _, sent = send(flow, Tier.STANDARD, now)
    assert sent and replica.lower_prefills == 1
    relax, sent = send(flow, Tier.RELAX, now + 0.001)
    assert not sent
    standard, sent = send(flow, Tier.STANDARD, now + 0.002)
    assert not sent
    # Each Turbo dispatch while Relax queues lowers Relax's share of dispatches, until it is below
    # its minimum and owed (by the ninth); every Turbo request still goes at once.
    sent_turbo = [send(flow, Tier.TURBO, now + 0.003 + 0.001 * i)[1] for i in range(12)]
    assert all(sent_turbo), sent_turbo.index(False)
    assert relax.replica is None and standard.replica is None

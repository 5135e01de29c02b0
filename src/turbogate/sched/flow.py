"""A request's whole life as one pure state machine, shared by the gateway and the simulator.

In the manner of h11: the driver (the asyncio gateway, or the simulator's virtual clock) feeds
**events** with ``now`` and carries out the **actions** returned.  Nothing here awaits, sleeps
or reads a clock, so a full gateway scenario runs in a unit test with a fake clock.  Which
events each phase accepts is a table (sched/flow_table.py): any other raises.

    events (driver → flow)                          actions (flow → driver)
      open(...) → FlowRequest | Respond               Respond(req, status, code, msg, Retry-After)
      arrive(req[, tenant limits' verdict])           Dispatch(req, replica, retry)
      first_byte(req[, headers_at]) / finished        Cancel(req)    (abort its upstream call)
      failed(req, CONNECT | RESET | BROKEN, sent)     Probe(replica) (health-check it now)
      client_gone(req) / settle(req, follower)        HealthChange(replica, healthy, reason)
      scraped / probed / rtt_measured / warmed        MeasureRtt(replica), WarmUp(replica, model)
      tick(now) at wake_at()

Rules that live here and nowhere else: tier resolution and L3's pool (sched/flow_intake.py),
admission and shedding with a truthful ``Retry-After`` (sched/admission.py) and the pump
(sched/flow_pump.py), replica choice (sched/picker.py), one queue limit and the deadline
(sched/flow_timers.py: 504, a strike against the replica), the single retry on another replica
while nothing reached the client and what a failure after that means (a 502), a slow first
byte as a strike (a hung engine is ejected before the tier deadlines pass: sched/hung.py),
and the end of each request with its usage record (sched/flow_finish.py).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable

from turbogate.sched.actions import Action, Cancel, Dispatch, Failure, FlowRequest, Phase, Respond
from turbogate.sched.admission import Admission, Admitted, Shed, TenantPolicy, Ticket, TierPolicy, clamp_retry
from turbogate.sched.fair_cost import AnswerLengths
from turbogate.sched.flow_finish import close
from turbogate.sched.flow_intake import open_request
from turbogate.sched.flow_pump import note_held, pick_for, pump, pump_gate_opened
from turbogate.sched.flow_table import FlowEvent, IllegalTransition, accepts, move
from turbogate.sched.flow_timers import tick, wake_at
from turbogate.sched.guard import KneeGuard
from turbogate.sched.hung import HungWatch, release
from turbogate.sched.leases import LeaseBook
from turbogate.sched.load import ReplicaLoad
from turbogate.sched.metering import BudgetBook, LimitRefusal
from turbogate.sched.picker import Health, Picker, Replica, ScrapeFailed
from turbogate.sched.policy import FlowPolicy, PoolSpec, TenantSpec
from turbogate.sched.regions import RegionPolicy, Regions
from turbogate.sched.surge import answer_paced, prefill_left, prefill_sent
from turbogate.sched.tiering import served_tier
from turbogate.sched.tiers import TIERS, Tier
from turbogate.sched.turbo_supply import EXCESS_REASONS
from turbogate.sched.warmup import WarmUp, warm_result

__all__ = ["Flow", "FlowEvent", "IllegalTransition"]

_QUEUED, _UPSTREAM, _ANSWERING = Phase.QUEUED, Phase.UPSTREAM, Phase.ANSWERING
_ARRIVE, _DISPATCH, _FIRST_BYTE = FlowEvent.ARRIVE, FlowEvent.DISPATCH, FlowEvent.FIRST_BYTE
_FINISHED, _FAILED = FlowEvent.FINISHED, FlowEvent.FAILED
_CLIENT_GONE, _SETTLE = FlowEvent.CLIENT_GONE, FlowEvent.SETTLE
# Enum members read per request as module names (through the enum class: a metaclass lookup).
_TURBO, _STANDARD = Tier.TURBO, Tier.STANDARD

class _Pool:
    __slots__ = ("admission", "spec")

    def __init__(self, spec: PoolSpec, admission: Admission) -> None:
        self.spec = spec
        self.admission = admission


class Flow:
    """Every pool, tenant and switch of one gateway.  See the module docstring."""

    def __init__(self, policy: FlowPolicy) -> None:
        self.policy = policy
        self.picker = Picker(policy.picker)
        self.mode = policy.mode
        # Read per request, fixed by the config: the mode's kind, each tier's deadline and queue limit
        # (TierPolicy.queue_limit_s is a property; a tier the config leaves out gets the defaults).
        self._plain = self.mode in ("round-robin", "least-outstanding")  # baselines: no L1, no limits
        self._tiered = self.mode == "turbogate"  # else every ticket queues as Standard (fifo)
        self._watch_first_byte = self.mode in ("turbogate", "fifo")
        self._slow_first_byte_s = policy.picker.slow_first_byte_s
        self._limits: dict[Tier, tuple[float, float]] = {}
        for tier in TIERS:
            tp = policy.tiers.get(tier) or TierPolicy()
            self._limits[tier] = (tp.deadline_s, tp.queue_limit_s)
        self.tenants: dict[str, TenantSpec] = {t.name: t for t in policy.tenants}
        self.enabled: set[Tier] = set(TIERS) - set(policy.disabled)
        self.turbo_off: set[str] = set()  # tenants whose Turbo is switched off
        tier_policies: dict[Tier, TierPolicy] = dict(policy.tiers)
        if self.mode == "fifo":  # one queue for everybody: the Standard policy, no holdback
            tier_policies = dict.fromkeys(TIERS, tier_policies.get(Tier.STANDARD, TierPolicy()))
        tenant_policies = {t.name: TenantPolicy(t.weight, t.max_in_flight) for t in policy.tenants}
        counts: dict[str, int] = {}  # shared: a tenant's max_in_flight spans every pool
        self.pools: dict[str, _Pool] = {}
        self.pool_of_model: dict[str, str] = {}  # the first pool of each model
        self.pools_of_model: dict[str, list[str]] = {}  # every pool of each model, for L3
        #: Knee guards of the pools that have a knee (sched/guard.py).
        self.guards: dict[str, KneeGuard] = {
            spec.name: KneeGuard(spec.knee, policy.guard) for spec in policy.pools if spec.knee is not None}
        for spec in policy.pools:
            for r in spec.replicas:
                self.picker.add(Replica(id=r.id, pool=spec.name, cap=r.max_concurrency, scraped=r.scraped,
                                        engine_seqs=r.max_num_seqs))
            # A pool with a knee guard has Turbo's load capped past the knee by the guard, which
            # exists to keep goodput near Standard-only's: its holdback stays lean (the chain's
            # headroom only, sched/headroom.py ``headroom_slots``).
            admission = Admission(tier_policies, tenant_policies, tenant_counts=counts,
                                  headroom_staffing=spec.knee is None)
            self.pools[spec.name] = _Pool(spec, admission)
            for model in spec.models:
                self.pool_of_model.setdefault(model, spec.name)
                self.pools_of_model.setdefault(model, []).append(spec.name)
        self._sync_holdback()
        self.leases = LeaseBook(policy.leases)  # Turbo leases: a request naming one asks Turbo through it
        # Per tier, the queue-limit and deadline timers in arrival order (each limit is a constant
        # per tier, so arrival order is due order): O(1) per request instead of a heap.
        self._queue_timers: dict[Tier, deque[tuple[float, FlowRequest]]] = {t: deque() for t in TIERS}
        self._deadline_timers: dict[Tier, deque[tuple[float, FlowRequest]]] = {t: deque() for t in TIERS}
        # First-byte watches in dispatch order (one constant delay, so dispatch order is due order).
        self._first_byte_timers: deque[tuple[float, FlowRequest, Replica]] = deque()
        # A silent replica is hung (sched/hung.py); metrics older than stale_after_s vouch for none.
        self.hung = HungWatch(enabled=self._watch_first_byte, stale_after_s=policy.picker.stale_after_s)
        # Every per-tier queue of timers in one flat tuple, for wake_at (called after every event).
        self._tier_timers = (*self._queue_timers.values(), *self._deadline_timers.values())
        self._probe_at = math.inf
        self._unscraped = any(not r.scraped for r in self.picker.replicas())
        self._health_at = 0.0 if self._unscraped else math.inf
        self._ids = 0
        #: Turbo budgets and spend (sched/metering.py): a spent tenant's Turbo is served Standard.
        self.budgets = BudgetBook()
        self.lengths = AnswerLengths()  # answers' lengths per model: the cost's estimate (sched/fair_cost.py)
        for t in policy.tenants:
            if t.turbo_budget is not None:
                self.budgets.set_budget(t.name, t.turbo_budget, t.budget_period)
        # L3 (sched/regions.py): probes run when pools carry regions or share a model.
        self.regions = Regions(policy.regions or RegionPolicy(), {p.name: p.region for p in policy.pools})
        self._turbo_capable = {p.name: p.turbo for p in policy.pools}
        self.l3 = policy.regions is not None or any(len(p) > 1 for p in self.pools_of_model.values())
        self._rtt_probe_at = 0.0 if self.l3 else math.inf
        self._rtt_turn = 0
        self._warm: list[Replica] = self.picker.replicas() if policy.warmup else []  # joined: warm them up
        #: Grows whenever a due time may have come nearer (a timer added, a probe moved up): a
        #: driver whose timer is armed need not ask ``wake_at`` again until it changes, since due
        #: times only recede otherwise (requests end, stale timers go).
        self.timers_epoch = 0
        # What wake_at last said (inf: never asked).  A timer added no nearer than that cannot
        # move the driver's timer, which is armed at it or before: no epoch change, no new look.
        self._wake_floor = math.inf

    # ---- switches ----------------------------------------------------------------------------
    def set_tier(self, tier: Tier, on: bool) -> None:
        if tier is Tier.STANDARD and not on:
            raise ValueError("standard cannot be switched off: it is every other tier's fallback")
        (self.enabled.add if on else self.enabled.discard)(tier)
        self._sync_holdback()

    def set_tenant_turbo(self, tenant: str, on: bool) -> None:
        (self.turbo_off.discard if on else self.turbo_off.add)(tenant)

    def turbo_available(self, tenant: str) -> bool:
        spec = self.tenants[tenant]
        return Tier.TURBO in spec.allowed and Tier.TURBO in self.enabled and tenant not in self.turbo_off

    def _sync_holdback(self) -> None:
        # No headroom to keep for a tier nobody can get, and none in FIFO mode.
        on = Tier.TURBO in self.enabled and self.mode == "turbogate"
        for pool in self.pools.values():
            pool.admission.holdback = on

    # ---- the edge ------------------------------------------------------------------------------
    def resolve(self, tenant: TenantSpec, asked: Tier) -> tuple[Tier, str | None]:
        """The tier served for ``asked``, and why it differs (None when it does not)."""
        budget_spent = asked is _TURBO and self.budgets.exhausted(tenant.name)
        return served_tier(tenant, asked, self.enabled, self.turbo_off, budget_spent)

    def open(self, *, tenant: str, model: str, tier_body: object = None, tier_header: str | None = None,
             max_tokens: object = None, max_tokens_field: str = "max_tokens", prompt_bytes: int = 0,
             stream: bool = False, now: float, handle: object = None,
             lease: str | None = None, client_region: str | None = None,
             session: str | None = None) -> FlowRequest | Respond:
        """A parsed request from an authenticated ``tenant``: its pool, tier and cost, or the 4xx
        that refuses it (unknown model, unknown tier word, ``max_tokens`` above the context).
        With a ``lease`` id the lease decides: Turbo while it lives, else Standard and why.
        ``client_region`` and ``session`` (``X-Session-Id``) feed L3's choice of pool."""
        return open_request(self, tenant, model, tier_body, tier_header, max_tokens, max_tokens_field, prompt_bytes,
                            stream, now, handle, lease, client_region, session)

    # ---- admission -----------------------------------------------------------------------------
    def arrive(self, req: FlowRequest, now: float, limit: LimitRefusal | None = None) -> list[Action]:
        """Admit ``req``: dispatch it, queue it, or refuse it.  ``limit``: the tenant's global limits'
        verdict (sched/metering.py's rule, counted by the driver's shared store) — a refusal is a 429."""
        accepts(req, _ARRIVE)  # (a second arrive raises)
        if limit is not None:
            return [self._refuse(req, _ARRIVE, 429, limit.code, limit.message, now, limit.retry_after_s)]
        pool = self.pools[req.pool]
        deadline_s, queue_limit_s = self._limits[req.served]
        due = req.arrival + deadline_s
        self._deadline_timers[req.served].append((due, req))
        if due < self._wake_floor:
            self.timers_epoch += 1
        if self._plain:
            replica = self.picker.pick_plain(req.pool, self.mode)
            if replica is None:
                return [self._no_replica(req, now)]
            return [self._dispatch(req, replica, now, _DISPATCH)]
        # Both slot totals now, once: nothing between here and the pump below changes them.
        counts = self.picker.slot_counts(req.pool, now)
        slots = counts[0]
        if slots <= 0:
            return [self._no_replica(req, now)]
        ticket = Ticket(req.tenant, req.served if self._tiered else _STANDARD, req.arrival, req.cost, req,
                        first=req.downgrade in EXCESS_REASONS)
        admission = pool.admission
        decision: Admitted | Shed | bool
        if admission.queued == 0:  # the usual arrival: L1's choice is this request or none, in one call
            admission.learning = self.picker.learning(pool.spec.name)
            decision = admission.submit_now(ticket, now, slots, counts[1])
        else:
            decision = admission.submit(ticket, now, slots)
        if type(decision) is Shed:
            return [self._refuse(req, _ARRIVE, decision.status, decision.reason, decision.message, now,
                                 decision.retry_after_s)]
        req.ticket = ticket
        move(req, _ARRIVE, _QUEUED)
        due = req.arrival + queue_limit_s
        self._queue_timers[req.served].append((due, req))
        if due < self._wake_floor:
            self.timers_epoch += 1
        if decision is True:  # L1 lets it go now: L2's pick, as the pump makes it
            replica = pick_for(self, pool, ticket, now)
            if replica is not None:
                return [self._dispatch(req, replica, now, _DISPATCH)]
            admission.requeue(ticket, just_taken=True)  # L1's slot total says yes, but no single replica has room
            return []
        if decision is False:  # it waits (the pump would find nothing to send either)
            note_held(self, pool, now)
            return []
        return self._pump(pool, now, None, counts)

    def _no_replica(self, req: FlowRequest, now: float) -> Respond:
        wait = self.picker.next_probe_at(req.pool) - now
        return self._refuse(req, _ARRIVE, 503, "no_healthy_replica", f"no replica of pool {req.pool!r} is healthy: the "
                            "backends are down or unreachable (not an overload)", now,
                            clamp_retry(wait) if math.isfinite(wait) else 5)

    def _pump(self, pool: _Pool, now: float, out: list[Action] | None = None,
              counts: tuple[int, int] | None = None) -> list[Action]:
        return pump(self, pool, now, [] if out is None else out, counts)  # (sched/flow_pump.py)

    def _dispatch(self, req: FlowRequest, replica: Replica, now: float, event: FlowEvent) -> Dispatch:
        """Send ``req`` to ``replica``: a first dispatch (``DISPATCH``) or the retry of a ``FAILED`` attempt."""
        retry = event is _FAILED
        if retry:
            self._leave_upstream(req)  # it leaves the replica that failed
        move(req, event, _UPSTREAM)
        self.picker.on_dispatch(replica)
        prefill_sent(replica, req, now)  # (sched/surge.py prefill_gate)
        if self.hung.dispatched(req, replica, now) < self._wake_floor:
            self.timers_epoch += 1
        req.replica = replica
        req.dispatched_at = now
        req.retried = req.retried or retry
        if self.guards and not retry and req.pool in self.guards:  # signals for an online knee
            self.guards[req.pool].dispatched(req.served is _TURBO, now - req.arrival, now)
        if not retry and req.ticket is not None and req.ticket.first:  # how soon Standard's line serves them
            self.pools[req.pool].admission.supply.first_served(now - req.arrival)
        if self._watch_first_byte:  # plain proxies let engines queue: a slow first byte is normal there
            due = now + self._slow_first_byte_s
            self._first_byte_timers.append((due, req, replica))
            if due < self._wake_floor:
                self.timers_epoch += 1
        return Dispatch(req, replica, retry)

    @staticmethod
    def _leave_upstream(req: FlowRequest) -> bool:
        """``req`` no longer waits for its replica's first byte (L2 counts those: a replica
        busy with a prefill makes a Turbo request wait a longer engine step).  Whether that
        opened the replica's prefill gate."""
        return req.phase is _UPSTREAM and req.replica is not None and prefill_left(req.replica, req)

    def _close(self, req: FlowRequest, event: FlowEvent, status: int, now: float, *,
               count_service: bool = False) -> None:
        close(self, req, event, status, now, count_service)  # (sched/flow_finish.py)

    def _refuse(self, req: FlowRequest, event: FlowEvent, status: int, code: str, message: str, now: float,
                retry_after_s: int | None = None) -> Respond:
        """The flow's own answer to ``req``, which ends it."""
        self._close(req, event, status, now)
        return Respond(req, status, code, message, retry_after_s)

    def settle(self, req: FlowRequest, status: int, now: float, source: FlowRequest | None = None) -> None:
        """Close a request answered without an upstream call of its own (a coalesced follower):
        ``source``'s tokens (the call it shared) are its usage; it is metered like any other."""
        if not accepts(req, _SETTLE):
            return
        if source is not None:
            req.prompt_tokens, req.completion_tokens = source.prompt_tokens, source.completion_tokens
        self._close(req, _SETTLE, status, now)

    # ---- upstream events -----------------------------------------------------------------------
    def first_byte(self, req: FlowRequest, now: float, headers_at: float | None = None) -> list[Action]:
        """The answer began.  ``headers_at``: when a stream's response headers came (engines send
        them before prefill), so dispatch → headers is a round trip, an L3 latency sample."""
        if not accepts(req, _FIRST_BYTE):
            return []
        self.hung.first_byte(req, now)
        req.first_byte_at = now
        gate_opened = self._leave_upstream(req)
        move(req, _FIRST_BYTE, _ANSWERING)
        if self.guards and req.pool in self.guards:
            self.guards[req.pool].first_byte(req.served is _TURBO, now - req.arrival, now)
        if self.l3 and headers_at is not None and req.dispatched_at is not None:
            self.regions.observe(req.client_region, req.pool, headers_at - req.dispatched_at)
        return pump_gate_opened(self, self.pools[req.pool], now) if gate_opened and not self._plain else []

    def finished(self, req: FlowRequest, now: float, status: int = 200) -> list[Action]:
        """The replica's answer is complete (any HTTP status it sent)."""
        if not accepts(req, _FINISHED):
            return []
        replica = req.replica
        if replica is not None:
            self.hung.finished(req, now)
            if status == 200:
                self.lengths.observe(req.model, req.completion_tokens)
                answer_paced(replica, req, now)
            self.picker.on_response(replica, status, now - (req.dispatched_at or now), now)
        self._close(req, _FINISHED, status, now, count_service=status < 500)
        if self.guards and status < 500 and req.pool in self.guards:
            self.guards[req.pool].completed(now)
        return self._after(req, now)

    def failed(self, req: FlowRequest, now: float, failure: Failure, sent_bytes: int = 0,
               sent_tokens: int = 0) -> list[Action]:
        """An upstream attempt failed: ``failure`` says how (the driver's one mapping from its
        transport's errors), ``sent_bytes`` and ``sent_tokens`` what of the answer its client
        already has.  Nothing sent: one retry on another replica, else a 502.  Once the answer
        began it cannot be taken back nor sent again: a 502 that ends it (a stream's error
        event), metered with the tokens the client got."""
        if not accepts(req, _FAILED):
            return []
        replica = req.replica
        assert replica is not None
        picker = self.picker
        hard = failure is Failure.CONNECT
        picker.on_failure(replica, now, hard=hard, reason=f"connection {'refused' if hard else failure.value}")
        if req.phase is _ANSWERING or sent_bytes > 0 or sent_tokens > 0:
            if sent_tokens > req.completion_tokens:
                req.completion_tokens = sent_tokens
            broke = self._refuse(req, _FAILED, 502, "upstream_error", "the engine stream broke mid-answer", now)
            out: list[Action] = [broke]
            return self._after(req, now, out)
        if not req.retried:
            other = (picker.pick_plain(req.pool, self.mode, exclude=(replica.id,)) if self._plain
                     else picker.pick(req.pool, now, exclude=(replica.id,)))
            if other is not None:
                return self._health([self._dispatch(req, other, now, _FAILED)])
        gave_up = self._refuse(req, _FAILED, 502, "upstream_unavailable", "the engine replica failed before "
                               "answering and no other could take the retry", now)
        final: list[Action] = [gave_up]
        return self._after(req, now, final)

    def client_gone(self, req: FlowRequest, now: float) -> list[Action]:
        if not accepts(req, _CLIENT_GONE):
            return []
        out: list[Action] = []
        if req.phase in (_UPSTREAM, _ANSWERING) and req.replica is not None:
            self.picker.on_release(req.replica)
            out.append(Cancel(req))
        self._close(req, _CLIENT_GONE, 499, now)
        return self._after(req, now, out)

    def _after(self, req: FlowRequest, now: float, out: list[Action] | None = None) -> list[Action]:
        actions = self._health(out if out is not None else [])
        if self._plain:
            return actions
        pool = self.pools[req.pool]
        if pool.admission.queued == 0:  # the usual completion: nothing waits (the pump would say so)
            return actions
        return self._pump(pool, now, actions)

    def _health(self, out: list[Action]) -> list[Action]:
        changes = self.picker.take_health_changes()
        if changes:
            self.regions.forget_views()  # L3 reads the pools afresh
            for change in changes:
                if not change.healthy:
                    self._probe_at = min(self._probe_at, change.replica.next_probe_at)
                    self.timers_epoch += 1
                    out.extend(release(self, change.replica, change.reason, self.hung.now))  # (sched/hung.py)
            out.extend(changes)
        return out

    # ---- timers --------------------------------------------------------------------------------
    def wake_at(self) -> float:
        """When ``tick`` next has work (math.inf: nothing is due)."""
        return wake_at(self)

    def tick(self, now: float) -> list[Action]:
        """Queue limits, deadlines and probes due at ``now``."""
        return tick(self, now)

    # ---- replica signals -----------------------------------------------------------------------
    def scraped(self, replica_id: str, result: ReplicaLoad | ScrapeFailed, now: float) -> list[Action]:
        replica = self.picker.get(replica_id)
        self.picker.on_scrape(replica, result, now)
        load = result if isinstance(result, ReplicaLoad) else None
        self.pools[replica.pool].admission.service.paced(replica_id, load)
        if load is None:
            self.hung.unanswered(replica_id, now)
        elif replica.pool in self.guards:
            self.guards[replica.pool].scraped(replica_id, load.kv_usage, load.waiting)
        out: list[Action] = [*self.picker.take_metrics_doubts()]
        return self._pump_all(now, self._health(out))

    def probed(self, replica_id: str, ok: bool, now: float) -> list[Action]:
        replica = self.picker.get(replica_id)
        was = replica.health
        self.picker.on_probe(replica, ok, now)
        self._probe_at = self.picker.next_probe_at()
        self.timers_epoch += 1
        out: list[Action] = []
        if self.policy.warmup and was is Health.EJECTED and replica.health is Health.HEALTHY:
            out.extend(self._warm_ups([replica]))  # it came back: warm it up
        return self._pump_all(now, self._health(out))

    def rtt_measured(self, replica_id: str, rtt_s: float | None, now: float) -> list[Action]:
        """A ``MeasureRtt`` came back after ``rtt_s`` (None: it failed; health is the probes' job)."""
        if rtt_s is not None:
            self.regions.probed(self.picker.get(replica_id).pool, rtt_s)
        return []

    def warmed(self, replica_id: str, ok: bool, now: float) -> list[Action]:
        """A ``WarmUp`` was answered (``ok``: a 2xx) or failed."""
        warm_result(self.picker, self.picker.get(replica_id), ok, now)
        return self._pump_all(now, self._health([]))

    def _warm_ups(self, replicas: Iterable[Replica]) -> list[Action]:
        return [WarmUp(r, self.pools[r.pool].spec.models[0]) for r in replicas]

    def _pump_all(self, now: float, out: list[Action]) -> list[Action]:
        if not self._plain:
            for pool in self.pools.values():
                self._pump(pool, now, out)
        return out

    # ---- views ---------------------------------------------------------------------------------
    def admissions(self) -> Iterable[tuple[str, Admission]]:
        return ((name, pool.admission) for name, pool in self.pools.items())

"""The flow's vocabulary: a request's record and phases, how an upstream attempt failed, and the
actions the flow asks its driver to carry out (sched/flow.py; the gateway and the simulator
are the two drivers)."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import NamedTuple

from turbogate.sched.admission import Ticket
from turbogate.sched.metering import UsageRecord
from turbogate.sched.picker import HealthChange, MetricsDoubt, Replica
from turbogate.sched.regions import MeasureRtt
from turbogate.sched.tiers import Tier
from turbogate.sched.warmup import WarmUp

#: vLLM's ``priority`` field: lower is served first.
PRIORITY: dict[Tier, int] = {Tier.TURBO: 0, Tier.STANDARD: 1, Tier.RELAX: 2}


class Phase(IntEnum):
    NEW = 0
    QUEUED = 1
    UPSTREAM = 2  # dispatched, no byte back yet
    ANSWERING = 3  # the replica's answer has begun
    DONE = 4


_NEW, _DONE = Phase.NEW, Phase.DONE  # module names: a member read through its enum class is a metaclass lookup


class Failure(Enum):
    """How an upstream attempt failed, as the replica saw it.  Whether it is retried is not the
    kind's but what its client already has (``Flow.failed``)."""

    CONNECT = "connect"  # connection refused: nothing reached the replica (it is ejected at once)
    RESET = "reset"  # the connection broke before any byte of the answer
    BROKEN = "broken"  # the answer broke off midway


@dataclass(slots=True, eq=False)
class FlowRequest:
    id: int
    tenant: str
    pool: str
    model: str
    asked: Tier
    served: Tier  # the tier it is served — and to be metered — at (a knee-guard downgrade lowers it)
    downgrade: str | None  # why served differs from asked
    stream: bool
    cost: float
    arrival: float
    handle: builtins.object  # the driver's own object, untouched here (builtins.: see Ticket.payload)
    priority: int | None  # vLLM priority to put in the body, or None
    client_region: str  # L3's key for the client's region
    phase: Phase = Phase.NEW
    ticket: Ticket | None = None
    replica: Replica | None = None
    retried: bool = False
    dispatched_at: float | None = None
    first_byte_at: float | None = None
    status: int | None = None
    prompt_tokens: int = 0  # the engine's usage, set by the driver before ``finished``
    completion_tokens: int = 0
    usage: UsageRecord | None = None  # set when the request closes (sched/metering.py)
    prefill_share: float = 0.0  # its prompt's share of its cost in tokens, for phase-aware L2 (sched/phase.py)

    # Written out, not generated: a compiled build runs a generated dataclass __init__ as interpreted
    # Python (a descriptor call per field), once a request.  The fields without a default, as the flow gives them.
    def __init__(self, id: int, tenant: str, pool: str, model: str, asked: Tier, served: Tier,
                 downgrade: str | None, stream: bool, cost: float, arrival: float, handle: builtins.object,
                 priority: int | None, client_region: str) -> None:
        self.id, self.tenant, self.pool, self.model = id, tenant, pool, model
        self.asked, self.served, self.downgrade, self.stream = asked, served, downgrade, stream
        self.cost, self.arrival, self.handle, self.priority = cost, arrival, handle, priority
        self.client_region = client_region
        self.phase = _NEW
        self.ticket = None
        self.replica = None
        self.retried = False
        self.dispatched_at = self.first_byte_at = None
        self.status = None
        self.prompt_tokens = self.completion_tokens = 0
        self.usage = None
        self.prefill_share = 0.0

    @property
    def done(self) -> bool:
        return self.phase is _DONE  # read by the drivers on every event of the request


@dataclass(slots=True)
class Dispatch:
    """Send ``req`` to ``replica`` now (``retry``: after a failed attempt).  A class, not a
    NamedTuple like the rarer actions: one is made per request, and a compiled build makes a
    NamedTuple through an interpreted ``__new__``."""

    req: FlowRequest
    replica: Replica
    retry: bool

    def __init__(self, req: FlowRequest, replica: Replica, retry: bool) -> None:
        self.req, self.replica, self.retry = req, replica, retry


class Respond(NamedTuple):
    """Answer the client with this OpenAI error (the request never reached, or never got, an
    engine answer)."""

    req: FlowRequest | None
    status: int
    code: str
    message: str
    retry_after_s: int | None = None
    param: str | None = None


class Cancel(NamedTuple):
    req: FlowRequest


class Probe(NamedTuple):
    replica: Replica


Action = Dispatch | Respond | Cancel | Probe | HealthChange | MetricsDoubt | MeasureRtt | WarmUp

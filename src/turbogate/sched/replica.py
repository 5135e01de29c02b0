"""What L2 knows about each replica, and its settings (pure values)."""


from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Literal, NamedTuple

from turbogate.sched.load import ReplicaLoad


class Band(IntEnum):
    LIGHT = 0
    BUSY = 1
    SATURATED = 2


class Health(StrEnum):
    HEALTHY = "healthy"
    EJECTED = "ejected"


ScrapeFailureKind = Literal["connect", "status", "timeout", "parse"]


class ScrapeFailed(NamedTuple):
    """A scrape of ``/metrics`` that gave no load: the connection was refused (``connect``),
    the answer was not 200 (``status``), it did not come in time (``timeout``: the load goes
    stale, counted as saturated, but a slow /metrics under load is "busy", not "dead"), or it
    could not be parsed (``parse``)."""

    kind: ScrapeFailureKind


@dataclass(frozen=True, slots=True)
class PickerConfig:
    light_kv: float = 0.60
    saturated_kv: float = 0.85
    light_queue_s: float = 0.100
    saturated_queue_s: float = 0.500
    stale_after_s: float = 5.0
    eject_after_failures: int = 3
    probe_backoff_s: float = 1.0
    probe_backoff_max_s: float = 30.0
    scale_out_after_s: float = 30.0
    default_service_s: float = 1.0
    initial_limit: int = 8
    min_limit: int = 1
    queue_tolerance: float = 0.0
    grow_every_scrapes: int = 5
    unscraped_limit: int = 64
    #: A first byte later than this after dispatch is a strike against the replica (the request
    #: still waits for it, up to its deadline): a hung engine is ejected long before a tier's
    #: deadline has passed on ``eject_after_failures`` requests.  A good answer clears strikes.
    slow_first_byte_s: float = 60.0
    #: Weight of a replica's DCGM pressure for the request's phase in its score (sched/phase.py); 0: off.
    phase_weight: float = 0.0

#: ``Replica.prefill_gate`` of a replica whose engine batch is not known: no gate.
UNGATED = 1 << 30


@dataclass(slots=True, eq=False)
class Replica:
    """One engine replica as L2 sees it."""

    id: str
    pool: str
    cap: int | None = None  # max_concurrency from the config: an optional upper bound
    scraped: bool = True
    engine_seqs: int | None = None  # the engine's own batch limit (max_num_seqs) when known: the limit's ceiling
    batch_seen: float = 0.0  # the batch its engine queued beyond with KV room to spare: a learned ceiling (0: none)
    batch_hint: float = 0.0  # another of its pool's batch_seen: where its slow start stops (0: none)
    limit: float = 8.0
    ssthresh: float = math.inf
    peak_in_flight: int = 0
    hold: int = 0  # scrapes to wait before the next additive probe
    probe_backoff: int = 1  # × grow_every_scrapes between probes; doubles each time a probe fails
    probed_to: float = 0.0  # the limit the last probe set (0: none outstanding)
    slow_start_idle: int = 0  # scrapes since slow start last grew the limit
    last_waiting: float = 0.0  # the engine's waiting count at the previous scrape
    proven: float = 0.0  # most requests the engine was seen running at once since the last cut
    awaiting_first: int = 0  # ours dispatched and not yet answering (prefilling, for streams)
    lower_prefills: int = 0  # of those, the lower tiers' streams (sched/surge.py ``prefill_gate``)
    turbo_prefills: int = 0  # of those, Turbo's streams (sched/surge.py ``lower_shut``)
    prefill_gate: int = UNGATED  # most lower-tier streams awaiting a first token here (set by start_limit)
    last_sent: float = 0.0  # when the latest of ``awaiting_first`` was sent: its prefills end after (Turbo's pick)
    lone: int = -1  # the stream sent while none awaited a first token here, until its first token (-1: none)
    first_s: float = 0.0  # such a stream's time to its first token, averaged (0: not measured yet)
    pace_s: float = 0.0  # time per output token of its streams, averaged
    step_s: float = 0.0  # the lowest ``pace_s`` has been: a decode step without prefills between (prefill_gate)
    # Large pools keep running sums instead of rescanning: this replica's share of them.
    counted_slots: int = 0
    counted_proven: int = 0
    counted_learning: bool = False  # counted in its pool's ``learning`` (in slow start, scraped)
    room_index: int = -1  # position in its pool's list of replicas with room, -1 when none
    in_flight: int = 0
    load: ReplicaLoad | None = None
    load_at: float = -math.inf
    health: Health = Health.HEALTHY
    failures: int = 0  # request-path failures in a row (a good answer resets them)
    probation: bool = False  # taken back by a probe, no good answer since
    scrape_failures: int = 0  # failed scrapes in a row (a good scrape resets them)
    backoff_s: float = 0.0
    next_probe_at: float = 0.0
    ejections: int = 0
    served: int = 0
    service_s: float | None = None
    foreign: float = 0.0  # engine load not sent by this gateway, as of the last scrape
    scrape_in_flight: int = 0  # ours in flight at its last scrape (a nearly full KV cache: ReplicaBook.replica_slots)
    eject_reason: str = ""
    chunks: int = 0  # stream chunks relayed from it: its progress, read by sched/hung.py
    silent_full_scrapes: int = 0  # scrapes reporting an idle engine while we held the whole limit (MetricsDoubt)

    @property
    def max_concurrency(self) -> int:
        """The working limit now (learned, within the cap)."""
        return int(self.limit)


#: Scrapes on which the engine reported nothing running or waiting although the gateway had filled
#: the replica's limit (to slow start's bar, 0.8 of it) since the scrape before: that many, and its
#: metrics cannot be steering the adaptive limit (``MetricsDoubt``).
SILENT_ENGINE_SCRAPES = 5


class MetricsDoubt(NamedTuple):
    """A replica's engine keeps reporting itself idle while the gateway fills its limit: the
    adaptive limit, which grows only on the engine's running count, stays where it is (the
    initial 8 for a new replica).  Said once per such streak, for the operator."""

    replica: Replica
    reason: str


class HealthChange(NamedTuple):
    """A replica was ejected (``healthy`` False) or came back, and why."""

    replica: Replica
    healthy: bool
    reason: str



"""A pool's dispatch-to-completion time, as L1 measures it and as a process that starts cold takes
it from the store (pure).

The estimate sizes Turbo's headroom (sched/headroom.py), its coming occupancy
(sched/surge.py ``turbo_deficit``), Turbo's supply (sched/turbo_supply.py) and every predicted
wait.  Until it exists the holdback keeps no room for Turbo, so a gateway restarted, or a process
added, during an overload meets the overload's first seconds with the whole pool open to the
lower tiers: Turbo then waits for completions (a 2× overload's first counted window 5–10× its
unloaded TTFT in simulation, about twice the overload's own level).  What another process
measured on the same engines is the better first guess: ``adopt`` takes it while this process has
measured none of its own, and its own samples then move the estimate as usual.

Completions tell the service time of requests sent one service time ago: at a surge the engines'
batches fill and every token comes slower at once, while the estimate still reads the quiet
minute's (on an A100 fleet stepped to 2×, 1.5 s for 3.7 s against about 3.2 s for what was sent
after the step, and Turbo's expected occupancy half of what came).  The engines' own inter-token
latency counters (vLLM's and SGLang's ``inter_token_latency_seconds`` histograms) tell the pace
of every stream within a scrape interval, so the estimate is scaled by how much slower tokens
come now than they came while its samples ran (``TokenPace``).  Only up: a pace that fell says
the batches emptied, and the completions soon say so too, while an estimate cut early would open
the pool to the lower tiers on a lull's first interval.
"""

from __future__ import annotations

from turbogate.sched.load import ReplicaLoad

#: Weight of one sample in the estimate once it has a first one.
SERVICE_ALPHA = 0.2
#: Fewer tokens than this in the pool's last scrape interval say nothing about its pace.
PACE_MIN_TOKENS = 8.0


class TokenPace:
    """The pool's current time per output token: over each replica's last scrape interval, the
    growth of its engine's inter-token latency sum over the growth of its count."""

    __slots__ = ("_latest", "_marks", "_seconds", "_tokens")

    def __init__(self) -> None:
        self._marks: dict[str, tuple[float, float]] = {}  # replica → its counters at the last scrape
        self._latest: dict[str, tuple[float, float]] = {}  # replica → (Δsum, Δcount) of its last interval
        self._seconds = 0.0  # the sums of ``_latest``
        self._tokens = 0.0

    @property
    def seconds(self) -> float | None:
        """Mean inter-token latency over the replicas' last intervals; None with too few tokens."""
        return self._seconds / self._tokens if self._tokens >= PACE_MIN_TOKENS else None

    def read(self, replica_id: str, load: ReplicaLoad | None) -> None:
        """A scrape of ``replica_id`` read ``load`` (None: it failed).  Without the counters (an
        engine that has none, a failed scrape) the replica drops out of the pace until two scrapes
        read them again."""
        seconds, tokens = self._latest.pop(replica_id, (0.0, 0.0))
        self._seconds -= seconds
        self._tokens -= tokens
        itl_sum_s, itl_tokens = (load.itl_sum_s, load.itl_tokens) if load is not None else (None, None)
        if itl_sum_s is None or itl_tokens is None:
            self._marks.pop(replica_id, None)
            return
        mark = self._marks.get(replica_id)
        self._marks[replica_id] = (itl_sum_s, itl_tokens)
        if mark is None or itl_tokens < mark[1] or itl_sum_s < mark[0]:  # first read, or the engine restarted
            return
        interval = (itl_sum_s - mark[0], itl_tokens - mark[1])
        self._latest[replica_id] = interval
        self._seconds += interval[0]
        self._tokens += interval[1]


class ServiceTime:
    """EWMA of dispatch-to-completion time, trusted once ``min_samples`` have completed (or once
    taken from another process: ``adopt``), scaled by the engines' pace since (``TokenPace``).
    The estimate is read on every dispatch, so it is worked out when its inputs change: a sample,
    an adoption, a scrape (``paced``)."""

    __slots__ = ("_pace", "_pace_at_samples", "estimate_s", "min_samples", "samples", "value")

    def __init__(self, min_samples: int = 5) -> None:
        self.value = 0.0
        self.samples = 0
        self.min_samples = min_samples
        self._pace = TokenPace()
        self._pace_at_samples: float | None = None  # EWMA, with the samples' weight, of the pace as they came
        self.estimate_s: float | None = None

    @property
    def pace_s(self) -> float | None:
        """The engines' current time per output token (``TokenPace.seconds``)."""
        return self._pace.seconds

    def paced(self, replica_id: str, load: ReplicaLoad | None) -> None:
        """A scrape of ``replica_id`` read ``load`` (None: it failed): ``TokenPace.read``."""
        self._pace.read(replica_id, load)
        self._estimate()

    def add(self, sample: float) -> None:
        self.samples += 1
        self.value += (SERVICE_ALPHA if self.samples > 1 else 1.0) * (sample - self.value)
        pace, then = self._pace.seconds, self._pace_at_samples
        if pace is not None:
            self._pace_at_samples = pace if then is None else then + SERVICE_ALPHA * (pace - then)
        self._estimate()

    def adopt(self, value: float) -> bool:
        """Take ``value`` (another process's estimate) while this one trusts none of its own (the
        few samples it may have are fewer than it trusts); True if taken."""
        if self.samples >= self.min_samples or value <= 0.0:
            return False
        self.value = value
        self.samples = self.min_samples
        self._estimate()
        return True

    def _estimate(self) -> None:
        if self.samples < self.min_samples:
            self.estimate_s = None
            return
        then, now = self._pace_at_samples, self._pace.seconds
        self.estimate_s = self.value * now / then if then and now and now > then else self.value

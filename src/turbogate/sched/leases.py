"""Turbo leases: a time-boxed Turbo entitlement kept alive by heartbeats, as a table-driven
state machine (pure: ``now`` is passed in, nothing reads a clock).

    state    event        next       (TRANSITIONS, below)
    active   heartbeat    active     (renews the term when less than renew_below_s remain)
    active   quiet        warn       (no heartbeat for warn_after_s, 90 s by default)
    warn     heartbeat    active
    *        silent       expired    (no heartbeat for expire_after_s, 120 s by default)
    *        term_over    expired    (the term ran out: 15 min by default, plus renewals)
    expired  *            expired    (final: ask for a new lease)

Timed events are derived from ``now`` when the lease is looked at (``advance``), so no timer
is needed; ``next_change_at`` says when the state would next change (the WebSocket uses it to
tell the client at once).  The flow asks ``LeaseBook.check`` in its tier resolution: a request
carrying an active lease is served Turbo, one carrying an expired or unknown lease Standard,
and the answer's ``X-Turbogate-Downgrade`` says which.

A lease's state is a function of its times alone (granted, term end, last heartbeat, renewals):
a heartbeat is only accepted on a live lease and leaves it active, so replaying the timed
events from the last heartbeat through the same table (``restore``) gives the state the book
that saw every event has.  That is what lets gateway processes share leases through a store
that holds only those times (gateway/lease_share.py); where a stored copy and this book's
differ, the later heartbeat wins (``take_stored``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from enum import StrEnum

from turbogate.errors import TurbogateError


class LeaseState(StrEnum):
    ACTIVE = "active"
    WARN = "warn"
    EXPIRED = "expired"


class LeaseEvent(StrEnum):
    HEARTBEAT = "heartbeat"
    QUIET = "quiet"  # warn_after_s without a heartbeat
    SILENT = "silent"  # expire_after_s without a heartbeat
    TERM_OVER = "term_over"  # the lease's term ran out


_A, _W, _X = LeaseState.ACTIVE, LeaseState.WARN, LeaseState.EXPIRED
_HB, _QUIET, _SILENT, _OVER = LeaseEvent.HEARTBEAT, LeaseEvent.QUIET, LeaseEvent.SILENT, LeaseEvent.TERM_OVER
#: The whole behaviour: (state, event) → next state.  Every pair is listed, so a missing rule
#: is a KeyError in the tests rather than a silent default.
TRANSITIONS: dict[tuple[LeaseState, LeaseEvent], LeaseState] = {
    (_A, _HB): _A, (_A, _QUIET): _W, (_A, _SILENT): _X, (_A, _OVER): _X,
    (_W, _HB): _A, (_W, _QUIET): _W, (_W, _SILENT): _X, (_W, _OVER): _X,
    (_X, _HB): _X, (_X, _QUIET): _X, (_X, _SILENT): _X, (_X, _OVER): _X,
}

#: Why an expired lease expired, as the downgrade header and the API say it.
EXPIRY_REASON = {LeaseEvent.SILENT: "no_heartbeat", LeaseEvent.TERM_OVER: "term_over"}


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    duration_s: float = 900.0  # a new lease's term (15 min)
    renew_below_s: float = 300.0  # a heartbeat renews the term when less than this remains (5 min)
    renew_by_s: float = 900.0  # ... by this much (15 min)
    warn_after_s: float = 90.0  # no heartbeat for this long: warn
    expire_after_s: float = 120.0  # no heartbeat for this long: expired
    ping_interval_s: float = 30.0  # how often clients are told to heartbeat (advice, not a rule)
    max_per_tenant: int = 64  # live leases one tenant may hold
    keep_expired_s: float = 3600.0  # an expired lease is remembered this long (requests then say why)

    def __post_init__(self) -> None:
        if not 0 < self.warn_after_s < self.expire_after_s:
            raise ValueError("leases: need 0 < warn_after_s < expire_after_s")
        if min(self.duration_s, self.renew_below_s, self.renew_by_s, self.ping_interval_s) <= 0:
            raise ValueError("leases: durations must be positive")


@dataclass(slots=True, eq=False)
class Lease:
    id: str
    tenant: str
    granted_at: float
    term_ends_at: float
    last_heartbeat: float
    state: LeaseState = LeaseState.ACTIVE
    reason: str | None = None  # why it expired
    expired_at: float | None = None
    renewals: int = 0

    def remaining(self, now: float) -> float:
        return max(0.0, self.term_ends_at - now)


#: Two readings of one heartbeat, one converted between clocks (the store keeps wall time, a
#: book its process's clock), differ by the conversion's rounding: closer than this, the same.
SAME_HEARTBEAT_S = 1e-3


def stored_copy_wins(mine_heartbeat: float, stored_heartbeat: float) -> bool:
    """Whether a stored copy of a lease replaces this book's: unless this book saw a later
    heartbeat (one it kept while the store was unreachable: the lease lived).  Both times on the
    book's clock."""
    return mine_heartbeat <= stored_heartbeat + SAME_HEARTBEAT_S


class LeaseError(TurbogateError):
    """Base of the book's refusals (the gateway maps each to its HTTP status)."""


class UnknownLease(LeaseError):
    pass


class LeaseExpired(LeaseError):
    pass


class TooManyLeases(LeaseError):
    pass


class LeaseBook:
    """Every lease of one gateway process."""

    def __init__(self, policy: LeasePolicy | None = None) -> None:
        self.policy = policy or LeasePolicy()
        self._leases: dict[str, Lease] = {}
        self._expired: deque[Lease] = deque()  # in expiry order, to forget them after keep_expired_s

    # ---- the machine ------------------------------------------------------------------------------
    def _due(self, lease: Lease, now: float) -> tuple[LeaseEvent, float] | None:
        """The first timed event that has happened by ``now`` and not yet been applied."""
        p = self.policy
        events = [(lease.term_ends_at, LeaseEvent.TERM_OVER), (lease.last_heartbeat + p.expire_after_s,
                                                              LeaseEvent.SILENT)]
        if lease.state is LeaseState.ACTIVE:
            events.append((lease.last_heartbeat + p.warn_after_s, LeaseEvent.QUIET))
        at, event = min(events)
        return (event, at) if at <= now else None

    def advance(self, lease: Lease, now: float) -> Lease:
        """Apply the timed events due by ``now`` (in their order) through the table."""
        while lease.state is not LeaseState.EXPIRED:
            due = self._due(lease, now)
            if due is None:
                break
            event, at = due
            self._apply(lease, event, at)
        return lease

    def _apply(self, lease: Lease, event: LeaseEvent, at: float) -> None:
        before = lease.state
        lease.state = TRANSITIONS[(before, event)]
        if lease.state is LeaseState.EXPIRED and before is not LeaseState.EXPIRED:
            lease.reason = EXPIRY_REASON.get(event, event.value)
            lease.expired_at = at
            self._expired.append(lease)

    def next_change_at(self, lease: Lease) -> float:
        """When the lease's state next changes if no heartbeat comes (inf once expired)."""
        if lease.state is LeaseState.EXPIRED:
            return math.inf
        p = self.policy
        times = [lease.term_ends_at, lease.last_heartbeat + p.expire_after_s]
        if lease.state is LeaseState.ACTIVE:
            times.append(lease.last_heartbeat + p.warn_after_s)
        return min(times)

    # ---- the API ----------------------------------------------------------------------------------
    def grant(self, lease_id: str, tenant: str, now: float) -> Lease:
        """A new active lease for ``tenant`` (the caller checked it is entitled to Turbo)."""
        for x in self._leases.values():  # rare (one per lease granted): expire the abandoned ones, then forget
            self.advance(x, now)
        self._forget(now)
        live = sum(1 for x in self._leases.values() if x.tenant == tenant and x.state is not LeaseState.EXPIRED)
        if live >= self.policy.max_per_tenant:
            raise TooManyLeases(f"tenant {tenant!r} holds {live} live leases, the most allowed "
                                f"(leases.max_per_tenant)")
        lease = Lease(lease_id, tenant, now, now + self.policy.duration_s, now)
        self._leases[lease_id] = lease
        return lease

    def get(self, lease_id: str, tenant: str, now: float) -> Lease:
        """The lease, advanced to ``now``; ``UnknownLease`` if it is not ``tenant``'s (or forgotten)."""
        lease = self._leases.get(lease_id)
        if lease is None or lease.tenant != tenant:
            raise UnknownLease(f"no lease {lease_id!r} for this tenant")
        return self.advance(lease, now)

    def heartbeat(self, lease_id: str, tenant: str, now: float) -> tuple[Lease, bool]:
        """Keep the lease alive; whether the term was renewed.  ``LeaseExpired`` once expired."""
        lease = self.get(lease_id, tenant, now)
        if lease.state is LeaseState.EXPIRED:
            raise LeaseExpired(f"lease {lease_id!r} expired ({lease.reason}); ask for a new one")
        self._apply(lease, LeaseEvent.HEARTBEAT, now)
        # Never back in time: processes sharing a lease may report heartbeats out of order.
        lease.last_heartbeat = max(lease.last_heartbeat, now)
        renewed = lease.remaining(now) < self.policy.renew_below_s
        if renewed:
            lease.term_ends_at += self.policy.renew_by_s
            lease.renewals += 1
        return lease, renewed

    def check(self, lease_id: str, tenant: str, now: float) -> str | None:
        """None while the lease is live (active or warn: Turbo); else why not, as a downgrade
        reason: ``lease_expired`` or ``lease_unknown`` (another tenant's lease is unknown here)."""
        try:
            lease = self.get(lease_id, tenant, now)
        except UnknownLease:
            return "lease_unknown"
        return "lease_expired" if lease.state is LeaseState.EXPIRED else None

    def restore(self, lease_id: str, tenant: str, granted_at: float, term_ends_at: float, last_heartbeat: float,
                renewals: int, now: float) -> Lease:
        """The lease with these times (kept elsewhere, e.g. by another process), its state
        derived by the table up to ``now``; it replaces this book's copy."""
        lease = Lease(lease_id, tenant, granted_at, term_ends_at, last_heartbeat, renewals=renewals)
        self._leases[lease_id] = lease
        return self.advance(lease, now)

    def known(self, lease_id: str) -> Lease | None:
        """This book's copy, as last seen (not advanced)."""
        return self._leases.get(lease_id)

    def take_stored(self, lease_id: str, tenant: str, granted_at: float, term_ends_at: float, last_heartbeat: float,
                    renewals: int, now: float, force: bool = False) -> Lease:
        """A stored copy of a lease meets this book's: the one whose last heartbeat is later
        wins (:func:`stored_copy_wins`), so a heartbeat this book took while the store could not
        be written is not undone by the older record; ``force`` takes the stored one whatever
        (after a lost compare-and-set, the winner's write is the truth)."""
        mine = self._leases.get(lease_id)
        if not force and mine is not None and not stored_copy_wins(mine.last_heartbeat, last_heartbeat):
            return self.advance(mine, now)
        return self.restore(lease_id, tenant, granted_at, term_ends_at, last_heartbeat, renewals, now)

    def live_count(self, tenant: str, now: float) -> int:
        """Live leases ``tenant`` holds in this book at ``now``."""
        return sum(1 for x in self._leases.values()
                   if x.tenant == tenant and self.advance(x, now).state is not LeaseState.EXPIRED)

    def forget_at(self, lease: Lease) -> float:
        """When a record of ``lease`` may be dropped if no heartbeat comes: ``keep_expired_s``
        after it expires (or would expire)."""
        ends = lease.expired_at if lease.expired_at is not None else min(
            lease.term_ends_at, lease.last_heartbeat + self.policy.expire_after_s)
        return ends + self.policy.keep_expired_s

    def _forget(self, now: float) -> None:
        keep = self.policy.keep_expired_s
        q = self._expired
        while q and q[0].expired_at is not None and q[0].expired_at + keep <= now:
            gone = q.popleft()
            if self._leases.get(gone.id) is gone:  # not a copy restored since (restore replaces)
                del self._leases[gone.id]

    def __len__(self) -> int:
        return len(self._leases)

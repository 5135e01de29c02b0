"""Coalescing: which identical deterministic requests share one upstream call (pure, sans-I/O).

The rule, all of it here so the gateway only moves bytes:

* **Key** (:func:`request_key`): the tenant (requests never merge across tenants), the route,
  the request's context as the flow resolved it (the gateway passes the tier asked, the tier
  served and why they differ — however they were asked, by body, header or lease — so members
  share one answer's headers truthfully), and the body as canonical JSON: keys sorted at every
  level, integral floats written as integers (``0.0`` and ``0`` are one temperature), and the
  top-level fields that do not change the output left out (``user`` by default: an end-user id
  for abuse tracking).  Everything else, ``stream`` and ``stream_options`` included, is part of
  the key: a stream never merges with a plain answer.
* **Deterministic** (:func:`deterministic`): ``temperature`` 0, or a fixed integer ``seed``; an
  embedding is always deterministic.  A sampled request (no temperature: the default is 1) gets
  no key, so it is never merged.
* **Window** (:class:`Coalescer`): the first request of a key **leads**: it goes to L1 at once
  (nobody waits for the window).  A later identical request **follows** — shares the leader's
  upstream call and gets every byte of its answer — while the group is joinable: it arrived
  within ``window_s`` of the group's last arrival (the sliding window), within ``max_span_s`` of
  its first (the cap on the total wait: a steady trickle cannot keep one answer alive forever),
  the group has fewer than ``max_requests`` members, and its call has not failed or been given
  up.  A follower that comes after the answer completed (still inside the window) gets it
  replayed whole.
* **Who leads, who stays**: the upstream call belongs to the group, not to the leader's client.
  It is cancelled only when every member's client has left before the answer completed
  (:meth:`Coalescer.left` says so); a group whose call failed or was given up takes no one new.
"""

from __future__ import annotations

import builtins
import hashlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

import orjson

#: Routes whose answer involves no sampling: always deterministic.
UNSAMPLED_ROUTES = frozenset({"/v1/embeddings"})
#: Top-level body fields left out of the key by default: they do not change the output.
DEFAULT_IGNORED_FIELDS = ("user",)


@dataclass(frozen=True, slots=True)
class CoalescePolicy:
    window_s: float = 0.25
    max_requests: int = 10
    max_span_s: float = 1.0
    ignored_fields: frozenset[str] = frozenset(DEFAULT_IGNORED_FIELDS)

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.max_span_s <= 0:
            raise ValueError("window_s and max_span_s must be > 0")
        if self.max_requests < 2:
            raise ValueError("max_requests must be at least 2 (a leader and one follower)")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def deterministic(route: str, body: Mapping[str, object]) -> bool:
    """Whether the answer to ``body`` on ``route`` is fixed: no sampling, ``temperature`` 0,
    or a fixed integer ``seed``."""
    if route in UNSAMPLED_ROUTES:
        return True
    if _is_int(body.get("seed")):
        return True
    temperature = body.get("temperature")
    return isinstance(temperature, int | float) and not isinstance(temperature, bool) and temperature == 0


def _canonical(value: object) -> object:
    """``value`` with integral floats as ints (``0.0`` → ``0``), so equal numbers key alike;
    key order is settled by the encoder (sorted at every level)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def request_key(scope: str, route: str, body: Mapping[str, object], context: Sequence[str] = (),
                ignored_fields: Iterable[str] = DEFAULT_IGNORED_FIELDS) -> str | None:
    """The coalescing key of a request (a sha256 hex digest), or ``None`` when it is not
    deterministic and must never be merged.  ``scope`` is the tenant; ``context`` what else must
    match, in a fixed order (the gateway: tier asked, tier served, why they differ)."""
    if not deterministic(route, body):
        return None
    ignored = frozenset(ignored_fields)
    kept = {k: _canonical(v) for k, v in body.items() if k not in ignored}
    text = orjson.dumps([scope, route, list(context), kept], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()


class GroupState(Enum):
    RUNNING = "running"  # the shared call has not finished
    ANSWERED = "answered"  # it finished with a good answer: joiners inside the window get it replayed
    FAILED = "failed"  # it failed (an error status, a broken stream): its members have it, nobody joins
    ABANDONED = "abandoned"  # every member left before the answer: the call is cancelled


@dataclass(slots=True, eq=False)
class Group:
    """Requests sharing one upstream call.  ``handle`` is the driver's own object."""

    key: str
    opened: float
    last_arrival: float
    members: int = 1  # requests that joined it, the leader included
    present: int = 1  # members whose clients have not left
    state: GroupState = GroupState.RUNNING
    handle: builtins.object = field(default=None)  # builtins.: see sched/ticket.py Ticket.payload

    @property
    def followers(self) -> int:
        return self.members - 1

    def joinable(self, policy: CoalescePolicy, now: float) -> bool:
        return (self.state in (GroupState.RUNNING, GroupState.ANSWERED) and self.members < policy.max_requests
                and now < self.last_arrival + policy.window_s and now < self.opened + policy.max_span_s)


class Lead(NamedTuple):
    """Make the upstream call for ``group`` (through L1/L2 as any request)."""

    group: Group


class Follow(NamedTuple):
    """Send nothing upstream: relay ``group``'s answer."""

    group: Group


class Coalescer:
    """The open groups by key, and the counts the metrics show."""

    def __init__(self, policy: CoalescePolicy | None = None) -> None:
        self.policy = policy or CoalescePolicy()
        self._open: dict[str, Group] = {}
        self._by_age: deque[Group] = deque()  # opening order = order of max-span expiry
        self.groups = 0  # groups led (upstream calls made for coalescible requests)
        self.merged = 0  # followers (requests that made no upstream call of their own)

    def join(self, key: str, now: float) -> Lead | Follow:
        """A deterministic request with ``key`` arrived at ``now``: lead a new group or follow one."""
        self.expire(now)
        group = self._open.get(key)
        policy = self.policy
        if group is not None and group.joinable(policy, now):
            group.members += 1
            group.present += 1
            group.last_arrival = now
            self.merged += 1
            if group.members >= policy.max_requests:
                self._drop(group)
            return Follow(group)
        group = Group(key, now, now)
        self._open[key] = group
        self._by_age.append(group)
        self.groups += 1
        return Lead(group)

    def finished(self, group: Group, ok: bool, now: float) -> None:
        """The shared call ended: ``ok`` when the answer is whole and good (a 200, a stream that
        did not break).  A good answer stays joinable for the rest of its window."""
        if group.state is not GroupState.RUNNING:
            return
        group.state = GroupState.ANSWERED if ok else GroupState.FAILED
        if not ok:
            self._drop(group)
        self.expire(now)

    def left(self, group: Group, *, whole: bool) -> bool:
        """A member is done: ``whole`` when its client got the whole answer, else it left early.
        True when the shared call should be cancelled: the last member left early and the call
        has not finished."""
        group.present -= 1
        if whole or group.present > 0 or group.state is not GroupState.RUNNING:
            return False
        group.state = GroupState.ABANDONED
        self._drop(group)
        return True

    def expire(self, now: float) -> None:
        """Forget groups past their span (they keep running for their members)."""
        span = self.policy.max_span_s
        ages = self._by_age
        while ages and ages[0].opened + span <= now:
            self._drop(ages.popleft())

    def open_groups(self) -> int:
        return len(self._open)

    def _drop(self, group: Group) -> None:
        if self._open.get(group.key) is group:
            del self._open[group.key]


__all__ = [
    "DEFAULT_IGNORED_FIELDS",
    "UNSAMPLED_ROUTES",
    "CoalescePolicy",
    "Coalescer",
    "Follow",
    "Group",
    "GroupState",
    "Lead",
    "deterministic",
    "request_key",
]

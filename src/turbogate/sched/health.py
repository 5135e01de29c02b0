"""Replica health: when a replica is ejected, how it is re-probed, and when it is taken back.
Pure and ``now``-driven; ``Picker`` (sched/picker.py) applies these rules to its books.

A refused connection ejects at once; soft failures (5xx answers, resets, a failed scrape, a
deadline hit while waiting for the first byte) eject after ``eject_after_failures`` in a row.
Ejected replicas are re-probed with doubling backoff.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from turbogate.sched.replica import Health, HealthChange, PickerConfig, Replica, ScrapeFailed

_HEALTHY, _EJECTED = Health.HEALTHY, Health.EJECTED

#: What each failed scrape says, as the reason for an ejection.
_SCRAPE_REASONS = {"connect": "metrics: connection refused", "status": "metrics: bad HTTP status",
                   "parse": "metrics: unparsable"}


def answered(replica: Replica, latency_s: float) -> None:
    """A good answer: it proves the replica alive (its strikes and probation end) and feeds its
    service time."""
    replica.failures = 0
    replica.probation = False
    replica.served += 1
    prev = replica.service_s
    replica.service_s = latency_s if prev is None else prev + 0.2 * (latency_s - prev)


def failed(replica: Replica, now: float, cfg: PickerConfig, *, hard: bool, reason: str) -> HealthChange | None:
    """A request failed: ``hard`` ejects at once, soft failures after ``eject_after_failures``
    in a row.  The ejection, if any."""
    replica.failures += 1
    if replica.health is _HEALTHY and (hard or replica.failures >= cfg.eject_after_failures):
        return eject(replica, now, cfg, reason if hard else f"{replica.failures} failures in a row, the last: {reason}")
    return None


def eject(replica: Replica, now: float, cfg: PickerConfig, reason: str) -> HealthChange:
    replica.health = _EJECTED
    replica.ejections += 1
    # Ejected again while on probation (e.g. a hung engine whose /health still answers): the
    # backoff keeps doubling instead of starting over, so it costs ever fewer requests.
    base, top = cfg.probe_backoff_s, cfg.probe_backoff_max_s
    replica.backoff_s = min(top, max(replica.backoff_s, base) * 2) if replica.probation else base
    replica.probation = False
    replica.next_probe_at = now + replica.backoff_s
    replica.load = None
    replica.eject_reason = reason
    return HealthChange(replica, False, reason)


def scrape_failed(replica: Replica, result: ScrapeFailed, now: float, cfg: PickerConfig) -> HealthChange | None:
    """A refused connection ejects; a bad status or unparsable body is a soft failure; a timeout
    only lets the load go stale.  The ejection, if any."""
    if result.kind == "timeout":
        return None
    replica.scrape_failures += 1
    if replica.health is _HEALTHY and (
            result.kind == "connect" or replica.scrape_failures >= cfg.eject_after_failures):
        return eject(replica, now, cfg, _SCRAPE_REASONS[result.kind])
    return None


def next_probe_at(replicas: Iterable[Replica]) -> float:
    """When the earliest ejected replica of ``replicas`` is re-probed (inf: none ejected)."""
    return min((r.next_probe_at for r in replicas if r.health is _EJECTED), default=math.inf)


def due_probes(replicas: Iterable[Replica], now: float) -> list[Replica]:
    """Ejected replicas whose re-probe time has come; each is not returned again until its
    probe result is reported (or its backoff passes once more)."""
    due = [r for r in replicas if r.health is _EJECTED and r.next_probe_at <= now]
    for r in due:
        r.next_probe_at = now + r.backoff_s
    return due


def probed(replica: Replica, ok: bool, now: float, cfg: PickerConfig) -> HealthChange | None:
    """A health probe's result: an ejected replica that answers comes back; a healthy one that
    does not (a periodic check of a replica without metrics) has a soft failure.  The change, if any."""
    if replica.health is _HEALTHY:
        return None if ok else failed(replica, now, cfg, hard=False, reason="health check failed")
    if ok:
        replica.health = _HEALTHY
        # Back on probation: /health proves the process up, not that it answers (a hung engine
        # still does), so its request failures stay one short of ejection until a good answer
        # clears them; Turbo avoids it meanwhile (``Picker.pick``).
        replica.failures = min(replica.failures, cfg.eject_after_failures - 1)
        replica.probation = True
        replica.scrape_failures = 0
        replica.load_at = -math.inf  # stale until the next scrape
        return HealthChange(replica, True, "health probe answered 200")
    replica.backoff_s = min(cfg.probe_backoff_max_s, max(replica.backoff_s, 1e-3) * 2.0)
    replica.next_probe_at = now + replica.backoff_s
    return None

"""Turbo leases shared by every gateway process through the store (docs/gateway.md).

The store holds each lease's times (granted, term end, last heartbeat, renewals) in wall
seconds; the state is never stored: this process's ``LeaseBook`` (sched/leases.py) derives it
from the times with the same table (``LeaseBook.restore``).  A heartbeat is read, applied by
the book and written back with compare-and-set, so two processes heartbeating one lease at
once renew its term once.  Before a request carrying ``X-Turbogate-Lease`` is opened, its lease
is read from the store, so a lease granted or kept alive through another process counts here.

While the store is unreachable every call falls back to this process's book as it stands
(granted here, or last read here), as the switches do; a record written since by another
process is read again once the store answers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from turbogate.sched.leases import Lease, LeaseBook, UnknownLease
from turbogate.store.base import LeaseRecord, StoreUnavailable

if TYPE_CHECKING:
    from turbogate.store.resilient import ResilientStore

log = logging.getLogger("turbogate.gateway")
_CAS_TRIES = 8  # heartbeats racing on one lease: each retry reads the winner's write


class SharedLeases:
    def __init__(self, book: LeaseBook, store: ResilientStore,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.book = book
        self.store = store
        self.clock = clock
        # The book runs on this process's perf_counter (the flow's clock); the store on wall time.
        self._wall = time.time() - time.perf_counter()

    # ---- conversions ------------------------------------------------------------------------
    def _record(self, lease: Lease) -> LeaseRecord:
        w = self._wall
        return LeaseRecord(lease.id, lease.tenant, lease.granted_at + w, lease.term_ends_at + w,
                           lease.last_heartbeat + w, lease.renewals, self.book.forget_at(lease) + w)

    def _restore(self, rec: LeaseRecord, now: float, force: bool = False) -> Lease:
        """The stored record against this process's copy: which wins is the book's rule
        (``LeaseBook.take_stored``); here only wall time becomes the book's clock."""
        w = self._wall
        return self.book.take_stored(rec.id, rec.tenant, rec.granted_at - w, rec.term_ends_at - w,
                                     rec.last_heartbeat - w, rec.renewals, now, force)

    # ---- the API ----------------------------------------------------------------------------
    async def refresh(self, lease_id: str, now: float) -> None:
        """Bring this process's copy of ``lease_id`` up to the store's (the flow then checks it)."""
        try:
            rec = await self.store.turbo_lease(lease_id)
        except StoreUnavailable:
            return
        if rec is not None:
            self._restore(rec, now)

    async def grant(self, lease_id: str, tenant: str, now: float) -> Lease:
        """``LeaseBook.grant`` over every process's leases of ``tenant`` (``TooManyLeases``)."""
        try:
            for rec in await self.store.turbo_leases(tenant, now + self._wall):
                self._restore(rec, now)
        except StoreUnavailable:
            pass
        lease = self.book.grant(lease_id, tenant, now)
        try:
            await self.store.put_turbo_lease(self._record(lease), None, now + self._wall)
        except StoreUnavailable:
            log.warning("lease %s granted while the store is unreachable: known to this process only", lease_id)
        return lease

    async def get(self, lease_id: str, tenant: str, now: float) -> Lease:
        await self.refresh(lease_id, now)
        return self.book.get(lease_id, tenant, now)

    async def heartbeat(self, lease_id: str, tenant: str, now: float) -> tuple[Lease, bool]:
        """``LeaseBook.heartbeat`` on the store's record (``UnknownLease``, ``LeaseExpired``)."""
        for attempt in range(_CAS_TRIES):
            try:
                rec = await self.store.turbo_lease(lease_id)
            except StoreUnavailable:
                return self.book.heartbeat(lease_id, tenant, now)
            # The client was alive when the heartbeat came, and still is once the store answered:
            # a slow store must not make a heartbeat count from before it waited.
            now = max(now, self.clock())
            if rec is None:
                if self.book.known(lease_id) is None:
                    raise UnknownLease(f"no lease {lease_id!r} for this tenant")
                lease, renewed = self.book.heartbeat(lease_id, tenant, now)  # granted here while the store was down
                expect = None
            else:
                if rec.tenant != tenant:
                    raise UnknownLease(f"no lease {lease_id!r} for this tenant")
                # This process's times when newer (heartbeats it took while the store was down: the
                # lease lived), else the store's; after a lost race, the winner's.
                self._restore(rec, now, force=attempt > 0)
                lease, renewed = self.book.heartbeat(lease_id, tenant, now)
                expect = rec.version
            try:
                if await self.store.put_turbo_lease(self._record(lease), expect, now + self._wall):
                    return lease, renewed
            except StoreUnavailable:
                return lease, renewed
        log.warning("lease %s: heartbeat kept here only after %d conflicting writes", lease_id, _CAS_TRIES)
        return lease, renewed

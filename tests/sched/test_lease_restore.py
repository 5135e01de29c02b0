"""A lease's state is a function of its stored times: a book rebuilt from the times alone
(``LeaseBook.restore``, as another gateway process does) agrees with the book that saw every
heartbeat, at every moment of random schedules."""

from __future__ import annotations

import contextlib
import random

import pytest

from turbogate.sched.leases import SAME_HEARTBEAT_S, LeaseBook, LeaseExpired, LeasePolicy, LeaseState, stored_copy_wins

POLICY = LeasePolicy(duration_s=100.0, renew_below_s=30.0, renew_by_s=50.0, warn_after_s=9.0, expire_after_s=12.0,
                     keep_expired_s=40.0)


@pytest.mark.parametrize("seed", range(40))
def test_restored_lease_agrees_with_the_live_one(seed: int) -> None:
    rng = random.Random(seed)
    live, other = LeaseBook(POLICY), LeaseBook(POLICY)
    now = 0.0
    lease = live.grant("l1", "acme", now)
    for _ in range(80):
        now += rng.choice([rng.uniform(0, 8), rng.uniform(8, 11), rng.uniform(11, 14)])
        if rng.random() < 0.7:
            with contextlib.suppress(LeaseExpired):
                live.heartbeat("l1", "acme", now)
        look = now + rng.uniform(0, 13)
        live.advance(lease, look)
        copy = other.restore("l1", "acme", lease.granted_at, lease.term_ends_at, lease.last_heartbeat,
                             lease.renewals, look)
        assert (copy.state, copy.reason, copy.expired_at) == (lease.state, lease.reason, lease.expired_at)
        assert other.check("l1", "acme", look) == live.check("l1", "acme", look)
        assert other.next_change_at(copy) == live.next_change_at(lease)
        assert other.forget_at(copy) >= (lease.expired_at or look)
        now = max(now, look)
        if lease.state is LeaseState.EXPIRED:
            break


def test_restore_replaces_the_copy_and_forgetting_spares_a_newer_one() -> None:
    book = LeaseBook(POLICY)
    old = book.restore("l1", "acme", 0.0, 100.0, 0.0, 0, 20.0)  # silent for 12 s: expired at 12
    assert old.state is LeaseState.EXPIRED and old.reason == "no_heartbeat" and old.expired_at == 12.0
    # Another process saw a heartbeat at 10 (before the expiry): the newer times win.
    new = book.restore("l1", "acme", 0.0, 100.0, 10.0, 0, 20.0)
    assert new.state is LeaseState.WARN and book.known("l1") is new
    book.heartbeat("l1", "acme", 21.0)
    book.grant("l2", "acme", 60.0)  # forgets leases expired over keep_expired_s ago: not l1's new copy
    assert book.known("l1") is new
    assert book.live_count("acme", 60.0) == 1  # l1 went silent at 33; l2 lives


def test_a_stored_copy_wins_unless_this_book_saw_a_later_heartbeat() -> None:
    book = LeaseBook(POLICY)
    lease = book.grant("l1", "acme", 0.0)
    book.heartbeat("l1", "acme", 5.0)  # kept here while the store could not be written
    # The store's record still says granted at 0, last heartbeat at 0: this book's later heartbeat stands.
    kept = book.take_stored("l1", "acme", 0.0, lease.term_ends_at, 0.0, 0, 10.0)
    assert kept.last_heartbeat == 5.0 and kept is lease
    assert kept.state is LeaseState.ACTIVE  # 5 s quiet; the stored times (10 s quiet) would say warn
    # A stored heartbeat later than this book's (taken by another process) replaces it.
    newer = book.take_stored("l1", "acme", 0.0, lease.term_ends_at, 7.0, 0, 10.0)
    assert newer.last_heartbeat == 7.0 and book.known("l1") is newer
    # The same heartbeat read back through the wall-clock conversion (a rounding apart) is the stored one's.
    assert stored_copy_wins(7.0 + SAME_HEARTBEAT_S / 2, 7.0)
    assert not stored_copy_wins(7.0 + 2 * SAME_HEARTBEAT_S, 7.0)
    # After a lost compare-and-set the winner's write is taken, whatever this book saw.
    book.heartbeat("l1", "acme", 10.5)
    forced = book.take_stored("l1", "acme", 0.0, lease.term_ends_at, 7.0, 0, 11.0, force=True)
    assert forced.last_heartbeat == 7.0


def test_a_stored_lease_unknown_here_is_taken() -> None:
    book = LeaseBook(POLICY)
    lease = book.take_stored("l2", "acme", 0.0, 100.0, 0.0, 0, 10.0)
    assert lease.state is LeaseState.WARN and book.known("l2") is lease  # quiet past warn_after_s (9 s)

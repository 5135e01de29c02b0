"""The upstream client's own resend (sched/resend.py): only a kept-alive connection that failed
before any byte of the answer, and not on the request's timeout."""

from __future__ import annotations

import itertools

from turbogate.sched.resend import resend_on_new_connection


def test_only_a_stale_kept_alive_connection_is_resent() -> None:
    resent = {case for case in itertools.product((False, True), repeat=3) if resend_on_new_connection(*case)}
    assert resent == {(True, True, False)}  # reused, before the response, not timed out

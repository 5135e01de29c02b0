"""When the upstream client sends a request again by itself, before the flow hears of a failure.

A kept-alive connection may be closed by the engine (its idle timeout) at the moment the client
reuses it: the request is written into a connection the engine has already let go, and the
client sees it close with no byte of an answer.  The engine never read that request, so it did
no work and the failure says nothing about its health: the client sends the request once more,
on a new connection, and neither the flow nor the replica's health hears of the first try.

Every other failure is the flow's to judge (a retry elsewhere, an ejection): one on a new
connection (the engine is down or refused it), one after any byte of the answer came (the
engine did read it: sending it again could run it twice), and the request's own timeout (the
time is spent).  A resend is on a new connection, so it is never resent again.
"""

from __future__ import annotations


def resend_on_new_connection(reused: bool, before_response: bool, timed_out: bool) -> bool:
    """Whether the client sends a failed request again on a new connection, without telling the
    flow: only when the connection was kept alive from an earlier request (``reused``), no byte
    of the answer came (``before_response``) and the failure is not the request's timeout."""
    return reused and before_response and not timed_out

"""A coalesced follower passes its tenant's global limits like any other request: identical
deterministic requests cannot buy more answers than ``requests_per_minute`` allows.  A real
gateway in front of a real emulator, the official openai client, a burst released at once."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import openai

from tests.gateway.conftest import MODEL, gateway_config, pool
from tests.gateway.test_coalesce import CHAT, together
from tests.sched.test_flow import fresh, new, policy
from turbogate.config import hash_key
from turbogate.procs import Service
from turbogate.sched import Dispatch, Flow, Respond
from turbogate.sched.metering import LimitPolicy, limit_refusal

LIMITED_KEY = "sk-limited-test"
RATE = 10


def test_the_limit_verdict_is_an_input_of_arrive() -> None:
    """The store counts, sched/metering.py's rule decides, the flow answers and meters."""
    flow = Flow(policy())
    fresh(flow, 0.0)
    verdict = limit_refusal(LimitPolicy(requests_per_minute=10), 0, 10, 0, ts=30.0)
    assert verdict is not None
    req = new(flow, 0.0)
    out = flow.arrive(req, 0.0, verdict)
    assert len(out) == 1 and isinstance(out[0], Respond)
    assert (out[0].status, out[0].code, out[0].retry_after_s) == (429, "tenant_rate_limit", 31)
    assert req.usage is not None and req.usage.status == 429
    assert flow.pools[req.pool].admission.queued == 0  # no place taken
    admitted = new(flow, 0.0)
    assert any(isinstance(a, Dispatch) for a in flow.arrive(admitted, 0.0, None))


def _outside_a_minute_turn(margin_s: float = 20.0) -> None:
    """The limit counts per wall-clock minute: start the burst where it cannot straddle two."""
    left = 60.0 - time.time() % 60.0
    if left < margin_s:
        time.sleep(left + 0.5)  # waits for the clock's minute boundary itself, not for a race


def test_a_burst_of_identical_requests_gets_no_more_than_the_tenant_rate(
        emulator_factory: Callable[..., Service], gateway_factory: Callable[[dict[str, Any]], Service]) -> None:
    # Real time: a 64-token answer streams for a while, so the burst finds its shared call in flight.
    emulator = emulator_factory("--time-scale", "1", "--model", MODEL, "--seed", "5")
    cfg = gateway_config([pool("p", [MODEL], [emulator.url])],
                         coalesce={"routes": [CHAT], "window_s": 10, "max_span_s": 60, "max_requests": 100})
    cfg["tenants"].append({"name": "limited", "key_sha256": hash_key(LIMITED_KEY), "tiers": ["standard"],
                           "requests_per_minute": RATE})
    gw = gateway_factory(cfg)
    msgs = [{"role": "user", "content": f"limited burst {uuid.uuid4().hex}"}]
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=LIMITED_KEY, max_retries=0, timeout=60)

    def ask(_i: int) -> tuple[int, str | None, bool]:
        try:
            raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=msgs, max_tokens=64,
                                                                   temperature=0)
            return raw.status_code, None, raw.headers.get("x-turbogate-coalesced") == "true"
        except openai.RateLimitError as exc:
            return exc.status_code, exc.response.headers.get("retry-after"), False

    _outside_a_minute_turn()
    results = together(30, ask)
    answered = [r for r in results if r[0] != 429]
    refused = [r for r in results if r[0] == 429]
    assert len(answered) <= RATE, results
    assert all(status == 200 for status, _, _ in answered), results
    assert any(coalesced for _, _, coalesced in answered), "no request followed another's call: nothing tested"
    assert all(retry_after is not None and int(retry_after) >= 1 for _, retry_after, _ in refused)

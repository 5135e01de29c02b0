"""Coalescing through a real gateway in front of a real emulator, with the official openai client:
identical deterministic requests make one upstream call (counted at the emulator), streams fan
out, sampled requests and other tenants never merge, a route left off is untouched, and the call
lives while any member waits.  The window is wide (5 s) so that a busy machine's scheduling
cannot split a group: these tests check who shares, not how fast."""

from __future__ import annotations

import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, gateway_config, pool, wait_for
from turbogate.procs import Service, start_emulator

CHAT = "/v1/chat/completions"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    # Real time (time-scale 1): a 32-token answer streams over a few hundred ms, so members join live.
    svc = start_emulator("--time-scale", "1", "--model", MODEL, "--seed", "3", log_dir=tmp_path_factory.mktemp("emu"))
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def gw(emulator: Service, gateway_factory: Callable[[dict[str, Any]], Service]) -> Service:
    cfg = gateway_config([pool("p", [MODEL], [emulator.url])],
                         coalesce={"routes": [CHAT], "window_s": 5, "max_span_s": 30, "max_requests": 10})
    return gateway_factory(cfg)


def metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def upstream_calls(emulator: Service, endpoint: str = CHAT) -> float:
    return metrics(emulator.url)[f"turbogate_emulator_requests_total{{endpoint={endpoint}}}"]


def client(gw: Service, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=key, max_retries=0, timeout=60)


def together(n: int, call: Callable[[int], Any]) -> list[Any]:
    """Run ``call(i)`` for i < n in threads released at once; their results in order."""
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    gate = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            gate.wait(timeout=30)
            results[i] = call(i)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return results


def messages() -> list[dict[str, str]]:
    """A prompt no other test uses (groups are per body)."""
    return [{"role": "user", "content": f"coalesce me {uuid.uuid4().hex}"}]


def test_identical_deterministic_requests_share_one_upstream_call(gw: Service, emulator: Service) -> None:
    n = 6
    msgs = messages()
    before, gw_before = upstream_calls(emulator), metrics(gw.url)
    results = together(n, lambda _i: client(gw).chat.completions.with_raw_response.create(
        model=MODEL, messages=msgs, max_tokens=16, temperature=0))
    assert upstream_calls(emulator) - before == 1
    completions = [r.parse() for r in results]
    assert len({c.id for c in completions}) == 1  # the upstream's answer, byte for byte
    assert len({c.choices[0].message.content for c in completions}) == 1
    assert all(c.service_tier == "standard" for c in completions)
    followers = [r for r in results if r.headers.get("x-turbogate-coalesced") == "true"]
    assert len(followers) == n - 1
    after = metrics(gw.url)
    merged = "turbogate_coalesced_requests_total{route=/v1/chat/completions,tenant=acme}"
    assert after[merged] - gw_before.get(merged, 0.0) == n - 1
    calls = "turbogate_coalesce_calls_total{route=/v1/chat/completions}"
    assert after[calls] - gw_before.get(calls, 0.0) == 1
    counted = "turbogate_requests_total{status=200,tenant=acme,tier_asked=standard,tier_served=standard}"
    assert after[counted] - gw_before.get(counted, 0.0) == n  # every member is a request of its own


def test_a_follower_after_the_answer_inside_the_window_gets_it_replayed(gw: Service, emulator: Service) -> None:
    msgs = messages()
    before = upstream_calls(emulator)
    answers = [client(gw).chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, seed=7,
                                                  temperature=0.8, user=f"user-{i}")  # user is not in the key
               for i in range(3)]
    assert upstream_calls(emulator) - before == 1
    assert len({a.id for a in answers}) == 1


def test_streams_fan_out_to_every_waiter(gw: Service, emulator: Service) -> None:
    n = 4
    msgs = messages()
    before = upstream_calls(emulator)

    def stream(_i: int) -> tuple[set[str], str, bool]:
        chunks = list(client(gw).chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=32, temperature=0, stream=True,
            stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return {c.id for c in chunks}, text, chunks[-1].usage is not None

    results = together(n, stream)
    assert upstream_calls(emulator) - before == 1
    ids, texts, usage = zip(*results, strict=True)
    assert len(set(texts)) == 1 and texts[0]
    assert all(len(i) == 1 for i in ids) and len(set.union(*ids)) == 1  # the upstream's one id
    assert all(usage)  # every waiter got the whole stream, to the usage chunk


def test_sampled_requests_are_never_merged(gw: Service, emulator: Service) -> None:
    n = 4
    msgs = messages()
    before = upstream_calls(emulator)
    results = together(n, lambda _i: client(gw).chat.completions.with_raw_response.create(
        model=MODEL, messages=msgs, max_tokens=8, temperature=0.7))
    assert upstream_calls(emulator) - before == n
    assert not any("x-turbogate-coalesced" in r.headers for r in results)


def test_tenants_and_tiers_never_share(gw: Service, emulator: Service) -> None:
    msgs = messages()
    before = upstream_calls(emulator)
    client(gw).chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    client(gw, BASIC_KEY).chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    turbo = client(gw).chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0,
                                               service_tier="priority")
    assert turbo.service_tier == "turbo"
    assert upstream_calls(emulator) - before == 3


def test_a_route_left_off_is_not_coalesced(gw: Service, emulator: Service) -> None:
    prompt = f"plain {uuid.uuid4().hex}"
    before = upstream_calls(emulator, "/v1/completions")
    for _ in range(2):
        client(gw).completions.create(model=MODEL, prompt=prompt, max_tokens=4, temperature=0)
    assert upstream_calls(emulator, "/v1/completions") - before == 2


def _sse_lines(resp: httpx.Response) -> Iterator[str]:
    for line in resp.iter_lines():
        if line.startswith("data: "):
            yield line[6:]


def test_the_call_outlives_a_leader_that_leaves_and_ends_when_all_have_left(gw: Service, emulator: Service) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": MODEL, "messages": messages(), "max_tokens": 64, "temperature": 0, "stream": True}
    before = upstream_calls(emulator)
    with httpx.Client(base_url=gw.url, headers=headers, timeout=60) as leader, \
            httpx.Client(base_url=gw.url, headers=headers, timeout=60) as follower:
        with leader.stream("POST", CHAT, json=body) as lead:
            lead_events = _sse_lines(lead)  # held: a dropped generator would close the response
            next(lead_events)  # the answer has begun
            with follower.stream("POST", CHAT, json=body) as follow:
                assert follow.headers["x-turbogate-coalesced"] == "true"
                lead.close()  # the leader's client leaves mid-stream
                events = list(_sse_lines(follow))
        assert events[-1] == "[DONE]"  # the follower still got the whole stream
    assert upstream_calls(emulator) - before == 1

    # Every member leaves a long answer: the shared call is cancelled, the engine stops generating.
    long = {**body, "messages": messages(), "max_tokens": 4000, "ignore_eos": True}
    a = httpx.Client(base_url=gw.url, headers=headers, timeout=60)
    b = httpx.Client(base_url=gw.url, headers=headers, timeout=60)
    with a, b, a.stream("POST", CHAT, json=long) as first:
        first_events = _sse_lines(first)
        next(first_events)
        with b.stream("POST", CHAT, json=long) as second:
            assert second.headers["x-turbogate-coalesced"] == "true"
            second_events = _sse_lines(second)
            next(second_events)
    # 4000 tokens take the emulated GPU tens of seconds: an idle engine well before means cancelled.
    wait_for(lambda: metrics(emulator.url)["vllm:num_requests_running{}"] == 0, timeout=15,
             what="the engine to drop the abandoned shared call")


def test_identical_job_steps_share_one_call(gw: Service, emulator: Service) -> None:
    """L4 steps enter through the same edge: two independent identical deterministic steps of a
    job run in parallel and make one upstream call."""
    headers = {"Authorization": f"Bearer {KEY}"}
    request = {"model": MODEL, "messages": messages(), "max_tokens": 16, "temperature": 0}
    before = upstream_calls(emulator)
    job = httpx.post(gw.url + "/v1/jobs", headers=headers, timeout=30,
                     json={"steps": [{"id": "a", "request": request}, {"id": "b", "request": request}]})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    state: dict[str, Any] = {}

    def ended() -> bool:
        state.update(httpx.get(f"{gw.url}/v1/jobs/{job_id}", headers=headers, timeout=30).json())
        return state["status"] != "running"

    wait_for(ended, timeout=60, what="the job to end")
    assert state["status"] == "succeeded", state
    steps = {s["id"]: s for s in state["steps"]}
    assert steps["a"]["output"]["id"] == steps["b"]["output"]["id"]
    assert upstream_calls(emulator) - before == 1

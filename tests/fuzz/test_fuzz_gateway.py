"""The fuzz suite (issue 12): schemathesis drives every operation of the live gateway's own
``/openapi.json`` (valid and invalid data), and Hypothesis throws arbitrary JSON bodies and
headers at the OpenAI routes.  Target: no answer of 500 or above, no hang (each call has a
10 s limit), at least ``FUZZ_MIN_CASES`` cases in all; the count is printed.

Behind the gateway: one emulator at ``--time-scale 0`` (instant answers), with the priority
field on, so every body is re-encoded as well as decoded.  ``TURBOGATE_FUZZ_SCALE`` multiplies
the case counts (e.g. 10 for a long run by hand)."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.gateway.conftest import ADMIN, KEY, MODEL, admin_state, gateway_config, pool
from turbogate.procs import Service, start_emulator, start_gateway

SCALE = float(os.environ.get("TURBOGATE_FUZZ_SCALE", "1"))
FUZZ_MIN_CASES = 10_000
#: Examples per operation and generation mode: the OpenAI routes get most of them.
HEAVY = {"/v1/chat/completions": 1300, "/v1/completions": 1000, "/v1/embeddings": 700}
LIGHT = 150  # routes without parameters or body have one case: Hypothesis stops there
RAW_BODIES = 4000
TIMEOUT_S = 10.0

TALLY: Counter[str] = Counter()  # "cases", "5xx", "hangs"
FAILURES: list[str] = []
#: Set by the ``gw`` fixture: what a hang's report shows of the gateway (its state then, its log).
SERVICES: dict[str, Service] = {}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    logs = Path(tmp_path_factory.mktemp("fuzz"))
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--scheduling-policy", "priority", log_dir=logs)
    config = logs / "gateway.yaml"
    config.write_text(yaml.safe_dump(gateway_config(
        [pool("main", [MODEL], [emu.url], max_concurrency=64, scheduling_policy="priority")],
        limits={"max_tokens": 2048, "header_timeout_s": 5.0, "body_timeout_s": 5.0})))
    try:
        with start_gateway(config, "--log-level", "warning", log_dir=logs) as gateway:
            SERVICES.update(gateway=gateway, emulator=emu)
            yield gateway
    finally:
        SERVICES.clear()
        emu.stop()


def _settings(n: int) -> settings:
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None,
                    phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))


def _hang_report(sent: str) -> str:
    """What a hang's failure shows: the request, the gateway's queues and replicas right after,
    and the last lines of both logs, so a hang seen once in CI can be understood from its report."""
    parts = [f"sent: {sent[:600]}"]
    gateway = SERVICES.get("gateway")
    if gateway is not None:
        try:
            state = admin_state(gateway.url)
            parts.append("gateway state then: " + json.dumps({k: state.get(k) for k in ("pools", "replicas")})[:3000])
        except OSError as exc:  # (urllib's errors are OSErrors)
            parts.append(f"gateway state then: unreadable ({exc!r})")
    for name, svc in SERVICES.items():
        parts.append(f"{name} log tail:\n" + "\n".join(svc.log_text().splitlines()[-25:]))
    return "\n".join(parts)


def _record(label: str, call: Callable[[], int], sent: Callable[[], str] = lambda: "") -> None:
    TALLY["cases"] += 1
    try:
        status = call()
    except (requests.Timeout, httpx.TimeoutException):
        TALLY["hangs"] += 1
        FAILURES.append(f"{label}: no answer within {TIMEOUT_S}s\n{_hang_report(sent())}")
        return
    if status >= 500:
        TALLY["5xx"] += 1
        FAILURES.append(f"{label}: HTTP {status}")


def _fail_on_failures() -> None:
    """Fail with the reports whole (an assertion's message would be cut short)."""
    if FAILURES:
        pytest.fail(f"{len(FAILURES)} failures; the first:\n\n" + "\n\n".join(FAILURES[:5]), pytrace=False)


def _operations(gw: Service) -> list[Any]:
    doc = httpx.get(gw.url + "/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(doc)
    return [result.ok() for result in schema.get_all_operations()]


def test_openapi_document_lists_the_routes(gw: Service) -> None:
    paths = {op.path for op in _operations(gw)}
    assert {"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models", "/health", "/ready",
            "/metrics", "/openapi.json", "/admin/state", "/admin/tiers/{tier}"} <= paths


def _fuzz_operation(gw: Service, session: requests.Session, op: Any, mode: GenerationMode) -> None:
    headers = {"Authorization": f"Bearer {ADMIN if op.path.startswith('/admin/') else KEY}"}
    label = f"{op.method.upper()} {op.path} ({mode.value})"

    @_settings(HEAVY.get(op.path, LIGHT))
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: Any) -> None:
        _record(label, lambda: case.call(base_url=gw.url, session=session, headers=headers,
                                         timeout=TIMEOUT_S).status_code,
                lambda: f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r}")

    try:
        run()
    except Unsatisfiable:  # nothing to make invalid (no parameters, no body): the positive run covers it
        assert mode is GenerationMode.NEGATIVE, label


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE], ids=lambda m: m.value)
def test_schemathesis_every_operation(gw: Service, mode: GenerationMode) -> None:
    session = requests.Session()
    for op in _operations(gw):
        _fuzz_operation(gw, session, op, mode)
    _fail_on_failures()


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=30)
_field_values = st.one_of(_json, st.integers(min_value=-(2**64), max_value=2**64), st.sampled_from(
    ["turbo", "priority", "flex", "relax", "default", "auto", "", "\x00", "Turbo"]))
_bodies = st.one_of(
    st.fixed_dictionaries({"model": st.sampled_from([MODEL, "", "nope"]) | _json}, optional={
        "messages": st.lists(st.fixed_dictionaries({"role": st.text(max_size=10), "content": _json}), max_size=3)
        | _json,
        "prompt": _json, "input": _json, "max_tokens": _field_values, "max_completion_tokens": _field_values,
        "service_tier": _field_values, "stream": _field_values, "priority": _field_values,
    }).map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=300),
    st.integers(min_value=1, max_value=1100).map(lambda n: b'{"model":"%s","messages":[{"role":"user","content":"x"}],'
                                                  b'"service_tier":"turbo","x":' % MODEL.encode() + b"[" * n
                                                  + b"]" * n + b"}"),
)
_headers = st.fixed_dictionaries({}, optional={
    "x-turbogate-tier": st.from_regex(r"[!-~]{1,12}", fullmatch=True),
    "content-type": st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]),
})


def test_hypothesis_bodies_on_the_openai_routes(gw: Service) -> None:
    with httpx.Client(base_url=gw.url, timeout=TIMEOUT_S) as client:
        @_settings(RAW_BODIES)
        @given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions", "/v1/embeddings"]),
               body=_bodies, headers=_headers, auth=st.sampled_from([KEY, KEY, KEY, "wrong", None]))
        def run(path: str, body: bytes, headers: dict[str, str], auth: str | None) -> None:
            all_headers = headers if auth is None else {**headers, "Authorization": f"Bearer {auth}"}
            _record(f"POST {path} {body[:80]!r}",
                    lambda: client.post(path, content=body, headers=all_headers).status_code,
                    lambda: f"POST {path} headers={headers!r} body={body!r}")

        run()
    _fail_on_failures()


def test_fuzz_totals(capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nfuzz: {TALLY['cases']} cases, {TALLY['5xx']} answers >= 500, {TALLY['hangs']} hangs")
    _fail_on_failures()
    assert TALLY["5xx"] == 0 and TALLY["hangs"] == 0
    assert TALLY["cases"] >= FUZZ_MIN_CASES * min(SCALE, 1.0)

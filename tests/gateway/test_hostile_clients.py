"""Hostile and unlucky clients against a real gateway (issue 12, items 1, 3, 5, 7): header size
and read timeouts before any key is checked, protocol errors in the OpenAI shape, deep JSON,
large admin bodies, wrong methods, max_tokens above the context."""

from __future__ import annotations

import select
import signal
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.gateway.conftest import ADMIN, KEY, MODEL, gateway_config, pool
from turbogate.procs import Service, start_emulator

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory,
       gateway_factory: Callable[[dict[str, Any]], Service]) -> Iterator[Service]:
    emu = start_emulator("--time-scale", "0", "--model", MODEL, "--scheduling-policy", "priority",
                         log_dir=Path(tmp_path_factory.mktemp("emu")))
    try:
        yield gateway_factory(gateway_config(
            [pool("main", [MODEL], [emu.url], scheduling_policy="priority")],
            limits={"header_timeout_s": 1.0, "body_timeout_s": 1.0, "max_tokens": 8192}))
    finally:
        emu.stop()


def _connect(gw: Service) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    return sock


def _read_answer(sock: socket.socket, timeout: float = 10.0) -> bytes:
    """Everything the server sends until it closes (or ``timeout``: then what came so far)."""
    sock.settimeout(timeout)
    chunks = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _status_and_error(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), f"no HTTP answer: {raw[:200]!r}"
    return int(head.split()[1]), orjson.loads(body)["error"]


def _interim_answer(sock: socket.socket) -> bytes:
    """The interim answer to ``Expect: 100-continue`` (up to its blank line)."""
    interim = b""
    while b"\r\n\r\n" not in interim:
        chunk = sock.recv(65536)
        assert chunk, "closed before the interim answer"
        interim += chunk
    return interim


def _send_until_answered(sock: socket.socket, chunks: Iterator[bytes]) -> None:
    """Send ``chunks`` one by one, stopping as soon as the server answers or closes."""
    for chunk in chunks:
        readable, _, _ = select.select([sock], [], [], 0.05)
        if readable:
            return
        try:
            sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return


def test_unfinished_huge_header_is_refused_at_the_limit(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-big: "
        _send_until_answered(sock, iter([head] + [b"a" * 16384] * 64))  # 1 MiB of one header, never finished
        status, err = _status_and_error(_read_answer(sock))
    assert status == 431
    assert err["code"] == "headers_too_large"


def test_complete_request_with_a_huge_header_is_refused(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nx-big: " + b"a" * (96 * 1024) + b"\r\n\r\n")
        status, err = _status_and_error(_read_answer(sock))
    assert status == 431 and err["type"] == "invalid_request_error"


def test_headers_that_never_finish_time_out(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")  # and nothing more
        status, err = _status_and_error(_read_answer(sock))
    assert (status, err["code"]) == (408, "request_timeout")


def test_a_silent_connection_is_closed(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        sock.settimeout(10)
        assert sock.recv(1) == b""  # closed by the server, without an answer (nothing was asked)


def test_content_length_larger_than_the_body_times_out(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer " + KEY.encode()
                     + b"\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"model\":")
        status, err = _status_and_error(_read_answer(sock))
    assert (status, err["code"]) == (408, "request_timeout")


def test_invalid_http_is_an_openai_error_body(gw: Service) -> None:
    sock = _connect(gw)
    with sock:
        sock.sendall(b"GET / HTTP/1.1\r\nbad header line\r\n\r\n")
        status, err = _status_and_error(_read_answer(sock))
    assert status == 400 and err["type"] == "invalid_request_error" and err["code"] == "invalid_http"


def test_the_gateway_still_serves_after_the_hostile_clients(gw: Service) -> None:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0) as client:
        out = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)  # type: ignore[arg-type]
    assert out.choices[0].message.content


@pytest.mark.parametrize("path", ["/v1/models", "/metrics", "/health", "/ready", "/openapi.json"])
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
def test_wrong_method_on_a_get_route_is_405(gw: Service, path: str, method: str) -> None:
    resp = httpx.request(method, gw.url + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert resp.status_code == 405
    assert "GET" in resp.headers["allow"]
    assert resp.json()["error"]["code"] == "method_not_allowed"


@pytest.mark.parametrize("extra", [{"service_tier": "turbo"}, {}])
def test_json_nested_past_the_encoder_limit_is_400_not_500(gw: Service, extra: dict[str, Any]) -> None:
    # The pool passes priority, so the gateway re-encodes every body; service_tier makes it too.
    deep = b"[" * 300 + b"]" * 300
    body = orjson.dumps({"model": MODEL, "messages": MSG, "max_tokens": 2, **extra})[:-1] + b',"x":' + deep + b"}"
    resp = httpx.post(gw.url + "/v1/chat/completions", content=body, timeout=10,
                      headers={"Authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert resp.status_code == 400
    assert resp.json()["error"]["code"] == "invalid_json"


def test_admin_body_over_its_limit_is_413_json(gw: Service) -> None:
    resp = httpx.post(gw.url + "/admin/tiers/turbo", content=b'{"enabled": true, "x": "' + b"a" * 70000 + b'"}',
                      headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert resp.status_code == 413
    assert resp.json()["error"]["code"] == "body_too_large"


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_max_tokens_above_the_context_is_400_naming_the_field(gw: Service, field: str) -> None:
    with openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0) as client, \
            pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=MODEL, messages=MSG,  # type: ignore[arg-type]
                                       extra_body={field: 18446744073709551615})
    assert err.value.param == field  # type: ignore[attr-defined]


def test_header_names_in_any_case_trailing_whitespace_and_expect_100_continue(gw: Service) -> None:
    """The protocol normalises headers as uvicorn does (names lower-cased, a value's trailing
    whitespace dropped) and answers ``Expect: 100-continue`` before the body is sent."""
    body = orjson.dumps({"model": MODEL, "messages": MSG, "max_tokens": 2})
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAUTHORIZATION: Bearer %s \t\r\n"
            b"Content-Type: application/json\r\nX-TurboGate-Tier: relax\r\nX-Session-ID: chat-1 \t\r\n"
            b"Expect: 100-Continue\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (KEY.encode(), len(body)))
    with _connect(gw) as sock:
        sock.sendall(head)
        assert _interim_answer(sock) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        raw = _read_answer(sock)
    answer_head, _, payload = raw.partition(b"\r\n\r\n")
    assert answer_head.startswith(b"HTTP/1.1 200 "), raw[:300]
    assert b"\r\nx-turbogate-tier: relax\r\n" in answer_head
    assert orjson.loads(payload)["object"] == "chat.completion"


def test_a_body_sent_while_the_gateway_was_stopped_is_read_not_timed_out(gw: Service) -> None:
    """A gateway stopped past its body timeout (a starved or paused process) reads the body that
    came during the stop: its first sweep afterwards runs before the sockets are read, and must not
    take the unread body for a stalled one (it answered 408 before the sweeper deferred a late sweep)."""
    body = orjson.dumps({"model": MODEL, "messages": MSG, "max_tokens": 2})
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer %s\r\n"
            b"content-type: application/json\r\nexpect: 100-continue\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % (KEY.encode(), len(body)))
    with _connect(gw) as sock:
        sock.sendall(head)
        _interim_answer(sock)  # the gateway now waits for the body, its timeout running
        gw.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(1.6)  # the stop: longer than the 1-s body timeout and a sweep period
            sock.sendall(body)
            time.sleep(0.3)
        finally:
            gw.process.send_signal(signal.SIGCONT)
        raw = _read_answer(sock)
    assert raw.partition(b"\r\n")[0].startswith(b"HTTP/1.1 200 "), raw[:300]

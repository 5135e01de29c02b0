"""HTTP conformance on a real gateway (issue 43, point 6 and 4): a 405 with ``Allow`` on every
route's wrong methods (the admin GET routes included), one body limit with an OpenAI error body
on every route, an engine's error with an integer ``code`` answered in the gateway's own error
schema, and every route in ``/openapi.json``; and schemathesis over that document with its
conformance checks (the CLI, ``st run``, as a user runs it; its JUnit report is read for failures,
a schemathesis-internal error apart).  Its ``--checks`` leave out the data checks
(positive_data_acceptance, negative_data_rejection): the request schemas describe what the
gateway itself checks, and other fields pass through to the engine, which may refuse them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import yaml

from tests.gateway.conftest import ADMIN, KEY, MODEL, gateway_config, pool
from turbogate.procs import Service, start_emulator, start_gateway

MAX_BODY = 65536
MSG = [{"role": "user", "content": "hi"}]


def call(url: str, method: str, path: str, token: str = KEY, body: bytes | None = None) -> tuple[int, Any, bytes]:
    req = urllib.request.Request(url + path, data=body, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def assert_error_schema(body: bytes) -> dict[str, Any]:
    """The gateway's error schema (openapi.py's ``Error``): message and type strings, param and code string or null."""
    error: dict[str, Any] = orjson.loads(body)["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    assert error.get("param") is None or isinstance(error["param"], str)
    assert error.get("code") is None or isinstance(error["code"], str)
    return error


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    logs = tmp_path_factory.mktemp("conformance")
    emu = start_emulator("--time-scale", "0", "--model", MODEL, log_dir=logs)
    config = logs / "gw.yaml"
    config.write_text(yaml.safe_dump(gateway_config(
        [pool("main", [MODEL], [emu.url], knee_rps=1000.0)], limits={"max_body_bytes": MAX_BODY})))
    try:
        with start_gateway(config, log_dir=logs) as gateway:
            yield gateway
    finally:
        emu.stop()


WRONG_METHODS = [  # (method, path, token, the Allow the answer must carry)
    ("GET", "/v1/chat/completions", KEY, "POST"),
    ("PUT", "/v1/embeddings", KEY, "POST"),
    ("POST", "/health", KEY, "GET, HEAD"),
    ("DELETE", "/openapi.json", KEY, "GET, HEAD"),
    ("POST", "/v1/usage", KEY, "GET, HEAD"),
    ("POST", "/admin/state", ADMIN, "GET"),
    ("DELETE", "/admin/events", ADMIN, "GET"),
    ("GET", "/admin/tiers/turbo", ADMIN, "POST"),
    ("GET", "/admin/tenants/acme", ADMIN, "POST"),
    ("GET", "/admin/pools/main/guard", ADMIN, "POST"),
    ("POST", "/admin/usage", ADMIN, "GET, HEAD"),
    ("DELETE", "/admin/budgets", ADMIN, "GET, HEAD"),
    ("GET", "/admin/budgets/acme", ADMIN, "POST, PUT"),
    ("GET", "/v1/jobs", KEY, "POST"),
    ("POST", "/v1/jobs/job_x", KEY, "GET, DELETE"),
    ("GET", "/v1/turbo/leases", KEY, "POST"),
    ("POST", "/v1/turbo/leases/lease_x", KEY, "GET"),
    ("GET", "/v1/turbo/leases/lease_x/heartbeat", KEY, "POST"),
    ("POST", "/v1/turbo/leases/lease_x/ws", KEY, "GET"),
]


@pytest.mark.parametrize(("method", "path", "token", "allow"), WRONG_METHODS,
                         ids=[f"{m} {p}" for m, p, *_ in WRONG_METHODS])
def test_wrong_method_is_405_with_allow(gw: Service, method: str, path: str, token: str, allow: str) -> None:
    status, headers, body = call(gw.url, method, path, token, b"{}" if method in ("POST", "PUT") else None)
    assert status == 405, (status, body)
    assert headers["Allow"] == allow
    assert assert_error_schema(body)["code"] == "method_not_allowed"


def test_unknown_admin_route_is_404(gw: Service) -> None:
    status, _, body = call(gw.url, "GET", "/admin/nothing", ADMIN)
    assert status == 404 and assert_error_schema(body)["code"] == "not_found"


BODY_ROUTES = ["/v1/chat/completions", "/v1/jobs", "/v1/turbo/leases/lease_x/heartbeat", "/admin/tiers/turbo",
               "/admin/tenants/acme", "/admin/pools/main/guard", "/admin/budgets/acme"]


@pytest.mark.parametrize("path", BODY_ROUTES)
def test_one_body_limit_on_every_route(gw: Service, path: str) -> None:
    token = ADMIN if path.startswith("/admin/") else KEY
    over = b'{"x":"' + b"a" * (MAX_BODY + 5000) + b'"}'  # 70 KB, the probe's size
    status, headers, body = call(gw.url, "POST", path, token, over)
    assert status == 413, (status, body)
    assert headers["Content-Type"] == "application/json"
    error = assert_error_schema(body)
    assert error["code"] == "body_too_large" and str(MAX_BODY) in error["message"]


def test_budget_body_under_the_limit_still_works(gw: Service) -> None:
    status, _, body = call(gw.url, "POST", "/admin/budgets/acme", ADMIN,
                           orjson.dumps({"turbo_budget_units": 5.0, "period": "day"}))
    assert status == 200, body


def test_plain_get_on_the_websocket_route_is_426(gw: Service) -> None:
    status, headers, body = call(gw.url, "GET", "/v1/turbo/leases/lease_x/ws")
    assert status == 426 and headers["Upgrade"] == "websocket"
    assert_error_schema(body)


def test_openapi_lists_every_route(gw: Service) -> None:
    status, _, body = call(gw.url, "GET", "/openapi.json")
    paths = orjson.loads(body)["paths"]
    assert status == 200
    for path in ("/admin/events", "/admin/pools/{pool}/guard", "/v1/turbo/leases/{id}/ws", "/admin/state",
                 "/admin/budgets/{tenant}", "/v1/jobs/{id}", "/v1/turbo/leases/{id}/heartbeat"):
        assert path in paths, path
    assert set(paths["/admin/budgets/{tenant}"]) == {"post", "put"}  # the methods its 405 advertises


# ---- an engine's own error shapes -------------------------------------------------------------
ENGINE_ERRORS: dict[str, tuple[int, bytes, str]] = {  # model → (status, the engine's body, content type)
    "vllm-flat": (400, b'{"object":"error","message":"max_tokens is too large","type":"BadRequestError",'
                       b'"param":"max_tokens","code":400}', "application/json"),
    "openai-int": (400, b'{"error":{"message":"bad","type":"invalid_request_error","param":null,"code":400}}',
                   "application/json"),
    "fastapi": (422, b'{"detail":[{"loc":["body","messages"],"msg":"field required"}]}', "application/json"),
    "text": (503, b"Service Unavailable", "text/plain"),
}


class _EngineWithErrors(BaseHTTPRequestHandler):
    """An engine that answers every completion with the error its ``model`` names (vLLM's flat shape
    with an integer code, OpenAI's shape with an integer code, FastAPI's, plain text)."""

    def do_GET(self) -> None:
        self._answer(200, b'{"status":"ok"}', "application/json")

    def do_POST(self) -> None:
        body = orjson.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(*ENGINE_ERRORS[body["model"]])

    def _answer(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_engine_errors_are_normalised(tmp_path: Path) -> None:
    engine = ThreadingHTTPServer(("127.0.0.1", 0), _EngineWithErrors)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{engine.server_address[1]}"
    models = list(ENGINE_ERRORS)
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(gateway_config([{
        "name": "errs", "models": models, "replicas": [{"url": url, "engine": "openai"}]}])))
    try:
        with start_gateway(config, log_dir=tmp_path / "logs") as gw:
            for model, (status, _, _) in ENGINE_ERRORS.items():
                got, headers, body = call(gw.url, "POST", "/v1/chat/completions", KEY,
                                          orjson.dumps({"model": model, "messages": MSG}))
                if got == status:  # (a 503 may be retried and answered by the gateway's own 503: same schema)
                    assert headers["Content-Type"] == "application/json"
                error = assert_error_schema(body)
                if model == "vllm-flat":
                    assert error == {"message": "max_tokens is too large", "type": "BadRequestError",
                                     "param": "max_tokens", "code": "400"}
                if model == "openai-int":
                    assert got == 400 and error["code"] == "400"
            client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
            with pytest.raises(openai.BadRequestError) as caught:  # the SDK parses it as it would OpenAI's
                client.chat.completions.create(model="vllm-flat", messages=MSG)  # type: ignore[arg-type]
            assert caught.value.code == "400" and caught.value.param == "max_tokens"
    finally:
        engine.shutdown()


# ---- schemathesis ------------------------------------------------------------------------------
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,"
          "response_schema_conformance,unsupported_method,allow_header_conformance,missing_required_header")
EXAMPLES = int(30 * float(os.environ.get("TURBOGATE_FUZZ_SCALE", "1")))


def _run(gw: Service, tmp: Path, token: str, paths: str, exclude: bool, checks: str = CHECKS) -> tuple[list[str], int]:
    report = tmp / "junit.xml"
    st = Path(sys.executable).with_name("st")
    out = subprocess.run(
        [str(st), "run", gw.url + "/openapi.json", "-H", f"Authorization: Bearer {token}",
         "--exclude-path-regex" if exclude else "--include-path-regex", paths, "-n", str(EXAMPLES),
         "--checks", checks, "--phases", "examples,coverage,fuzzing", "-w", "1", "--no-color", "--seed", "43",
         "--request-timeout", "10", "--report", "junit", "--report-junit-path", str(report)],
        capture_output=True, text=True, timeout=540, cwd=tmp)  # (its .schemathesis/ cache goes there)
    assert report.exists(), out.stdout[-3000:] + out.stderr[-2000:]
    failures = []
    cases = 0
    for case in ET.parse(report).getroot().iter("testcase"):
        cases += 1
        for failure in case.iter("failure"):
            failures.append(f"{case.get('name')}: {failure.get('message') or ''}\n{(failure.text or '')[:1500]}")
    return failures, cases


def test_schemathesis_reports_no_conformance_failure(gw: Service, tmp_path: Path) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "admin").mkdir()
    api, api_ops = _run(gw, tmp_path / "api", KEY, "^/admin", exclude=True)
    admin, admin_ops = _run(gw, tmp_path / "admin", ADMIN, "^/admin", exclude=False)
    print(f"\nschemathesis: {api_ops} API and {admin_ops} admin operations, {len(api) + len(admin)} failures")
    assert api_ops >= 10 and admin_ops >= 8  # every operation was run
    assert not api and not admin, "\n\n".join((api + admin)[:5])

"""Real engines for the tests in this folder: vLLM on CPU and llama.cpp, each from its own virtual
environment (``scripts/real_engines.sh install``), serving a tiny random model written at test time.

Without the environments these tests skip, unless ``TURBOGATE_REAL_ENGINES=required`` (set by
``.ci/run`` and ``scripts/real_engines.sh test``): then a missing engine fails them.  Each engine starts
once per session (vLLM takes a minute or more to be ready on 2 busy cores) and is torn down at the end.
"""

from __future__ import annotations

import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conftest import ADMIN, admin_state, gateways
from turbogate.config import hash_key
from turbogate.procs import Service
from turbogate.realengines import engine_env, make_tiny_model, start_llamacpp, start_vllm, stop_group

KEY = "sk-real-test"
# One engine serves every vLLM test: 4 sequences at once, so a queue forms inside it with a few requests.
VLLM_MAX_NUM_SEQS = 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the real-engine tests and run them last: in CI their engines install in the background
    while the rest of the suite runs (.ci/run)."""
    here = Path(__file__).parent
    real = []
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real_engine)
            item.add_marker(pytest.mark.timeout(INSTALL_WAIT_S + 900))
            real.append(item)
    if real:
        chosen = set(map(id, real))
        items[:] = [i for i in items if id(i) not in chosen] + real


#: Longest wait for a background install (.ci/run) before the first real-engine test gives up.
INSTALL_WAIT_S = 2400.0


def _wait_for_install() -> None:
    """When .ci/run installs the engines in the background, wait for it; a failed install fails
    the tests with the installer's one loud line."""
    log = os.environ.get("TURBOGATE_REAL_ENGINES_INSTALL_LOG")
    if not log:
        return
    rc_file = Path(log + ".rc")
    deadline = time.monotonic() + INSTALL_WAIT_S
    while not rc_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the real-engine install has not finished after {INSTALL_WAIT_S:.0f} s (log: {log})")
        time.sleep(2.0)
    if rc_file.read_text().strip() != "0":
        text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
        loud = [line for line in text.splitlines() if "REAL-ENGINE INSTALL FAILED" in line]
        pytest.fail(loud[-1] if loud else f"the real-engine install failed (log: {log})")


def _require(name: str) -> None:
    _wait_for_install()
    env = engine_env(name)
    if env.installed:
        return
    why = f"{name} is not installed in {env.venv} (run: bash scripts/real_engines.sh install)"
    if os.environ.get("TURBOGATE_REAL_ENGINES") == "required":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="session")
def real_scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("real-engines")


class _Attached:
    """Stands in for the Popen of an engine this session did not start (TURBOGATE_REAL_VLLM_PID=pid:port)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def poll(self) -> None:
        return None

    def wait(self, timeout: float | None = None) -> int:
        return 0


@dataclass
class RealEngine:
    """A real engine the tests may kill and start again on the same port."""

    start: Callable[[int | None], Service]
    service: Service
    port: int = field(init=False)

    def __post_init__(self) -> None:
        self.port = self.service.port

    @property
    def url(self) -> str:
        return self.service.url

    def kill(self) -> None:
        stop_group(self.service, hard=True)

    def restart(self) -> None:
        self.service = self.start(self.port)


@pytest.fixture(scope="session")
def vllm_engine(real_scratch: Path) -> Iterator[RealEngine]:
    attach = os.environ.get("TURBOGATE_REAL_VLLM_PID")
    if attach:  # development: reuse a running engine (pid:port:log of realengines.start_vllm(inspectable=True))
        pid, port, log = attach.split(":", 2)
        yield RealEngine(lambda _port: pytest.skip("attached engine: not restarted"),
                         Service("vllm", f"http://127.0.0.1:{port}", _Attached(int(pid)),  # type: ignore[arg-type]
                                 Path(log)))
        return
    _require("vllm")
    model = make_tiny_model(engine_env("vllm"), real_scratch)

    def start(port: int | None) -> Service:
        # inspectable: the queue tests freeze the engine and read its log (test_vllm.py).
        return start_vllm(model, real_scratch, port=port, max_num_seqs=VLLM_MAX_NUM_SEQS, inspectable=True)

    engine = RealEngine(start, start(None))
    yield engine
    stop_group(engine.service)


@pytest.fixture(scope="session")
def llamacpp_engine(real_scratch: Path) -> Iterator[Service]:
    _require("llamacpp")
    model = make_tiny_model(engine_env("llamacpp"), real_scratch)
    service = start_llamacpp(model, real_scratch)
    yield service
    stop_group(service)


def gateway_yaml(replicas: list[dict[str, Any]], model: str, **pool: Any) -> dict[str, Any]:
    return {
        "admin": {"token_sha256": hash_key(ADMIN)},
        "tenants": [{"name": "acme", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
        "pools": [{"name": "real", "models": [model], "replicas": replicas, **pool}],
        # Scrapes and health probes (which share the scrape timeout) get 10 s: vLLM's API server on a busy
        # 2-core machine answered /metrics after up to 7 s, and two probes timing out eject a healthy engine.  A
        # killed engine refuses connections at once, so ejection is not slower for it.
        "scrape": {"interval_s": 0.2, "stale_after_s": 15.0, "timeout_s": 10.0},
        "health": {"interval_s": 0.2, "eject_after_failures": 2, "probe_backoff_s": 0.2, "probe_backoff_max_s": 1.0},
        "service_tier_names": "openai",  # answers say the tier in the words the client asked it (priority, …)
        # A loopback connect only times out when the gateway itself got no CPU for that long (a busy 2-core
        # machine); the default 2 s would then eject a healthy engine as refusing connections.
        "limits": {"upstream_connect_timeout_s": 30.0},
    }


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Service]]:
    with gateways(tmp_path) as make:
        yield make


def only_replica(url: str) -> dict[str, Any]:
    replicas = admin_state(url)["replicas"]
    assert len(replicas) == 1
    replica: dict[str, Any] = replicas[0]
    return replica


def metrics_text(engine_url: str) -> str:
    with urllib.request.urlopen(engine_url + "/metrics", timeout=5) as resp:
        return str(resp.read().decode())

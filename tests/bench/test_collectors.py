"""Collector parsing: Prometheus text through prometheus_client, --metrics validation, the NVML notice."""

from __future__ import annotations

import importlib.util
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import aiohttp
import pytest

from turbogate.bench import collectors as collectors_module
from turbogate.bench.collectors import GPU_NOTICE, Collectors, Nvml, parse_metrics_option, parse_prometheus
from turbogate.results.schema import Sample

PAGE = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3.0
# HELP vllm:e2e_request_latency_seconds E2E.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.5",model_name="m"} 2.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0
vllm:e2e_request_latency_seconds_sum{model_name="m"} 3.5
vllm:e2e_request_latency_seconds_count{model_name="m"} 4.0
# HELP turbogate_queue_depth Waiting.
# TYPE turbogate_queue_depth gauge
turbogate_queue_depth{pool="p",tier="turbo"} 1.0
turbogate_queue_depth{pool="p",tier="standard"} 7.0
"""


def test_parse_prometheus_keeps_series_and_drops_buckets() -> None:
    samples = parse_prometheus(PAGE, 2.5, "http://x/metrics")
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in samples}
    assert got[("vllm:num_requests_running", (("model_name", "m"),))] == 3.0
    assert got[("vllm:e2e_request_latency_seconds_count", (("model_name", "m"),))] == 4.0
    assert got[("turbogate_queue_depth", (("pool", "p"), ("tier", "standard")))] == 7.0
    assert not any(s.name.endswith("_bucket") for s in samples)
    assert all(s.t == 2.5 and s.source == "http://x/metrics" for s in samples)


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


async def test_pages_are_parsed_after_the_run_not_on_the_loads_event_loop(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The parser is pure Python and shares the event loop that reads the load's streams: the
    collector keeps each page as it came and parses them all in ``stop``, each at its own time."""
    parsed: list[float] = []

    def counting_parse(text: str, t: float, source: str) -> list[Sample]:
        parsed.append(t)
        return parse_prometheus(text, t, source)

    monkeypatch.setattr(collectors_module, "parse_prometheus", counting_parse)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    clock = iter([1.0, 1.0, 2.0, 2.0, 3.0, 3.0])
    try:
        async with aiohttp.ClientSession() as session:
            collectors = Collectors(session, [url], lambda: next(clock))
            await collectors.sample_once()
            await collectors.sample_once()
            assert parsed == [] and collectors.samples == []  # nothing parsed while the load runs
            await collectors.stop()
    finally:
        server.shutdown()
        server.server_close()
    assert parsed == [1.0, 2.0, 3.0]
    running = [s for s in collectors.samples if s.name == "vllm:num_requests_running"]
    assert [s.t for s in running] == [1.0, 2.0, 3.0] and all(s.value == 3.0 for s in running)
    assert [s.t for s in collectors.samples] == sorted(s.t for s in collectors.samples)
    assert collectors.errors == {}


def test_metrics_option() -> None:
    assert parse_metrics_option("gpu-util, p95-latency") == ["gpu-util", "p95-latency"]
    assert parse_metrics_option(None) == []
    with pytest.raises(ValueError, match="--metrics: unknown vram"):
        parse_metrics_option("gpu-util,vram")


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None and shutil.which("nvidia-smi") is not None,
                    reason="an NVIDIA GPU with NVML is present here")
def test_nvml_absent_gives_the_one_line_notice() -> None:
    nvml, msg = Nvml.open()
    assert nvml is None
    assert msg.startswith(GPU_NOTICE[:40]) and "\n" not in msg


def test_a_bench_run_samples_the_emulators_dcgm_gauges(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The emulator's DCGM gauges (engine/busy.py) reach a bench run's samples.jsonl through the
    collectors, as dcgm-exporter's would with ``--scrape http://gpu-host:9400/metrics``."""
    import subprocess
    import sys

    from turbogate.procs import start_emulator
    from turbogate.results import load_run

    svc = start_emulator("--time-scale", "0", "--model", "llama-3.2-1b", "--gpu", "L4", log_dir=tmp_path / "logs")
    try:
        out = tmp_path / "run"
        cmd = [sys.executable, "-c", "from turbogate.bench.cli import turbo_bench_main; turbo_bench_main()",
               "--host", svc.url, "--qps", "10", "--duration", "3", "--prompt-tokens", "2000",
               "--output-tokens", "64", "--scrape", svc.url + "/metrics", "--no-live", "--out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    finally:
        svc.stop()
    samples = [s for s in load_run(out).samples if s.name.startswith("DCGM_")]
    names = {s.name for s in samples}
    assert names == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                     "DCGM_FI_PROF_DRAM_ACTIVE"}
    assert all(s.labels.get("gpu") == "0" and s.source == svc.url + "/metrics" for s in samples)
    ratios = [s for s in samples if s.name.startswith("DCGM_FI_PROF_")]
    assert all(0.0 <= s.value <= 1.0 for s in ratios)
    assert max(s.value for s in ratios if s.name == "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE") > 0.0
    assert max(s.value for s in ratios if s.name == "DCGM_FI_PROF_DRAM_ACTIVE") > 0.0

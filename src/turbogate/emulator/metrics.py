"""Prometheus metrics under vLLM's names, read from the engine at scrape time.

Gauges and token counters come from ``Engine.stats()`` through a collector (nothing to update
per step); latency histograms are observed per request by the runner.  Histogram buckets are
vLLM's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from turbogate.engine import Engine
from turbogate.engine.busy import BusyWindow
from turbogate.sched.load import DCGM_DRAM_ACTIVE, DCGM_GPU_UTIL, DCGM_SM_ACTIVE, DCGM_TENSOR_ACTIVE

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)


#: dcgm-exporter's labels of a GPU's series (``Hostname`` and the Kubernetes ones left out).
DCGM_LABELS = ["gpu", "UUID", "device", "modelName"]


class _EngineCollector(Collector):
    def __init__(self, engine: Engine, model_name: str) -> None:
        self._engine = engine
        self._model = model_name
        #: The engine's model clock (``EngineRunner.model_now``) and DCGM's averaging window on it; the
        #: DCGM gauges are exported once both are set (``EmulatorMetrics.use_model_clock``).
        self.model_clock: Callable[[], float] | None = None
        self.dcgm_window: BusyWindow | None = None

    def _dcgm(self) -> Iterator[Metric]:
        """DCGM's gauges of the engine's GPUs from its step model (engine/busy.py): one series per
        GPU, as dcgm-exporter writes them (tensor parallelism shares every step evenly)."""
        if self.model_clock is None or self.dcgm_window is None:
            return
        f = self.dcgm_window.read(self._engine.busy.totals(self.model_clock()))
        dep = self._engine.deployment
        gpus = [[str(i), f"GPU-turbogate-emulator-{i}", f"nvidia{i}", dep.gpu.name] for i in range(dep.tp)]
        for name, doc, value in (
                (DCGM_GPU_UTIL, "GPU utilization (in %).", 100.0 * f.gpu_util),
                (DCGM_SM_ACTIVE, "The ratio of cycles an SM has at least 1 warp assigned.", f.sm_active),
                (DCGM_TENSOR_ACTIVE, "Ratio of cycles the tensor (HMMA) pipe is active.", f.tensor_active),
                (DCGM_DRAM_ACTIVE, "Ratio of cycles the device memory interface is active sending or receiving "
                 "data.", f.dram_active)):
            g = GaugeMetricFamily(name, doc, labels=DCGM_LABELS)
            for labels in gpus:
                g.add_metric(labels, value)
            yield g

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        g = GaugeMetricFamily(name, doc, labels=["model_name"])
        g.add_metric([self._model], value)
        return g

    def _counter(self, name: str, doc: str, value: float) -> CounterMetricFamily:
        c = CounterMetricFamily(name, doc, labels=["model_name"])
        c.add_metric([self._model], value)
        return c

    def collect(self) -> Iterator[Metric]:
        s = self._engine.stats()
        yield self._gauge("vllm:num_requests_running", "Number of requests in model execution batches.", s.running)
        # As vLLM's scheduler stats: waiting as of the last schedule, not requests that just arrived.
        yield self._gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                          self._engine.waiting_gauge)
        yield self._gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
        yield self._gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", s.kv_usage)
        yield self._gauge("turbogate_emulator_kv_fragmentation",
                          "Share of free KV blocks outside the largest contiguous free run (0..1).", s.fragmentation)
        yield self._gauge("turbogate_emulator_kv_blocks_total", "KV-cache blocks of 16 tokens.", s.kv_blocks_total)
        yield self._counter("vllm:num_preemptions", "Cumulative number of preemptions from the engine.",
                            s.num_preemptions)
        yield self._counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens)
        yield self._counter("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens)
        # Each decode token observes its step, as vLLM's; one bucket (+Inf): what is read is the pace, sum ÷ count.
        itl = HistogramMetricFamily("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                    labels=["model_name"])
        itl.add_metric([self._model], buckets=[("+Inf", self._engine.itl_tokens)], sum_value=self._engine.itl_seconds)
        yield itl
        yield from self._dcgm()


class EmulatorMetrics:
    """One registry per server (tests may run several in a process)."""

    def __init__(self, engine: Engine, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._engine_collector = _EngineCollector(engine, model_name)
        self.registry.register(self._engine_collector)
        labels = ["model_name"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              labels, buckets=TTFT_BUCKETS, registry=self.registry).labels(model_name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                             labels, buckets=LATENCY_BUCKETS, registry=self.registry).labels(model_name)
        # Every completion request received, whatever its outcome: what a test counts to know how
        # many upstream calls a gateway made (vLLM itself counts only finished ones).
        requests = Counter("turbogate_emulator_requests", "Completion requests received (any outcome), by endpoint.",
                           ["model_name", "endpoint"], registry=self.registry)
        self.requests = {path: requests.labels(model_name, path)
                         for path in ("/v1/chat/completions", "/v1/completions")}
        # How far the engine ran behind its own model clock (the machine starved it of CPU): the
        # bench reads a growing total as "this machine, not the modelled fleet, was measured".
        self.behind_total = Counter("turbogate_emulator_behind_seconds",
                                    "Wall seconds the engine's steps ended later than its model clock scheduled "
                                    "(time lost for good: the clock was re-anchored).", labels,
                                    registry=self.registry).labels(model_name)
        self.behind_last = Gauge("turbogate_emulator_behind_last_step_seconds",
                                 "How late the last engine step ended against its model clock.", labels,
                                 registry=self.registry).labels(model_name)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.",
                               labels, buckets=LATENCY_BUCKETS, registry=self.registry).labels(model_name)

    def use_model_clock(self, clock: Callable[[], float], window_s: float) -> None:
        """Export DCGM's gauges, averaged over ``window_s`` of the engine's model ``clock``."""
        self._engine_collector.model_clock = clock
        self._engine_collector.dcgm_window = BusyWindow(window_s, start=clock())

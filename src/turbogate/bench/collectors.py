"""Collectors sampled once a second during a run: Prometheus endpoints, NVML, bench-side series."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from turbogate.results.schema import Sample

METRIC_CHOICES: tuple[str, ...] = ("gpu-util", "mem-fragmentation", "p95-latency")
FRAGMENTATION_NAMES = ("turbogate_emulator_kv_fragmentation", "vllm:kv_cache_fragmentation")
GPU_NOTICE = ("gpu-util: unavailable — no NVIDIA GPU/NVML found on this machine (install turbogate[gpu] on a "
              "GPU host); continuing without it.")


def parse_metrics_option(value: str | None) -> list[str]:
    if not value:
        return []
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in METRIC_CHOICES]
    if bad:
        raise ValueError(f"--metrics: unknown {', '.join(bad)}; choose from {', '.join(METRIC_CHOICES)}")
    return items


def parse_prometheus(text: str, t: float, source: str) -> list[Sample]:
    """Samples of a Prometheus text page; histogram buckets and ``_created`` series are dropped."""
    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith(("_bucket", "_created")):
                continue
            out.append(Sample(t=t, source=source, name=s.name, value=float(s.value), labels=dict(s.labels)))
    return out


class Nvml:
    """NVML through nvidia-ml-py; :meth:`open` returns None (and a reason) when there is no GPU."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml = nvml
        self._handles = handles

    @classmethod
    def open(cls) -> tuple[Nvml | None, str]:
        try:
            import pynvml
        except ImportError:
            return None, GPU_NOTICE
        try:
            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
            return None, f"{GPU_NOTICE[:-1]} ({type(exc).__name__})."
        if not handles:
            return None, GPU_NOTICE
        return cls(pynvml, handles), f"gpu-util: NVML sees {len(handles)} GPU(s)"

    def read(self, t: float) -> list[Sample]:
        n = self._nvml
        out: list[Sample] = []
        for i, h in enumerate(self._handles):
            src = f"nvml:{i}"
            with contextlib.suppress(Exception):
                u = n.nvmlDeviceGetUtilizationRates(h)
                out.append(Sample(t, src, "gpu_utilization_pct", float(u.gpu)))
                out.append(Sample(t, src, "gpu_mem_bandwidth_util_pct", float(u.memory)))
            with contextlib.suppress(Exception):
                m = n.nvmlDeviceGetMemoryInfo(h)
                out.append(Sample(t, src, "gpu_memory_used_bytes", float(m.used)))
            with contextlib.suppress(Exception):
                tx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES)
                rx = n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES)
                out.append(Sample(t, src, "gpu_pcie_tx_kBps", float(tx)))
                out.append(Sample(t, src, "gpu_pcie_rx_kBps", float(rx)))
            with contextlib.suppress(Exception):
                fields = [n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
                for name, fv in zip(("gpu_nvlink_tx_kib", "gpu_nvlink_rx_kib"),
                                    n.nvmlDeviceGetFieldValues(h, fields), strict=True):
                    if fv.nvmlReturn == 0:
                        out.append(Sample(t, src, name, float(fv.value.ullVal)))
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


class Collectors:
    """Samples every ``period`` seconds until stopped; everything lands in :attr:`samples`.

    A scraped page is kept as it came (compressed) and parsed only in :meth:`stop`: the parser is
    pure Python, a few milliseconds a page, and it shares the event loop that reads the load's
    streams, so parsing during the run delayed the first tokens the bench measures (a gateway and
    three engines scraped once a second: Turbo sent in the 25 ms before each scrape took 2-3x
    its time to first token, and a 5-s window's p95 doubled)."""

    def __init__(self, session: aiohttp.ClientSession, urls: Sequence[str], clock: Callable[[], float],
                 nvml: Nvml | None = None, bench_series: Callable[[float], list[Sample]] | None = None,
                 period: float = 1.0) -> None:
        self.session = session
        self.urls = list(dict.fromkeys(urls))
        self.clock = clock
        self.nvml = nvml
        self.bench_series = bench_series
        self.period = period
        self.samples: list[Sample] = []
        self.errors: dict[str, str] = {}
        self._pages: list[tuple[float, str, bytes]] = []  # (time, url, zlib-compressed page)
        self._tasks: list[asyncio.Task[None]] = []

    async def _scrape(self, url: str) -> None:
        t = self.clock()
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=max(0.5, self.period))) as r:
                raw = await r.read()
                if r.status != 200:
                    self.errors[url] = f"HTTP {r.status}"
                    return
            self._pages.append((t, url, zlib.compress(raw, 1)))
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.errors[url] = f"{type(exc).__name__}: {exc}"

    def _parse_pages(self) -> None:
        """Every page kept so far into :attr:`samples`, in time order with the others."""
        for t, url, page in self._pages:
            try:
                self.samples.extend(parse_prometheus(zlib.decompress(page).decode("utf-8", "replace"), t, url))
            except ValueError as exc:
                self.errors[url] = f"{type(exc).__name__}: {exc}"
        self._pages.clear()
        self.samples.sort(key=lambda s: s.t)

    def _sample_local(self) -> None:
        t = self.clock()
        if self.nvml is not None:
            self.samples.extend(self.nvml.read(t))
        if self.bench_series is not None:
            self.samples.extend(self.bench_series(t))

    async def sample_once(self) -> None:
        """One reading of everything at once (the last one, in :meth:`stop`)."""
        self._sample_local()
        await asyncio.gather(*(self._scrape(u) for u in self.urls))

    async def _every_period(self, offset: float, read: Callable[[], Awaitable[None]]) -> None:
        await asyncio.sleep(offset)
        while True:
            start = self.clock()
            await read()
            await asyncio.sleep(max(0.0, self.period - (self.clock() - start)))

    def start(self) -> None:
        """One loop per endpoint, their scrapes spread evenly over the period (as Prometheus
        spreads its targets'): scraped at once, a gateway and its engines all render their pages
        in the same few milliseconds, on the same cores as the load, and the first tokens due
        then come late."""
        async def local() -> None:
            self._sample_local()

        reads: list[Callable[[], Awaitable[None]]] = [local]
        reads += [functools.partial(self._scrape, url) for url in self.urls]
        self._tasks = [asyncio.create_task(self._every_period(i * self.period / len(reads), read))
                       for i, read in enumerate(reads)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.sample_once()  # one last reading, so short runs still have an end point
        self._parse_pages()
        if self.nvml is not None:
            self.nvml.close()

"""Background I/O: scrape each replica's ``/metrics`` and hand the result to the flow, and
health-check, time or warm up replicas when the flow asks (``Probe``, ``MeasureRtt``,
``WarmUp``).  What a result *means* (ejection, staleness, the adaptive limit) is decided in the
core (``Picker.on_scrape``/``on_probe``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client.parser import text_string_to_metric_families

from turbogate.errors import UpstreamError
from turbogate.gateway.driver import FlowDriver
from turbogate.gateway.regions import measure_rtt, warm_up
from turbogate.gateway.runtime import ReplicaIO, Runtime
from turbogate.sched import Health, Replica, ReplicaLoad, ScrapeFailed, load_from_samples
from turbogate.sched.load import FRACTION_NAMES, METRIC_NAMES, sample_key

log = logging.getLogger("turbogate.gateway")

_WANTED = tuple(sorted(METRIC_NAMES))


def samples_from_text(text: str, wanted: tuple[str, ...] = _WANTED) -> dict[str, float]:
    """Sample name → value summed over label sets (a cache-usage share: the largest; a few samples are kept
    apart by one label, ``sched.load.SPLIT_BY_LABEL``), from Prometheus text.  Only
    lines that start with a ``wanted`` name reach the parser: engines expose hundreds of
    histogram lines L2 never reads, and parsing them cost milliseconds per scrape."""
    if wanted:
        text = "\n".join(line for line in text.splitlines() if line.startswith(wanted)) + "\n"
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            value = float(sample.value)
            key = sample_key(sample.name, sample.labels)
            if key in FRACTION_NAMES:
                out[key] = max(out.get(key, value), value)
            else:
                out[key] = out.get(key, 0.0) + value
    return out


async def _get(r: ReplicaIO, path: str, timeout_s: float) -> tuple[int, bytes]:
    assert r.client is not None
    async with asyncio.timeout(timeout_s):
        resp = await r.client.request(b"GET", path)
        try:
            return resp.status, await resp.read()
        finally:
            resp.release()


async def scrape_once(rt: Runtime, r: ReplicaIO) -> ReplicaLoad | ScrapeFailed:
    """One scrape of ``r``, as the core's input: a load, or how it failed."""
    try:
        status, raw = await _get(r, r.metrics_path, rt.config.scrape.timeout_s)
    except UpstreamError as exc:
        return ScrapeFailed("connect" if exc.connect_failed else "status")
    except TimeoutError:
        return ScrapeFailed("timeout")
    if status != 200:
        return ScrapeFailed("status")
    try:
        return load_from_samples(r.engine, samples_from_text(raw.decode("utf-8", "replace")))
    except ValueError:
        return ScrapeFailed("parse")


async def probe_once(rt: Runtime, r: ReplicaIO) -> bool:
    try:
        status, _ = await _get(r, r.health_path, rt.config.scrape.timeout_s)
    except (UpstreamError, TimeoutError):
        return False
    return status == 200


class ScrapeLog:
    """Scrape failures summarized once per interval at warning level (not one line per scrape)."""

    def __init__(self, interval_s: float = 30.0) -> None:
        self.interval_s = interval_s
        self._failed: dict[str, str] = {}
        self._last = time.perf_counter()

    def note(self, replica: str, result: ReplicaLoad | ScrapeFailed) -> None:
        if isinstance(result, ScrapeFailed):
            self._failed[replica] = result.kind
        now = time.perf_counter()
        if self._failed and now - self._last >= self.interval_s:
            parts = ", ".join(f"{rid} ({kind})" for rid, kind in sorted(self._failed.items()))
            log.warning("scrape failures in the last %.0fs: %s", now - self._last, parts)
            self._failed.clear()
            self._last = now


async def scrape_all(rt: Runtime, driver: FlowDriver, notes: ScrapeLog | None = None) -> None:
    targets = [r for r in rt.replicas.values() if r.state.scraped and r.state.health is Health.HEALTHY]
    if not targets:
        return
    results = await asyncio.gather(*(scrape_once(rt, r) for r in targets))
    now = time.perf_counter()
    for r, result in zip(targets, results, strict=True):
        if notes is not None:
            notes.note(r.state.id, result)
        if not isinstance(result, ScrapeFailed):
            driver.answered.add(r.state.id)
        driver.run(rt.flow.scraped(r.state.id, result, now))


async def scrape_loop(rt: Runtime, driver: FlowDriver) -> None:
    notes = ScrapeLog()
    while True:
        await asyncio.sleep(rt.config.scrape.interval_s)
        with contextlib.suppress(Exception):
            await scrape_all(rt, driver, notes)


class ReplicaChecks:
    """What the flow asks of a replica besides requests (the driver's callbacks): a health check
    (``Probe``), a round trip (``MeasureRtt``) and a warm-up (``WarmUp``).  A replica coming back
    from ejection is scraped at once, its metrics told to the flow through ``driver``, so L2 need
    not treat it as stale for a second; ``driver`` is given once it exists (it calls these)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.driver: FlowDriver | None = None

    async def probe(self, replica: Replica) -> bool:
        rt = self.rt
        io = rt.replicas[replica.id]
        ok = await probe_once(rt, io)
        if ok and replica.health is Health.EJECTED and replica.scraped and self.driver is not None:
            result = await scrape_once(rt, io)
            self.driver.run(rt.flow.scraped(replica.id, result, time.perf_counter()))
        return ok

    async def measure_rtt(self, replica: Replica) -> float | None:
        return await measure_rtt(self.rt, self.rt.replicas[replica.id])

    async def warm_up(self, replica: Replica, model: str) -> bool:
        return await warm_up(self.rt, self.rt.replicas[replica.id], model)

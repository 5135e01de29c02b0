"""Background loops: scrape each replica's ``/metrics`` into L2, re-probe ejected replicas."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client.parser import text_string_to_metric_families

from turbogate.gateway.runtime import ReplicaRt, Runtime, pump
from turbogate.httpclient import UpstreamError
from turbogate.sched import Health, load_from_samples
from turbogate.sched.load import METRIC_NAMES

log = logging.getLogger("turbogate.gateway")


_WANTED = tuple(sorted(METRIC_NAMES))


def samples_from_text(text: str, wanted: tuple[str, ...] = _WANTED) -> dict[str, float]:
    """Sample name → value summed over label sets, from Prometheus text exposition.  Only
    lines that start with a ``wanted`` name reach the parser: engines expose hundreds of
    histogram lines L2 never reads, and parsing them cost milliseconds per scrape."""
    if wanted:
        text = "\n".join(line for line in text.splitlines() if line.startswith(wanted)) + "\n"
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    return out


async def _get(r: ReplicaRt, path: str, timeout_s: float) -> tuple[int, bytes]:
    assert r.client is not None
    async with asyncio.timeout(timeout_s):
        resp = await r.client.request(b"GET", path)
        try:
            return resp.status, await resp.read()
        finally:
            resp.release()


async def scrape_once(rt: Runtime, r: ReplicaRt) -> bool:
    picker = rt.picker
    try:
        status, raw = await _get(r, r.metrics_path, rt.config.scrape.timeout_s)
        if status != 200:
            picker.on_failure(r.state, time.perf_counter(), hard=False, dispatched=False)
            return False
        load = load_from_samples(r.engine, samples_from_text(raw.decode("utf-8", "replace")))
    except UpstreamError as exc:
        log.info("scrape of %s failed: %s", r.state.id, exc)
        picker.on_failure(r.state, time.perf_counter(), hard=exc.connect_failed, dispatched=False)
        return False
    except TimeoutError:
        # A slow /metrics under load says "busy", not "dead": the load goes stale (counted as
        # saturated) but the replica is not ejected for it.
        log.info("scrape of %s timed out", r.state.id)
        return False
    except ValueError as exc:
        log.info("scrape of %s failed: %s", r.state.id, type(exc).__name__)
        picker.on_failure(r.state, time.perf_counter(), hard=False, dispatched=False)
        return False
    picker.on_metrics(r.state, load, time.perf_counter())
    r.state.failures = 0
    return True


async def probe_once(rt: Runtime, r: ReplicaRt) -> bool:
    try:
        status, _ = await _get(r, r.health_path, rt.config.scrape.timeout_s)
    except (UpstreamError, TimeoutError):
        return False
    return status == 200


def _refresh(rt: Runtime) -> None:
    now = time.perf_counter()
    for pool in rt.pools.values():
        pool.scale_out = rt.picker.scale_out_desired(pool.name, now)
        pump(pool, rt.picker, now)


async def scrape_all(rt: Runtime) -> None:
    replicas = [
        r for p in rt.pools.values() for r in p.replicas.values()
        if r.state.scraped and r.state.health is Health.HEALTHY
    ]
    if replicas:
        await asyncio.gather(*(scrape_once(rt, r) for r in replicas))
    _refresh(rt)


async def scrape_loop(rt: Runtime) -> None:
    while True:
        await asyncio.sleep(rt.config.scrape.interval_s)
        with contextlib.suppress(Exception):
            await scrape_all(rt)


async def health_loop(rt: Runtime) -> None:
    """Re-probe ejected replicas when their backoff is due; health-check unscraped ones."""
    interval = min(rt.config.health.interval_s, 0.25)
    last_check = 0.0
    while True:
        await asyncio.sleep(interval)
        now = time.perf_counter()
        picker = rt.picker
        by_id = {r.state.id: r for p in rt.pools.values() for r in p.replicas.values()}
        for state in picker.due_probes(now):
            r = by_id[state.id]
            ok = await probe_once(rt, r)
            picker.on_probe(state, ok, time.perf_counter())
            if ok:
                log.info("replica %s is back", state.id)
                if state.scraped:
                    await scrape_once(rt, r)
        if now - last_check >= rt.config.health.interval_s:
            last_check = now
            for r in by_id.values():
                if not r.state.scraped and r.state.health is Health.HEALTHY and not await probe_once(rt, r):
                    picker.on_failure(r.state, time.perf_counter(), hard=False, dispatched=False)
        _refresh(rt)

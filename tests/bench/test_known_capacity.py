"""The knee against fleets of known capacity: 1, 2 and 4 emulated replicas (a gateway in front of more
than one), two GPU/model pairs, streaming and not, ``--find-knee`` and a linear ramp; and no knee in a
run that stays below capacity.

The reference capacity comes from driving :class:`turbogate.engine.Engine` — the very engine the
emulator runs — in virtual time: open-loop arrivals at 1.5× the closed-form rate, completions counted
over the middle half of the run (so the batch is full and requests are staggered, as under real load).
For these shapes it agrees with ``perf.saturation``'s closed form within 1 %.  Fleet capacity (wall
clock) = replicas × engine capacity / time scale; time scales keep it ≤ ~35 req/s so a 2-core CI
machine drives it without the bench lagging.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from turbogate.bench.cli import app
from turbogate.config import hash_key
from turbogate.engine import EngineConfig
from turbogate.engine.capacity import saturated_rate
from turbogate.perf import deployment, get_gpu, resolve_model, saturation
from turbogate.perf.profiles import DEFAULT_PROFILE, with_profile
from turbogate.procs import Service, start_emulator, start_gateway
from turbogate.results import ALL, Summary, load_run

KEY = "sk-known-capacity"
CHAT_FRAMING = 10  # the emulator counts a one-message chat prompt as content + 10 tokens (BOS, framing)


@dataclass(frozen=True)
class Pair:
    gpu: str
    model: str
    seqs: int
    prompt: int  # content tokens asked of the bench
    output: int

    def engine_capacity(self) -> float:
        """Requests/s one replica sustains in virtual time (the emulator's own engine at saturation)."""
        dep = with_profile(deployment(get_gpu(self.gpu), resolve_model(self.model)), DEFAULT_PROFILE)  # emulate's
        return saturated_rate(dep, EngineConfig(max_num_seqs=self.seqs), self.prompt + CHAT_FRAMING, self.output)


A = Pair("L4", "llama-3.1-8b", 8, 128, 48)  # ≈ 2.43 req/s per replica at real speed
B = Pair("L4", "llama-3.2-1b", 8, 64, 64)  # ≈ 11.1 req/s per replica at real speed


@dataclass
class Fleet:
    pair: Pair
    replicas: int
    scale: float
    url: str
    services: list[Service]

    @property
    def capacity(self) -> float:
        return self.replicas * self.pair.engine_capacity() / self.scale


def start_fleet(pair: Pair, replicas: int, scale: float, folder: Path) -> Fleet:
    logs = folder / "logs"
    emus = [start_emulator("--gpu", pair.gpu, "--model", pair.model, "--max-num-seqs", str(pair.seqs),
                           "--time-scale", str(scale), log_dir=logs) for _ in range(replicas)]
    if replicas == 1:
        return Fleet(pair, 1, scale, emus[0].url, emus)
    # Twice the engine's batch as the gateway's per-replica limit: the engines stay full, so the fleet's
    # capacity is the engines' own (the gateway's Standard holdback would otherwise cap it lower).
    cfg = {"tenants": [{"name": "t", "key_sha256": hash_key(KEY), "tiers": ["turbo", "standard", "relax"]}],
           "pools": [{"name": "p", "models": [pair.model],
                      "replicas": [{"url": e.url, "engine": "emulator", "max_concurrency": 2 * pair.seqs}
                                   for e in emus]}],
           "scrape": {"interval_s": 0.5, "stale_after_s": 3.0, "timeout_s": 1.0}}
    path = folder / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    gw = start_gateway(path, log_dir=logs)
    return Fleet(pair, replicas, scale, gw.url, [*emus, gw])


def stop(fleet: Fleet) -> None:
    for svc in reversed(fleet.services):
        svc.stop()


def bench(fleet: Fleet, out: Path, *args: str, stream: bool = True) -> Summary:
    p = fleet.pair
    res = CliRunner().invoke(app, [
        "--host", fleet.url, "--api-key", KEY, "--prompt-tokens", str(p.prompt), "--output-tokens", str(p.output),
        "--stream" if stream else "--no-stream", "--drain", "15", "--no-live", "--no-report", "--out", str(out),
        *args])
    assert res.exit_code == 0, res.output
    return load_run(out, with_samples=False).summary


def assert_knee_near(s: Summary, capacity: float) -> None:
    knee = s.knees[ALL]
    ev = knee.evidence["throughput"]
    trail = [(round(v.offered_rps, 1), round(v.value or 0, 2), v.state) for v in ev.steps]
    assert knee.verdict == "knee" and knee.value is not None, (knee.note, trail, capacity)
    print(f"knee {knee.value:.2f} req/s ({knee.confidence}) vs reference capacity {capacity:.2f} "
          f"({(knee.value / capacity - 1) * 100:+.1f} %)")
    assert abs(knee.value - capacity) / capacity <= 0.15, (knee.value, capacity, trail)


@pytest.fixture(scope="module")
def four_a(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    fleet = start_fleet(A, 4, 0.3, tmp_path_factory.mktemp("four"))  # ≈ 32 req/s
    yield fleet
    stop(fleet)


def test_reference_capacity_matches_the_closed_form() -> None:
    for pair in (A, B):
        dep = with_profile(deployment(get_gpu(pair.gpu), resolve_model(pair.model)), DEFAULT_PROFILE)
        closed = saturation(dep, pair.prompt + CHAT_FRAMING, pair.output, max_num_seqs=pair.seqs).request_rate
        assert pair.engine_capacity() == pytest.approx(closed, rel=0.03)


def test_find_knee_one_replica_streaming(tmp_path: Path) -> None:
    fleet = start_fleet(A, 1, 0.1, tmp_path)  # ≈ 24 req/s
    try:
        s = bench(fleet, tmp_path / "run", "--find-knee", "--qps-start", f"{0.5 * fleet.capacity:.2f}",
                  "--step-duration", "4", "--bisections", "1")
    finally:
        stop(fleet)
    assert_knee_near(s, fleet.capacity)


def test_find_knee_two_replicas_behind_the_gateway_not_streaming(tmp_path: Path) -> None:
    fleet = start_fleet(B, 2, 1.0, tmp_path)  # ≈ 22 req/s
    try:
        s = bench(fleet, tmp_path / "run", "--find-knee", "--qps-start", f"{0.5 * fleet.capacity:.2f}",
                  "--step-duration", "4", "--bisections", "1", stream=False)
    finally:
        stop(fleet)
    assert_knee_near(s, fleet.capacity)
    assert "2 replicas" in " ".join(s.notes)  # discovered behind the gateway


def test_ramp_two_replicas_not_streaming(tmp_path: Path) -> None:
    fleet = start_fleet(B, 2, 1.0, tmp_path)
    cap = fleet.capacity
    try:
        s = bench(fleet, tmp_path / "run", "--qps-start", f"{0.4 * cap:.2f}", "--qps-end", f"{1.6 * cap:.2f}",
                  "--duration", "24", "--steps", "8", stream=False)
    finally:
        stop(fleet)
    assert_knee_near(s, cap)


def test_ramp_four_replicas_streaming(four_a: Fleet, tmp_path: Path) -> None:
    cap = four_a.capacity
    s = bench(four_a, tmp_path / "run", "--qps-start", f"{0.4 * cap:.2f}", "--qps-end", f"{1.6 * cap:.2f}",
              "--duration", "24", "--steps", "8")
    assert_knee_near(s, cap)


def test_no_knee_below_capacity(four_a: Fleet, tmp_path: Path) -> None:
    cap = four_a.capacity
    s = bench(four_a, tmp_path / "run", "--qps-start", f"{0.3 * cap:.2f}", "--qps-end", f"{0.8 * cap:.2f}",
              "--duration", "20", "--steps", "5")
    knee = s.knees[ALL]
    assert knee.value is None and knee.verdict == "none", (knee.note, knee.evidence["throughput"].steps)
    assert "No knee up to" in s.recommendation

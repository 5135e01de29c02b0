"""Emulators shared by a test module (starting one costs about a second)."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from turbogate.procs import Service, start_emulator

MODEL = "llama-3.1-8b"


@pytest.fixture(scope="module")
def fast_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Instant (time-scale 0) emulator with default capacity."""
    svc = start_emulator("--time-scale", "0", "--model", MODEL, "--seed", "7",
                         log_dir=tmp_path_factory.mktemp("logs"))
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def client(fast_emulator: Service) -> openai.OpenAI:
    return openai.OpenAI(base_url=fast_emulator.url + "/v1", api_key="unused", max_retries=0)


def scrape(url: str) -> dict[str, float]:
    """``/metrics`` as {"name{label=value,...}": value}, parsed with prometheus_client's parser."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "model_name")
            values[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return values

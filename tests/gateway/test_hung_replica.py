"""A hung replica on a real gateway (issue 43, point 1): one of two emulators frozen with SIGSTOP
(it takes connections and answers nothing, /metrics included).  Every request sent to it is
withdrawn at its ejection and served by the other — the shell's side of sched/hung.py's rule
(a withdrawn attempt goes on to the flow's next dispatch, gateway/serve.py).  The times it
takes are benchmarks/hung_replica.py's; here only the outcome, with generous deadlines."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import yaml

from tests.gateway.conftest import KEY, MODEL, admin_state, gateway_config, pool, replica_state, wait_for
from turbogate.procs import Service, start_gateway

MSG = [{"role": "user", "content": "hello there"}]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_requests_held_by_a_frozen_replica_are_served_by_the_other(
        emulator_factory: Callable[..., Service], tmp_path: Path, stream: bool) -> None:
    frozen, healthy = (emulator_factory("--time-scale", "0", "--model", MODEL) for _ in range(2))
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [frozen.url, healthy.url])])))
    with start_gateway(path, log_dir=tmp_path / "logs") as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=90)
        client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)  # type: ignore[arg-type]
        os.kill(frozen.process.pid, signal.SIGSTOP)
        try:
            def ask(_: int) -> str:
                if stream:
                    chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4,  # type: ignore[arg-type]
                                                                 stream=True))
                    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                out = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4)  # type: ignore[arg-type]
                return out.choices[0].message.content or ""

            with ThreadPoolExecutor(8) as pool_:
                answers = list(pool_.map(ask, range(8)))  # several land on the frozen replica
            assert all(answers)  # every one answered, none lost
            state = replica_state(gw.url, frozen.url)
            assert state["health"] == "ejected" and "hung" in state["eject_reason"]
            assert replica_state(gw.url, healthy.url)["health"] == "healthy"
            assert admin_state(gw.url)["hung"]["found"] >= 1
            wait_for(lambda: all(p["in_flight"] == 0 for p in admin_state(gw.url)["pools"].values()),
                     what="no L1 place left held by the frozen replica's requests")
        finally:
            os.kill(frozen.process.pid, signal.SIGCONT)

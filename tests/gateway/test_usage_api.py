"""Usage routes and the budget admin API on a real gateway (default store: SQLite beside the
config), driven with the official openai client."""

from __future__ import annotations

import csv
import io
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import orjson
import yaml

from tests.gateway.conftest import ADMIN, BASIC_KEY, KEY, MODEL, gateway_config, pool, wait_for
from turbogate.procs import Service, start_gateway

MSG = [{"role": "user", "content": "hello there"}]


def call(url: str, path: str, token: str, body: bytes | None = None) -> tuple[int, bytes, Any]:
    req = urllib.request.Request(url + path, data=body, method="POST" if body is not None else "GET",
                                 headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers


def test_usage_routes_budgets_and_stream_metering(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emu.url])],
                                                  metering={"turbo_cost_multiple": 3.0})))
    with start_gateway(path, log_dir=tmp_path / "logs") as gw:
        assert (tmp_path / "gw.yaml.state.sqlite3").exists()  # the zero-setup default store
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        seen = {"turbo": [0, 0], "standard": [0, 0]}
        for tier in ("priority", "default", "priority"):
            out = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=5, service_tier=tier)  # type: ignore[arg-type]
            assert out.usage is not None and out.service_tier is not None
            seen[out.service_tier][0] += out.usage.prompt_tokens
            seen[out.service_tier][1] += out.usage.completion_tokens
        # A stream whose client did not ask for usage: metered all the same, and no usage chunk reaches it.
        chunks = list(client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=4, stream=True,
                                                     extra_body={"ignore_eos": True}))  # exactly 4 tokens
        assert chunks and all(c.usage is None and c.choices for c in chunks)
        openai.OpenAI(base_url=gw.url + "/v1", api_key=BASIC_KEY, max_retries=0).chat.completions.create(
            model=MODEL, messages=MSG, max_tokens=2)

        status, body, _ = call(gw.url, "/v1/usage?group_by=tier", KEY)
        assert status == 200
        rows = {r["tier"]: r for r in orjson.loads(body)["data"]}
        assert {r["tenant"] for r in rows.values()} == {"acme"}  # only the caller's own usage
        assert rows["turbo"]["requests"] == 2 and rows["standard"]["requests"] == 2
        assert rows["turbo"]["prompt_tokens"] == seen["turbo"][0]
        assert rows["turbo"]["completion_tokens"] == seen["turbo"][1]
        assert rows["turbo"]["cost_units"] == 3.0 * sum(seen["turbo"])
        assert rows["standard"]["completion_tokens"] == seen["standard"][1] + 4  # the stream's 4 tokens
        status, body, headers = call(gw.url, "/v1/usage?format=csv&group_by=day,tier", KEY)
        assert status == 200 and headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(body.decode())))
        assert {r["day"] for r in table} == {time.strftime("%Y-%m-%d", time.gmtime())}
        status, body, _ = call(gw.url, "/v1/usage?start=2020-01-01&end=2020-01-02", KEY)
        assert status == 200 and orjson.loads(body)["data"] == []  # the range filters
        status, body, _ = call(gw.url, "/v1/usage?group_by=week", KEY)
        assert status == 400 and orjson.loads(body)["error"]["param"] == "group_by"
        status, body, _ = call(gw.url, "/v1/usage?start=yesterday", KEY)
        assert status == 400 and orjson.loads(body)["error"]["param"] == "start"
        assert call(gw.url, "/v1/usage", "sk-wrong")[0] == 401
        assert call(gw.url, "/admin/usage", KEY)[0] == 401  # a tenant key is not the admin token

        status, body, _ = call(gw.url, "/admin/usage?format=csv&group_by=tenant", ADMIN)
        tenants = {r["tenant"]: r for r in csv.DictReader(io.StringIO(body.decode()))}
        assert status == 200 and set(tenants) == {"acme", "basic"} and tenants["acme"]["requests"] == "4"

        # Budgets: set one the tenant has already spent; Turbo is then served Standard, saying why.
        status, body, _ = call(gw.url, "/admin/budgets/acme", ADMIN, b'{"turbo_budget_units": 10, "period": "day"}')
        assert status == 200 and orjson.loads(body)["exhausted"] is True
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MSG, max_tokens=2,
                                                              service_tier="priority")
        assert raw.headers["x-turbogate-tier"] == "standard"
        assert raw.headers["x-turbogate-downgrade"] == "turbo_budget_spent"
        assert raw.parse().service_tier == "standard"
        status, body, _ = call(gw.url, "/admin/budgets/acme", ADMIN, b'{"turbo_budget_units": -1}')
        assert status == 400 and b"turbo_budget_units" in body
        assert call(gw.url, "/admin/budgets/nobody", ADMIN, b'{"turbo_budget_units": 1}')[0] == 404
        call(gw.url, "/admin/budgets/acme", ADMIN, b'{"turbo_budget_units": null, "period": "day"}')
        out = client.chat.completions.create(model=MODEL, messages=MSG, max_tokens=2, service_tier="priority")
        assert out.service_tier == "turbo"
        budgets = orjson.loads(call(gw.url, "/admin/budgets", ADMIN)[1])["budgets"]
        assert budgets["acme"]["turbo_budget_units"] is None and budgets["basic"] == {"turbo_budget_units": None}

    # The store is durable across restarts: usage and the budget set through the admin API.
    with start_gateway(path, log_dir=tmp_path / "logs") as gw:
        def all_there() -> bool:
            status, body, _ = call(gw.url, "/admin/usage?group_by=tenant", ADMIN)
            return status == 200 and sum(r["requests"] for r in orjson.loads(body)["data"]) == 7
        wait_for(all_there, what="usage after restart")


def test_usage_totals_agree_with_the_bench_count(emulator_factory: Callable[..., Service], tmp_path: Path) -> None:
    """`turbogate bench` counts the tokens of its own answers; the store's totals for the same run agree."""
    import subprocess
    import sys

    from turbogate.results import load_run

    emu = emulator_factory("--time-scale", "0", "--model", MODEL)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(gateway_config([pool("main", [MODEL], [emu.url])])))
    with start_gateway(path, log_dir=tmp_path / "logs") as gw:
        subprocess.run([sys.executable, "-m", "turbogate", "bench", "--host", gw.url, "--model", MODEL, "--qps", "10",
                        "--duration", "2", "--prompt-tokens", "24:8:8:40", "--output-tokens", "12:4:4:20",
                        "--tiers", "turbo=0.5,standard=0.5", "--api-key", KEY, "--no-live", "--no-report",
                        "--out", str(tmp_path / "run")], check=True, capture_output=True, timeout=120)
        done = [r for r in load_run(tmp_path / "run", with_samples=False).requests if r.status == 200]
        assert done
        status, body, _ = call(gw.url, "/v1/usage?group_by=tier", KEY)
        rows = orjson.loads(body)["data"]
        assert status == 200
        assert sum(r["requests"] - r["errors"] for r in rows) == len(done)
        assert sum(r["prompt_tokens"] for r in rows) == sum(r.prompt_tokens or 0 for r in done)
        assert sum(r["completion_tokens"] for r in rows) == sum(r.output_tokens or 0 for r in done)
        assert {r["tier"] for r in rows} == {"turbo", "standard"}

"""L4 job graphs through a real gateway and real emulators on 127.0.0.1 (gateway/jobs.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.conftest import BASIC_KEY, KEY, MODEL, gateway_config, pool, wait_for
from turbogate.emulator.tokens import CharEstimator, chat_prompt_tokens
from turbogate.procs import Service, start_emulator


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory,
       gateway_factory: Callable[[dict[str, Any]], Service]) -> Iterator[Service]:
    logs = tmp_path_factory.mktemp("emu")
    # Real speed: each step takes a measurable time, so the order and the overlap can be seen.
    emu = start_emulator("--time-scale", "1", "--model", MODEL, "--seed", "3", log_dir=logs)
    yield gateway_factory(gateway_config([pool("main", [MODEL], [emu.url])]))
    emu.stop()


def post_job(gw: Service, job: Any, key: str = KEY, **headers: str) -> httpx.Response:
    return httpx.post(gw.url + "/v1/jobs", json=job, timeout=30, headers={"Authorization": f"Bearer {key}", **headers})


def get_job(gw: Service, job_id: str, key: str = KEY) -> httpx.Response:
    return httpx.get(f"{gw.url}/v1/jobs/{job_id}", timeout=30, headers={"Authorization": f"Bearer {key}"})


def wait_done(gw: Service, job_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(get_job(gw, job_id).json())
        return bool(seen["status"] != "running")

    wait_for(done, timeout=60, what=f"job {job_id} to end")
    return seen


def step(sid: str, deps: tuple[str, ...] = (), content: Any = "Hello", max_tokens: int = 8,
         model: str = MODEL, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "depends_on": list(deps), **extra,
            "request": {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": content}]}}


REF = {"$ref": "a.choices[0].message.content"}
DIAMOND = {"service_tier": "priority", "steps": [
    step("a"), step("b", ("a",), REF), step("c", ("a",), REF),
    step("d", ("b", "c"), "{{b}} / {{c}}", inputs={"b": "b.choices[0].message.content",
                                                  "c": "c.choices[0].message.content"})]}


def content(s: dict[str, Any]) -> str:
    text = s["output"]["choices"][0]["message"]["content"]
    assert isinstance(text, str) and text
    return text


def test_a_diamond_runs_in_order_in_parallel_and_returns_each_output(gw: Service) -> None:
    resp = post_job(gw, DIAMOND)
    assert resp.status_code == 202, resp.text
    job = resp.json()
    assert job["object"] == "job" and job["order"] == ["a", "b", "c", "d"] and job["depth"] == 2
    view = wait_done(gw, job["id"])
    assert view["status"] == "succeeded", [(x["id"], x["status"], x["error"]) for x in view["steps"]]
    s = {x["id"]: x for x in view["steps"]}
    assert all(x["status"] == "succeeded" and x["http_status"] == 200 for x in s.values())
    # Each step entered L1 with the job's tier, as an ordinary chat request does.
    assert all(x["service_tier"] == "turbo" and x["output"]["service_tier"] == "turbo" for x in s.values())
    assert s["a"]["finished_s"] <= s["b"]["started_s"] == s["c"]["started_s"]  # b and c start together
    assert s["b"]["started_s"] < s["c"]["finished_s"] and s["c"]["started_s"] < s["b"]["finished_s"]  # overlap
    assert s["d"]["started_s"] >= max(s["b"]["finished_s"], s["c"]["finished_s"])
    # The references were replaced by the answers they name, and that text reached the engine.
    assert s["b"]["request"]["messages"][0]["content"] == content(s["a"])
    sent = f"{content(s['b'])} / {content(s['c'])}"
    assert s["d"]["request"]["messages"][0]["content"] == sent
    assert s["d"]["output"]["usage"]["prompt_tokens"] == chat_prompt_tokens(CharEstimator(), [sent])


@pytest.mark.parametrize(("steps", "kind", "named"), [
    ([step("a", ("c",)), step("b", ("a",)), step("c", ("b",))], "cycle", {"a", "b", "c"}),
    ([step("a"), step("b", ("a",)), step("c", ("b",)), step("d", ("c",))], "too_deep", {"d"}),
    ([step("r"), *(step(f"s{i}", ("r",)) for i in range(4))], "too_wide", {"r"}),
    ([step("a"), step("b", (), {"$ref": "a.choices[0].message.content"})], "unknown_reference", {"b"}),
    ([step("a", model="no-such-model")], "unknown_model", {"a"}),
])
def test_a_bad_job_gets_a_400_naming_the_step(gw: Service, steps: list[dict[str, Any]], kind: str,
                                              named: set[str]) -> None:
    resp = post_job(gw, {"steps": steps})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == kind
    assert err["param"].startswith("steps[")
    [problem] = err["problems"]
    assert problem["kind"] == kind and problem["step"] in named and f"step {problem['step']!r}" in err["message"]


def test_the_openai_client_sees_a_bad_job_as_a_bad_request(gw: Service) -> None:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0, timeout=30)
    with pytest.raises(openai.BadRequestError, match="cycle"):
        client.post("/jobs", body={"steps": [step("a", ("a",))]}, cast_to=object)


def test_delete_cancels_what_has_not_run(gw: Service) -> None:
    # A long first step: the chain is still on a when DELETE comes.
    job = post_job(gw, {"steps": [step("a", max_tokens=4000), step("b", ("a",), REF), step("c", ("b",))]}).json()
    resp = httpx.delete(f"{gw.url}/v1/jobs/{job['id']}", timeout=30, headers={"Authorization": f"Bearer {KEY}"})
    assert resp.status_code == 200
    s = {x["id"]: x for x in resp.json()["steps"]}
    assert s["b"]["status"] == s["c"]["status"] == "cancelled"
    view = wait_done(gw, job["id"])
    assert view["status"] == "cancelled"
    # a was running: its call was abandoned (a finished answer would have been kept as succeeded).
    assert {x["id"]: x["status"] for x in view["steps"]} == {"a": "cancelled", "b": "cancelled", "c": "cancelled"}


def test_jobs_belong_to_their_tenant_and_need_a_key(gw: Service) -> None:
    job = post_job(gw, {"steps": [step("a")]}).json()
    assert get_job(gw, job["id"], key=BASIC_KEY).status_code == 404
    assert httpx.get(f"{gw.url}/v1/jobs/{job['id']}", timeout=30).status_code == 401
    assert get_job(gw, "job_nope").json()["error"]["code"] == "job_not_found"
    assert httpx.put(f"{gw.url}/v1/jobs/{job['id']}", timeout=30,
                     headers={"Authorization": f"Bearer {KEY}"}).status_code == 405
    assert post_job(gw, "not json at all").status_code == 400
    assert wait_done(gw, job["id"])["status"] == "succeeded"


def test_a_tenant_not_entitled_to_turbo_runs_its_steps_standard(gw: Service) -> None:
    job = post_job(gw, {"service_tier": "priority", "steps": [step("a")]}, key=BASIC_KEY).json()
    done: dict[str, Any] = {}

    def finished() -> bool:
        done.update(get_job(gw, job["id"], key=BASIC_KEY).json())
        return bool(done["status"] != "running")

    wait_for(finished, timeout=60, what="the job to end")
    [a] = done["steps"]
    assert a["service_tier"] == "standard" and a["downgrade"] == "not_entitled"

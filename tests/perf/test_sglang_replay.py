"""benchmarks/sglang_replay.py, the replay of SGLang's scheduling rules that the SGLang cells' diagnosis and
KV read efficiency rest on: its admission rule, and a small replay that must never overfill the KV pool."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from turbogate.perf import deployment, get_gpu, get_model

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sglang_replay.py"


@pytest.fixture(scope="module")
def replay_mod() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_replay", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sglang_replay"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_admission_reserves_every_running_request_to_its_last_token(replay_mod: ModuleType) -> None:
    admits = replay_mod.admits
    # One request with 10 tokens to go: it needs 10 free tokens after the candidate's prompt (strictly more).
    assert not admits([(10, 100)], 10)
    assert admits([(10, 100)], 11)
    # Two requests, 5 and 20 to go: until the first finishes both grow (SGLang charges the second's 20 to
    # both, conservatively); then the first frees its 100 held tokens and the second needs 20 more.
    assert not admits([(5, 100), (20, 50)], 40)
    assert admits([(5, 100), (20, 50)], 41)


def test_small_replay_keeps_kv_within_the_pool_and_decodes_at_the_step_time(replay_mod: ModuleType) -> None:
    dep = deployment(get_gpu("L4"), get_model("llama-3.2-1b"), gpu_mem_util=0.2)  # a small pool: KV binds
    reqs = replay_mod._requests(512, 256, 300)
    got = replay_mod.replay(dep, reqs)  # raises if the pool ever overfills
    assert got["duration_s"] > 0 and got["output_tok_s"] > 0
    assert all(r.out == r.osl for r in reqs), "every request ran to its last token"
    # One request alone, 100-token prompt, 2 output tokens: its one gap is a decode step over the prompt.
    single = replay_mod._requests(100, 2, 1)
    single[0].isl, single[0].osl = 100, 2
    alone = replay_mod.replay(dep, single)
    assert alone["median_itl_s"] == pytest.approx(dep.decode_step_time(1, 100))

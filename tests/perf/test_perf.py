"""The lead's performance model against hand-computed values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turbogate.errors import CatalogError
from turbogate.perf import (
    GPU,
    Deployment,
    GiB,
    PerfFactors,
    deployment,
    get_gpu,
    get_model,
    kv_bytes_per_token,
    load_hf_config,
    resolve_model,
    saturation,
)
from turbogate.perf.models import ModelSpec

# ---- KV bytes per token: layers × KV heads × head_dim × 2 (K, V) × dtype bytes ----------------------


def test_llama_8b_kv_bytes_per_token_bf16() -> None:
    # 32 layers × 8 KV heads × 128 × 2 × 2 B = 131,072
    assert kv_bytes_per_token(get_model("llama-3.1-8b"), "bf16") == 131_072


def test_fp8_kv_halves_it() -> None:
    m = get_model("llama-3.1-8b")
    assert kv_bytes_per_token(m, "fp8") == 65_536
    dep = deployment(get_gpu("H100-SXM"), m, kv_dtype="fp8")
    assert dep.kv_bytes_per_token == 65_536


def test_qwen_kv_bytes_per_token() -> None:
    # 28 layers × 4 KV heads × 128 × 2 × 2 B = 57,344
    assert kv_bytes_per_token(get_model("qwen2.5-7b"), "bf16") == 57_344


def test_auto_kv_dtype_keeps_bf16_under_fp8_weights() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"), weight_dtype="fp8")
    assert dep.effective_kv_dtype == "bf16"
    assert dep.kv_bytes_per_token == 131_072


# ---- parameter counts near the published totals -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "published", "tol"),
    [
        ("llama-3.1-8b", 8.03e9, 0.005),
        ("llama-3.1-70b", 70.6e9, 0.005),
        ("llama-3.3-70b", 70.6e9, 0.005),
        ("qwen2.5-7b", 7.6e9, 0.01),
        ("mixtral-8x7b", 46.7e9, 0.005),
        ("llama-3.2-1b", 1.24e9, 0.01),
    ],
)
def test_parameter_counts(name: str, published: float, tol: float) -> None:
    assert get_model(name).n_params == pytest.approx(published, rel=tol)


def test_mixtral_active_parameters() -> None:
    m = get_model("mixtral-8x7b")
    assert m.n_active_params == pytest.approx(12.9e9, rel=0.005)
    assert m.is_moe


def test_llama_8b_parameter_count_by_hand() -> None:
    # attention: 2·4096·32·128 + 2·4096·8·128 = 41,943,040; MLP: 3·4096·14336 = 176,160,768
    # per layer 218,103,808 × 32 = 6,979,321,856; embeddings 2·128256·4096 = 1,050,673,152
    assert get_model("llama-3.1-8b").n_params == 6_979_321_856 + 1_050_673_152


# ---- config.json ----------------------------------------------------------------------------------------


def _write_config(tmp_path: Path, **extra: object) -> Path:
    cfg = {
        "hidden_size": 2560, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 36,
        "vocab_size": 151936, "intermediate_size": 9728, "max_position_embeddings": 40960,
        "tie_word_embeddings": True, **extra,
    }
    folder = tmp_path / "qwen3-4b-like"
    folder.mkdir()
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_head_dim_taken_from_config(tmp_path: Path) -> None:
    path = _write_config(tmp_path, head_dim=128)  # 2560 / 32 would give 80
    m = load_hf_config(path)
    assert m.head_dim == 128
    assert m.name == "qwen3-4b-like"
    assert kv_bytes_per_token(m, "bf16") == 36 * 8 * 128 * 2 * 2


def test_head_dim_defaults_to_hidden_over_heads(tmp_path: Path) -> None:
    m = load_hf_config(_write_config(tmp_path))
    assert m.head_dim == 80


def test_resolve_model_accepts_a_folder_or_a_path(tmp_path: Path) -> None:
    path = _write_config(tmp_path, head_dim=128)
    assert resolve_model(str(path)).head_dim == 128
    assert resolve_model(str(path.parent)).head_dim == 128


def test_bad_configs(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="not found"):
        load_hf_config(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_hf_config(bad)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"hidden_size": 10}))
    with pytest.raises(CatalogError, match="num_attention_heads"):
        load_hf_config(partial)


# ---- lookups -------------------------------------------------------------------------------------------


def test_gpu_aliases() -> None:
    assert get_gpu("h100_sxm").name == "H100-SXM"
    assert get_gpu("H100 SXM5").name == "H100-SXM"
    assert get_gpu("a100").name == "A100-80G-SXM"
    assert get_model("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3.1-8b"
    assert get_model("meta-llama/Llama-3.3-70B-Instruct").name == "llama-3.3-70b"
    assert get_gpu("RTX PRO 6000 Blackwell").name == "RTX-PRO-6000"


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(CatalogError, match=r"unknown GPU 'B100'.*H100-SXM"):
        get_gpu("B100")
    with pytest.raises(CatalogError, match=r"unknown model 'gpt-5'.*llama-3\.1-8b"):
        get_model("gpt-5")


def test_model_that_does_not_fit_says_why() -> None:
    with pytest.raises(CatalogError, match=r"needs 131\.4 GiB .* L4 offers 21\.6 GiB"):
        deployment(get_gpu("L4"), get_model("llama-3.1-70b"))


# ---- KV capacity and step times by hand ---------------------------------------------------------------

# A toy chip and model whose numbers are easy to follow.
TOY_GPU = GPU("toy", hbm_bytes=10 * GiB, hbm_bandwidth=1e12, bf16_flops=100e12, fp8_flops=None, source="test",
              price_per_hour=1.0)
TOY_MODEL = ModelSpec("toy", n_layers=2, hidden_size=64, n_heads=4, n_kv_heads=2, head_dim=16,
                      intermediate_size=128, vocab_size=1000, max_context=4096)
NO_OVERHEAD = PerfFactors(mfu=1.0, bw_efficiency=1.0, step_overhead_s=0.0, per_seq_overhead_s=0.0,
                          activation_reserve_bytes=1 * GiB, tp_allreduce_s=0.0)


def _toy() -> Deployment:
    return Deployment(TOY_GPU, TOY_MODEL, gpu_mem_util=0.5, block_size=16, factors=NO_OVERHEAD)


def test_toy_counts() -> None:
    # attention 2·64·4·16 + 2·64·2·16 = 12,288; MLP 3·64·128 = 24,576; layer 36,864 × 2 = 73,728;
    # embeddings 2·1000·64 = 128,000
    assert TOY_MODEL.n_params == 201_728
    assert kv_bytes_per_token(TOY_MODEL, "bf16") == 2 * 2 * 16 * 2 * 2  # 256


def test_kv_capacity_by_hand() -> None:
    dep = _toy()
    # budget 10 GiB × 0.5 = 5 GiB; minus weights 403,456 B and the 1 GiB reserve
    cache = 5 * GiB - 403_456 - 1 * GiB
    assert dep.kv_cache_bytes == pytest.approx(cache)
    blocks = cache // (256 * 16)
    assert dep.kv_capacity_blocks == blocks
    assert dep.kv_capacity_tokens == blocks * 16


def test_kv_capacity_llama_8b_h100_by_hand() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    cache = 80 * GiB * 0.9 - dep.weights_bytes - 2 * GiB
    assert dep.weights_bytes == 2 * 8_029_995_008
    assert dep.kv_capacity_tokens == int(cache // (131_072 * 16)) * 16


def test_prefill_step_is_the_roofline_maximum() -> None:
    dep = _toy()
    n = 1000
    flops = 2 * TOY_MODEL.n_params * n + 4 * 2 * 4 * 16 * n * (n / 2)
    compute = flops / 100e12
    memory = (TOY_MODEL.n_params * 2 + 256 * n) / 1e12
    assert dep.prefill_time(n) == pytest.approx(max(compute, memory))
    assert compute > memory  # a long prefill is compute-bound


def test_decode_step_is_the_roofline_maximum() -> None:
    dep = _toy()
    batch, ctx = 4, 400
    flops = 2 * TOY_MODEL.n_params * batch + 4 * 2 * 4 * 16 * batch * (ctx / batch)
    memory = (TOY_MODEL.n_params * 2 + 256 * ctx + 256 * batch) / 1e12
    assert dep.decode_step_time(batch, ctx) == pytest.approx(max(flops / 100e12, memory))
    assert memory > flops / 100e12  # small-batch decode is memory-bound


def test_overheads_add_on_top() -> None:
    base = _toy()
    dep = base.with_factors(step_overhead_s=0.001, per_seq_overhead_s=0.0001)
    assert dep.decode_step_time(4, 400) == pytest.approx(base.decode_step_time(4, 400) + 0.001 + 4 * 0.0001)


def test_compute_bound_batch_flips_the_roofline() -> None:
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    b = dep.decode_compute_bound_batch(640)
    assert b is not None and b > 1

    def parts(batch: int) -> tuple[float, float]:
        m = dep.model
        flops = 2.0 * m.n_active_params * batch + 4.0 * m.n_layers * m.n_heads * m.head_dim * batch * 640
        mem = dep.weights_bytes + dep.kv_bytes_per_token * (batch * 640 + batch)
        return flops / (989e12 * 0.5), mem / (3.35e12 * 0.8)

    c, m = parts(b)
    assert c >= m
    c, m = parts(b - 1)
    assert c < m


def test_saturation_by_hand() -> None:
    # KV-bound: 203 sequences of 512 + 256 tokens fit.  Freed KV admits prompts in bursts, so their
    # 203 × 512 prompt tokens ride in budget-filling chunks of 8192 − 203 = 7989 tokens beside the
    # decodes: 13 compute-bound mixed steps per 256-step round.
    dep = deployment(get_gpu("A100-40G"), get_model("llama-3.1-8b"))
    sat = saturation(dep, 512, 256, max_num_seqs=1024)
    assert sat.batch == 203 and sat.bound == "kv_cache"
    mixed = 203 * 512 / 7989
    t_mixed = dep.step_time(7989, 203, 203 * 640, 0, prefill_seqs=16)  # 7989 / 512 = 15.6 prompts: 16
    t_decode = dep.decode_step_time(203, 203 * 640)
    round_time = mixed * t_mixed + (256 - mixed) * t_decode
    assert sat.request_rate == pytest.approx(203 / round_time)
    assert sat.step_time_s == pytest.approx(round_time / 256)
    assert t_mixed > 2 * t_decode, "a mixed step is compute-bound: its prefill does not hide under decode"


def test_saturation_slot_bound_admits_a_prompt_per_finish() -> None:
    # max_num_seqs binds: one request finishes per step (256 / 256), freeing one slot for one prompt,
    # so every step carries 512 prompt tokens beside the 256 decodes.
    dep = deployment(get_gpu("H100-SXM"), get_model("llama-3.1-8b"))
    sat = saturation(dep, 512, 256, max_num_seqs=256)
    assert sat.batch == 256 and sat.bound == "max_num_seqs"
    step = dep.step_time(512, 256, 256 * 640, 0, prefill_seqs=1)
    assert sat.step_time_s == pytest.approx(step)
    assert sat.request_rate == pytest.approx(256 / (256 * step))


def test_saturation_kv_bound() -> None:
    dep = deployment(get_gpu("A100-40G"), get_model("llama-3.1-8b"))
    sat = saturation(dep, 512, 256, max_num_seqs=1024)
    assert sat.bound == "kv_cache"
    assert sat.batch == dep.kv_capacity_tokens // 768, "room for every sequence's last token (512 + 256)"

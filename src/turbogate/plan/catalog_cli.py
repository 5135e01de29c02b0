"""``turbogate plan gpus`` and ``turbogate plan models``: the hardware and model catalogs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from turbogate.perf import GPUS, MODELS, GiB, kv_bytes_per_token, resolve_model
from turbogate.plan import cli_common as common


def gpus_cmd(as_json: bool = common.JSON_OPT) -> None:
    """The GPU catalog: memory, bandwidth, dense FLOP/s, indicative price."""
    if as_json:
        common.print_json([{"name": g.name, "hbm_bytes": g.hbm_bytes, "hbm_gib": g.hbm_bytes / GiB,
                      "hbm_bandwidth": g.hbm_bandwidth, "bf16_flops": g.bf16_flops, "fp8_flops": g.fp8_flops,
                      "price_per_hour": g.price_per_hour, "source": g.source} for g in GPUS.values()])
        return
    t = Table(title="GPUs")
    for col in ("name", "HBM GiB", "HBM TB/s", "BF16 TFLOP/s", "FP8 TFLOP/s", "USD/h", "source"):
        t.add_column(col, justify="right" if col not in ("name", "source") else "left")
    for g in GPUS.values():
        t.add_row(g.name, f"{g.hbm_bytes / GiB:.0f}", f"{g.hbm_bandwidth / 1e12:.3g}", f"{g.bf16_flops / 1e12:,.0f}",
                  "—" if g.fp8_flops is None else f"{g.fp8_flops / 1e12:,.0f}", f"{g.price_per_hour:.2f}", g.source)
    common.console.print(t)


def models_cmd(
    config: Path = typer.Option(None, "--model", help="Also show a custom model from a config.json path."),
    as_json: bool = common.JSON_OPT,
) -> None:
    """The model catalog (and a custom config.json with --model)."""

    def go() -> None:
        specs = list(MODELS.values())
        if config is not None:
            specs.append(resolve_model(str(config)))
        if as_json:
            common.print_json([{"name": m.name, "n_params": m.n_params, "n_active_params": m.n_active_params,
                          "n_layers": m.n_layers, "hidden_size": m.hidden_size, "n_heads": m.n_heads,
                          "n_kv_heads": m.n_kv_heads, "head_dim": m.head_dim, "n_experts": m.n_experts,
                          "experts_per_token": m.experts_per_token, "max_context": m.max_context,
                          "kv_bytes_per_token_bf16": kv_bytes_per_token(m, "bf16")} for m in specs])
            return
        t = Table(title="Models")
        for col in ("name", "params B", "active B", "layers", "heads", "KV heads", "head dim", "KV B/token (bf16)",
                    "context"):
            t.add_column(col, justify="right" if col != "name" else "left")
        for m in specs:
            t.add_row(m.name, f"{m.n_params / 1e9:.2f}", f"{m.n_active_params / 1e9:.2f}", str(m.n_layers),
                      str(m.n_heads), str(m.n_kv_heads), str(m.head_dim), f"{kv_bytes_per_token(m, 'bf16'):,}",
                      f"{m.max_context:,}")
        common.console.print(t)

    common.run(go)

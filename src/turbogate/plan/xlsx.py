"""The decision matrix as an Excel workbook with live formulas and their computed values (the only I/O is
:func:`write_workbook`).

Sheets:

- ``inputs``   — one row per scenario: GPU, model architecture, deployment, request shape, peak
  load and the matrix's switches.  Edit any cell; everything else recomputes.
- ``hardware`` — the GPU catalog (memory, bandwidth, dense FLOP/s, price) and the dtype sizes.
- ``matrix``   — one row per scenario: the perf model's quantities (weights, KV bytes per token,
  KV capacity, step times, saturation), the load model at peak, each rule's verdict and the
  recommendation — all cell formulas, the same arithmetic as :mod:`turbogate.perf`,
  :mod:`turbogate.plan.latency` and :mod:`turbogate.plan.matrix`.
- ``knee``     — the knee's bisection, :data:`~turbogate.plan.knee.KNEE_ITERATIONS` halvings
  spelled out as cells (no macros, no iterative calculation).

Only functions common to Excel and LibreOffice are used (INDEX/MATCH, ROUNDUP, INT, MOD, SQRT,
POWER via ``^``); no LET or LAMBDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from turbogate.perf import DTYPE_BYTES, GPUS, Deployment
from turbogate.perf.roofline import FRONTEND_BUSY_CAP
from turbogate.plan.formula import Book, col_letter, col_number
from turbogate.plan.knee import KNEE_ITERATIONS
from turbogate.plan.matrix import LABELS, MODES, MatrixInputs


@dataclass(frozen=True, slots=True)
class Scenario:
    """One row of the workbook: a deployment, a request shape and the matrix inputs."""

    name: str
    dep: Deployment
    prompt_tokens: int
    max_tokens: int
    max_num_seqs: int
    max_num_batched_tokens: int
    matrix: MatrixInputs
    engine_profile: str = "custom"  # where ``dep.factors`` came from, shown beside them


# (column name, header) of the inputs sheet, in order.
INPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("scenario", "scenario"),
    ("gpu", "GPU (see hardware)"),
    ("tp", "tensor parallel"),
    ("weight_dtype", "weight dtype"),
    ("kv_dtype", "KV dtype (auto = weights; bf16 under 16-bit weights)"),
    ("gpu_mem_util", "gpu_mem_util"),
    ("block_size", "KV block size"),
    ("prompt_tokens", "prompt tokens"),
    ("max_tokens", "max tokens (output)"),
    ("batch_size", "batch size (max_num_seqs)"),
    ("max_batched", "max_num_batched_tokens"),
    ("peak_rps", "peak load (req/s, fleet)"),
    ("replicas", "replicas"),
    ("kv_threshold", "KV utilization threshold"),
    ("lora", "LoRA hot-loading needed"),
    ("http2", "clients reuse HTTP/2 connections"),
    ("knee_factor", "knee factor (× unloaded E2E)"),
    ("model", "model"),
    ("n_layers", "layers"),
    ("hidden", "hidden size"),
    ("n_heads", "attention heads"),
    ("n_kv_heads", "KV heads"),
    ("head_dim", "head dim"),
    ("intermediate", "intermediate size"),
    ("vocab", "vocab size"),
    ("tie", "tied embeddings"),
    ("n_experts", "experts per layer"),
    ("experts_per_token", "experts per token"),
    ("mfu", "effective MFU (the profile's or GPU's × mfu_scale × GEMM-size growth)"),
    ("bw_eff", "bandwidth efficiency (the GPU's × bw_scale)"),
    ("step_oh", "step overhead (s)"),
    ("seq_oh", "per-sequence overhead (s)"),
    ("reserve", "activation reserve (bytes/GPU)"),
    ("allreduce", "TP all-reduce latency (s)"),
    ("link_bw", "TP link bytes/s achieved"),
    ("kv_bw_eff", "KV read bandwidth efficiency"),
    ("ar_growth", "TP all-reduce growth per doubling beyond 2 (s)"),
    ("decode_ar", "decode-step all-reduce latency (s; blank = the prefill's)"),
    ("ridge", "ridge exponent (0 = sharp max)"),
    ("moe_routing", "MoE routing scale"),
    ("frontend", "front end, fixed (s)"),
    ("frontend_tok", "front end per prompt token (s)"),
    ("ttft_steps", "first-token wait (decode steps)"),
    ("busy_ttft_steps", "first-token wait while others run (decode steps)"),
    ("frontend_streamed", "front end per token others stream (s)"),
    ("engine_profile", "engine profile (the factors' source; docs/plan.md)"),
)

_IN = {name: col_letter(i + 1) for i, (name, _h) in enumerate(INPUT_COLUMNS)}

HW_FIRST_ROW = 2
HW_COLUMNS = ("name", "hbm_bytes", "hbm_bandwidth", "bf16_flops", "fp8_flops", "price_per_hour", "source")
DTYPE_COL, DTYPE_BYTES_COL = "I", "J"


def _hw_range(col: str) -> str:
    last = HW_FIRST_ROW + len(GPUS) - 1
    return f"hardware!${col}${HW_FIRST_ROW}:${col}${last}"


def _dtype_lookup(expr: str) -> str:
    last = 1 + len(DTYPE_BYTES)
    return f"VLOOKUP({expr},hardware!${DTYPE_COL}$2:${DTYPE_BYTES_COL}${last},2,FALSE)"


def _hw(col: str, gpu_ref: str) -> str:
    return f"INDEX({_hw_range(col)},MATCH({gpu_ref},{_hw_range('A')},0))"


def _banker_round(x: str) -> str:
    """Python's round() (half to even) in cell formulas."""
    return f"IF(MOD({x},1)=0.5,2*ROUND(({x})/2,0),ROUND({x},0))"


# Derived columns of the matrix sheet: (name, header, formula template).  ``{i:x}`` is the inputs
# cell of field x on this row, ``{m:x}`` the matrix cell of derived column x on this row.
_DERIVED: list[tuple[str, str, str]] = []


def _d(name: str, header: str, template: str) -> None:
    _DERIVED.append((name, header, template))


def _step(pt: str, ds: str, dctx: str, pctx: str, nps: str = "1") -> str:
    """perf.Deployment.step_time as a formula over matrix cells (``nps``: prefill requests)."""
    tokens = f"(({pt})+({ds}))"
    n_prefill = f"IF(({pt})>0,MAX(1,{nps}),0)"
    attn = "4*{i:n_layers}*{i:n_heads}*{i:head_dim}"
    flops = (f"(2*{{m:n_active}}*{tokens}+{attn}*({pt})*((({pt})/2+({pctx}))/MAX(1,{nps}))"
             f"+{attn}*({ds})*(({dctx})/MAX({ds},1)))")
    draws = f"MAX(1,MAX({tokens},1)*{{i:moe_routing}})"  # tokens that pick experts independently
    wread = (f"IF({{i:n_experts}}>1,({{m:n_params}}-{{m:n_expert_params}})*{{m:wbytes}}"
             f"+{{m:n_expert_params}}*{{m:wbytes}}*(1-MAX(1-{{i:experts_per_token}}/{{i:n_experts}},"
             f"1E-300^(1/{draws}))^{draws}),"  # floored: a spreadsheet's x^n must not underflow
             f"{{m:n_params}}*{{m:wbytes}})")
    mem = f"(({wread})+{{m:kv_read}}*(({dctx})+({pctx}))+{{m:kv_read}}*{tokens})"
    comm = (f"IF({{i:tp}}>1,2*{{i:n_layers}}*(IF(({pt})>0,{{m:ar_lat}},{{m:ar_decode}})+IF({{i:link_bw}}>0,"
            f"2*({{i:tp}}-1)/{{i:tp}}*{tokens}*{{i:hidden}}*2/{{i:link_bw}},0)),0)")
    overhead = f"({{i:step_oh}}+{{i:seq_oh}}*(({ds})+{n_prefill})+{comm})"
    c, m = f"({flops}/{{m:flops}})", f"({mem}/{{m:bw}})"
    # PerfFactors.ridge_exponent p > 0: the p-norm of compute and memory time instead of their max.
    ridge = f"IF({{i:ridge}}>0,({c}^{{i:ridge}}+{m}^{{i:ridge}})^(1/{{i:ridge}}),MAX({c},{m}))"
    return f"IF({tokens}<=0,0,{ridge}+{overhead})"


_d("scenario", "scenario", "{i:scenario}")
_d("hbm", "HBM bytes", _hw("B", "{i:gpu}"))
_d("wbytes", "weight bytes/param", _dtype_lookup("{i:weight_dtype}"))
_d("kvbytes", "KV bytes/element",
   f'IF({{i:kv_dtype}}="auto",IF({{m:wbytes}}<2,2,{{m:wbytes}}),{_dtype_lookup("{i:kv_dtype}")})')
_d("flops", "effective FLOP/s",
   f'IF(AND(OR({{i:weight_dtype}}="fp8",{{i:weight_dtype}}="int8"),{_hw("E", "{i:gpu}")}<>""),'
   f'{_hw("E", "{i:gpu}")},{_hw("D", "{i:gpu}")})*{{i:mfu}}*{{i:tp}}')
_d("bw", "effective bytes/s", f"{_hw('C', '{i:gpu}')}*{{i:bw_eff}}*{{i:tp}}")
_d("price", "price per GPU-hour", _hw("F", "{i:gpu}"))
_d("attn_params", "attention params/layer",
   "2*{i:hidden}*{i:n_heads}*{i:head_dim}+2*{i:hidden}*{i:n_kv_heads}*{i:head_dim}")
_d("expert_params", "MLP params/expert", "3*{i:hidden}*{i:intermediate}")
_d("n_params", "parameters",
   "{i:n_layers}*({m:attn_params}+{i:n_experts}*{m:expert_params}+IF({i:n_experts}>1,{i:hidden}*{i:n_experts},0))"
   "+{i:vocab}*{i:hidden}*IF({i:tie},1,2)")
_d("n_active", "active parameters",
   "{i:n_layers}*({m:attn_params}+IF({i:n_experts}>1,{i:experts_per_token},1)*{m:expert_params})"
   "+{i:vocab}*{i:hidden}*IF({i:tie},1,2)")
_d("n_expert_params", "expert parameters", "{i:n_layers}*{i:n_experts}*{m:expert_params}")
_d("weights", "weights bytes", "INT({m:n_params}*{m:wbytes})")
_d("kvb", "KV bytes/token", "INT({i:n_layers}*{i:n_kv_heads}*{i:head_dim}*2*{m:kvbytes})")
_d("kv_read", "KV read cost/token (bytes at the weights' bandwidth)", "{m:kvb}*{i:bw_eff}/{i:kv_bw_eff}")
_d("ar_lat", "all-reduce latency (s)",
   "IF({i:tp}>1,{i:allreduce}+{i:ar_growth}*MAX(0,LN({i:tp}/2)/LN(2)),0)")
_d("ar_decode", "decode all-reduce latency (s)", 'IF({i:decode_ar}="",{m:ar_lat},IF({i:tp}>1,{i:decode_ar},0))')
_d("front", "front end (s)", "{i:frontend}+{i:frontend_tok}*{i:prompt_tokens}")
_d("kv_cache", "KV cache bytes",
   "MAX(0,{m:hbm}*{i:gpu_mem_util}*{i:tp}-{m:weights}-{i:reserve}*{i:tp})")
_d("fits", "fits", "{m:kv_cache}>={m:kvb}*{i:block_size}")
_d("kv_tokens", "KV capacity tokens", "INT({m:kv_cache}/({m:kvb}*{i:block_size}))*{i:block_size}")
_d("per_seq", "KV tokens/sequence",
   "ROUNDUP(({i:prompt_tokens}+{i:max_tokens}/2)/{i:block_size},0)*{i:block_size}")
# perf.saturation: a round of max_tokens steps is "mixed" steps (a budget-filling prefill chunk
# plus every decode) and pure decode steps; prefill-bound when mixed steps alone fall short.
_d("peak_seq", "KV tokens/sequence at its end",
   "ROUNDUP(({i:prompt_tokens}+{i:max_tokens})/{i:block_size},0)*{i:block_size}")
_d("c", "saturation batch",
   "MAX(1,MIN({i:batch_size},INT({m:kv_tokens}/{m:peak_seq})))")
_d("sat_chunk", "prefill chunk beside the batch",
   "IF({i:batch_size}<=INT({m:kv_tokens}/{m:peak_seq}),MIN({i:max_batched}-{m:c},"
   "ROUNDUP({i:prompt_tokens}*MAX(1,{m:c}/{i:max_tokens}),0)),{i:max_batched}-{m:c})")
_d("mixed", "mixed steps per round",
   "IF({m:sat_chunk}>0,{m:c}*{i:prompt_tokens}/{m:sat_chunk},1E+300)")
_d("pb", "prefill-bound", "{m:mixed}>{i:max_tokens}")
_d("sat_n", "decodes per mixed step",
   "IF({m:pb},MAX(1," + _banker_round("{i:max_batched}*{i:max_tokens}/({i:prompt_tokens}+{i:max_tokens})")
   + "),{m:c})")
_d("sat_pf", "prefill tokens per mixed step", "IF({m:pb},MAX(1,{i:max_batched}-{m:sat_n}),{m:sat_chunk})")
_d("sat_seqs", "requests per chunk",
   "IF({i:prompt_tokens}>={m:sat_pf},1,MAX(1," + _banker_round("{m:sat_pf}/{i:prompt_tokens}") + "))")
_d("sat_cached", "cached context per chunk",
   "IF({i:prompt_tokens}>={m:sat_pf},INT((ROUNDUP({i:prompt_tokens}/{m:sat_pf},0)-1)*{m:sat_pf}/2),0)")
_d("t_mixed", "mixed step (s)",
   _step("{m:sat_pf}", "{m:sat_n}", "INT({m:sat_n}*({i:prompt_tokens}+{i:max_tokens}/2))",
         "{m:sat_cached}*{m:sat_seqs}", "{m:sat_seqs}"))
_d("t_dec", "decode step at saturation (s)",
   _step("0", "{m:c}", "INT({m:c}*({i:prompt_tokens}+{i:max_tokens}/2))", "0"))
_d("s_sat", "step at saturation (s)",
   "IF({m:pb},{m:t_mixed},({m:mixed}*{m:t_mixed}+({i:max_tokens}-{m:mixed})*{m:t_dec})/{i:max_tokens})")
_d("mu", "saturation rate (req/s)",
   "IF({m:pb},{m:sat_n}/({i:max_tokens}*{m:s_sat}),"
   "{m:c}/({m:mixed}*{m:t_mixed}+({i:max_tokens}-{m:mixed})*{m:t_dec}))")
_d("s_idle", "lone decode step (s)", _step("0", "1", "INT({i:prompt_tokens}+{i:max_tokens}/2)", "0"))
_d("chunks", "prefill chunks", "MAX(1,ROUNDUP({i:prompt_tokens}/{i:max_batched},0))")
_d("chunk", "tokens/chunk", "ROUNDUP({i:prompt_tokens}/{m:chunks},0)")
_d("cached", "cached context/chunk", "INT(({m:chunks}-1)*{m:chunk}/2)")
_d("ttft0", "unloaded TTFT (s)", "{m:front}+{m:chunks}*" + _step("{m:chunk}", "0", "0", "{m:cached}"))
_d("ttft_full", "TTFT beside a full batch (s)",
   "{m:front}+{m:chunks}*" + _step("{m:chunk}", "{m:c}", "INT({m:c}*({i:prompt_tokens}+{i:max_tokens}/2))",
                                    "{m:cached}"))
_d("delta", "step growth per sequence (s)", "MAX(0,({m:s_sat}-{m:s_idle})/{m:c})")
_d("e2e0", "unloaded E2E (s)", "{m:ttft0}+({i:ttft_steps}+{i:max_tokens}-1)*{m:s_idle}")
_d("knee", "knee (req/s per replica)", "{knee}")
_d("x", "peak per replica (req/s)", "{i:peak_rps}/{i:replicas}")
_d("tpot_x", "TPOT at peak (s)",
   "IF({m:x}>={m:mu},{m:s_sat},{m:s_idle}/(1-MAX({m:x},0)*{i:max_tokens}*{m:delta}))")
_d("batch_x", "batch at peak", "IF({m:x}>={m:mu},{m:c},MAX({m:x},0)*{i:max_tokens}*{m:tpot_x})")
_d("kv_util", "KV utilization at peak", "IF({m:kv_tokens}>0,{m:batch_x}*{m:per_seq}/{m:kv_tokens},1E+300)")
_d("r_load", "load rule (0 on, 1 capped, 2 standard)", "IF({m:x}<={m:knee},0,IF({m:x}<{m:mu},1,2))")
_d("r_kv", "KV rule", "IF({m:kv_util}<={i:kv_threshold},0,1)")
_d("r_lora", "LoRA rule", "IF({i:lora},1,0)")
_d("r_http2", "HTTP/2 rule", "IF({i:http2},0,1)")
_d("mode", "mode code", "MAX({m:r_load},{m:r_kv},{m:r_lora},{m:r_http2})")
_d("turbo_cap_share", "Turbo cap (share of traffic)",
   "IF({m:mode}=2,0,IF({m:x}<={m:knee},1,{m:knee}/{m:x}))")
_d("replicas_needed", "replicas for peak at knee", "MAX(1,ROUNDUP({i:peak_rps}/{m:knee},0))")
_d("recommendation", "recommendation",
   'IF(NOT({m:fits}),"Does not fit",CHOOSE({m:mode}+1,'
   + ",".join(f'"{LABELS[m]}"' for m in MODES) + "))")

_M = {name: col_letter(i + 1) for i, (name, _h, _t) in enumerate(_DERIVED)}
RECOMMENDATION_COLUMN = _M["recommendation"]

# Knee sheet: per iteration, six cells: lo, hi, mid, s(mid), n(mid), e2e(mid).
_K_PER_IT = 6


def _k_col(iteration: int, offset: int) -> str:
    return str(col_letter(2 + iteration * _K_PER_IT + offset))


def _fill(template: str, row: int, sheet: str = "") -> str:
    prefix = f"{sheet}!" if sheet else ""
    out = template
    for name, col in sorted(_IN.items(), key=lambda kv: -len(kv[0])):
        out = out.replace("{i:" + name + "}", f"inputs!${col}{row}")
    for name, col in sorted(_M.items(), key=lambda kv: -len(kv[0])):
        out = out.replace("{m:" + name + "}", f"{prefix}${col}{row}")
    if "{i:" in out or "{m:" in out:
        raise AssertionError(f"unresolved reference in {out}")
    return out


def _knee_cells(row: int) -> list[str]:
    """Formulas of one scenario's bisection row (matrix cells referenced across sheets)."""
    cells: list[str] = [f"=matrix!${_M['scenario']}{row}"]
    m = "matrix"
    target = f"{_fill('{i:knee_factor}', row)}*{m}!${_M['e2e0']}{row}"
    for it in range(KNEE_ITERATIONS):
        lo, hi, mid, s, n, e2e = (f"{_k_col(it, k)}{row}" for k in range(_K_PER_IT))
        if it == 0:
            cells += ["=0", f"={m}!${_M['mu']}{row}"]
        else:
            p_lo, p_hi, p_mid, _s, _n, p_e2e = (f"{_k_col(it - 1, k)}{row}" for k in range(_K_PER_IT))
            cells += [f"=IF({p_e2e}>={target},{p_lo},{p_mid})", f"=IF({p_e2e}>={target},{p_mid},{p_hi})"]
        del lo, hi
        lo_ref, hi_ref = f"{_k_col(it, 0)}{row}", f"{_k_col(it, 1)}{row}"
        cells.append(f"=({lo_ref}+{hi_ref})/2")
        cells.append(_fill("={m:s_idle}/(1-" + mid + "*{i:max_tokens}*{m:delta})", row, m))
        cells.append(_fill("=" + mid + "*{i:max_tokens}*" + s, row, m))
        w = _fill(f"IF({mid}<=0,0,({mid}/{{m:mu}})^SQRT(2*({{m:c}}+1))/({mid}*(1-{mid}/{{m:mu}}))/2)", row, m)
        rho = f"MIN({FRONTEND_BUSY_CAP},{{i:frontend_streamed}}*{n}/{s})"  # the front end's share the others take
        ttft = _fill(f"{w}+(MIN(1,{n})*(0.5+{{i:busy_ttft_steps}})+{{i:ttft_steps}})*{s}+{{m:ttft0}}"
                     f"+{n}/{{m:c}}*({{m:ttft_full}}-{{m:ttft0}})"
                     f"+IF({n}*{{i:frontend_streamed}}>0,{{m:front}}*{rho}/(1-{rho}),0)", row, m)
        cells.append(_fill(f"={ttft}+({{i:max_tokens}}-1)*{s}", row, m))
        del e2e
    last = KNEE_ITERATIONS - 1
    p_mid, p_hi, p_e2e = f"{_k_col(last, 2)}{row}", f"{_k_col(last, 1)}{row}", f"{_k_col(last, 5)}{row}"
    cells.append(f"=IF({p_e2e}>={target},{p_mid},{p_hi})")
    return cells


def knee_result_column() -> str:
    return str(col_letter(2 + KNEE_ITERATIONS * _K_PER_IT))


def _input_values(sc: Scenario) -> dict[str, object]:
    d, m, f, mi = sc.dep, sc.dep.model, sc.dep.factors, sc.matrix
    return {
        "scenario": sc.name, "gpu": d.gpu.name, "tp": d.tp, "weight_dtype": d.weight_dtype,
        "kv_dtype": d.kv_dtype, "gpu_mem_util": d.gpu_mem_util, "block_size": d.block_size,
        "prompt_tokens": sc.prompt_tokens, "max_tokens": sc.max_tokens, "batch_size": sc.max_num_seqs,
        "max_batched": sc.max_num_batched_tokens, "peak_rps": mi.peak_rps, "replicas": mi.replicas,
        "kv_threshold": mi.kv_threshold, "lora": mi.lora_hot_loading, "http2": mi.http2_reuse,
        "knee_factor": mi.knee_factor, "model": m.name, "n_layers": m.n_layers, "hidden": m.hidden_size,
        "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads, "head_dim": m.head_dim,
        "intermediate": m.intermediate_size, "vocab": m.vocab_size, "tie": m.tie_embeddings,
        "n_experts": m.n_experts, "experts_per_token": m.experts_per_token, "mfu": d.effective_mfu,
        "bw_eff": d.bw_efficiency, "step_oh": f.step_overhead_s, "seq_oh": f.per_seq_overhead_s,
        "reserve": f.activation_reserve_bytes, "allreduce": f.tp_allreduce_s, "link_bw": d.link_bytes_per_s,
        "kv_bw_eff": d.kv_bw_efficiency, "ar_growth": f.tp_allreduce_growth_s,
        "decode_ar": "" if f.decode_allreduce_s is None else f.decode_allreduce_s, "ridge": f.ridge_exponent,
        "moe_routing": f.moe_routing_scale, "frontend": f.frontend_s, "frontend_tok": f.frontend_per_token_s,
        "ttft_steps": f.ttft_steps, "busy_ttft_steps": f.busy_ttft_steps,
        "frontend_streamed": f.frontend_per_streamed_token_s, "engine_profile": sc.engine_profile,
    }


@dataclass(frozen=True, slots=True)
class Sheets:
    """The workbook's cells before writing: sheet → (row, col) 1-based → constant or ``=formula``."""

    cells: dict[str, dict[tuple[int, int], object]]
    bold: frozenset[tuple[str, int, int]]  # header cells and the recommendation
    filled: frozenset[tuple[str, int, int]]  # header cells with a background
    gpu_validation: tuple[int, int, int]  # inputs column, first row, last row: a GPU list


def build_sheets(scenarios: Sequence[Scenario]) -> Sheets:
    """The ``inputs``, ``hardware``, ``matrix`` and ``knee`` sheets; ``matrix!recommendation`` recomputes
    from ``inputs``."""
    if not scenarios:
        raise ValueError("at least one scenario is needed")
    cells: dict[str, dict[tuple[int, int], object]] = {"inputs": {}, "hardware": {}, "matrix": {}, "knee": {}}
    bold: set[tuple[str, int, int]] = set()
    filled: set[tuple[str, int, int]] = set()

    def header(sheet: str, col: int, text: str, fill: bool = True) -> None:
        cells[sheet][(1, col)] = text
        bold.add((sheet, 1, col))
        if fill:
            filled.add((sheet, 1, col))

    for c, (_name, head) in enumerate(INPUT_COLUMNS, start=1):
        header("inputs", c, head)
    for r, sc in enumerate(scenarios, start=2):
        values = _input_values(sc)
        for c, (name, _h) in enumerate(INPUT_COLUMNS, start=1):
            cells["inputs"][(r, c)] = values[name]

    hw = cells["hardware"]
    for c, head in enumerate(HW_COLUMNS, start=1):
        header("hardware", c, head, fill=False)
    for r, gpu in enumerate(GPUS.values(), start=HW_FIRST_ROW):
        for c, v in enumerate((gpu.name, gpu.hbm_bytes, gpu.hbm_bandwidth, gpu.bf16_flops, gpu.fp8_flops,
                               gpu.price_per_hour, gpu.source), start=1):
            if v is not None:  # no FP8 figure: a blank cell (the matrix falls back to BF16)
                hw[(r, c)] = v
    dt, db = col_number(DTYPE_COL), col_number(DTYPE_BYTES_COL)
    header("hardware", dt, "dtype", fill=False)
    header("hardware", db, "bytes", fill=False)
    for r, (name, size) in enumerate(DTYPE_BYTES.items(), start=2):
        hw[(r, dt)], hw[(r, db)] = name, size

    last = len(scenarios) + 1
    for c, (_name, head, _t) in enumerate(_DERIVED, start=1):
        header("matrix", c, head)
    knee_col = knee_result_column()
    rec = col_number(RECOMMENDATION_COLUMN)
    for r in range(2, last + 1):
        for c, (name, _h, template) in enumerate(_DERIVED, start=1):
            cells["matrix"][(r, c)] = f"=knee!${knee_col}{r}" if name == "knee" else "=" + _fill(template, r)
        bold.add(("matrix", r, rec))

    knee = cells["knee"]
    header("knee", 1, "scenario", fill=False)
    for it in range(KNEE_ITERATIONS):
        for k, label in enumerate(("lo", "hi", "mid", "s", "n", "e2e")):
            knee[(1, col_number(_k_col(it, k)))] = f"{label}{it}"
    knee[(1, col_number(knee_col))] = "knee"
    for r in range(2, last + 1):
        for c, formula in enumerate(_knee_cells(r), start=1):
            knee[(r, c)] = formula
    return Sheets(cells, frozenset(bold), frozenset(filled), (col_number(_IN["gpu"]), 2, last))


def write_workbook(path: str | Path, scenarios: Sequence[Scenario]) -> Path:
    """Write the sheets with XlsxWriter: each formula with its computed value (:mod:`.formula`), so
    readers that do not recalculate (pandas, previewers) see numbers; spreadsheet apps recalculate on
    load all the same (XlsxWriter sets ``fullCalcOnLoad``)."""
    import xlsxwriter  # the shell's one I/O dependency

    sheets = build_sheets(scenarios)
    book = Book(sheets.cells)
    for (r, c) in sorted(sheets.cells["knee"]):  # the bisection chain left to right: shallow recursion
        book.value("knee", r, c)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)  # e.g. runs/decision.xlsx before any run made runs/
    wb = xlsxwriter.Workbook(str(p))
    formats = {
        (True, False): wb.add_format({"bold": True}),
        (True, True): wb.add_format({"bold": True, "bg_color": "#DDEBF7", "pattern": 1}),
    }
    try:
        for name, grid in sheets.cells.items():
            ws = wb.add_worksheet(name)
            for (r, c), raw in sorted(grid.items()):
                key = (name, r, c)
                fmt = formats.get((key in sheets.bold, key in sheets.filled))
                if isinstance(raw, str) and raw.startswith("="):
                    value = book.value(name, r, c)
                    ws.write_formula(r - 1, c - 1, raw, fmt, 0 if value is None else value)
                elif isinstance(raw, bool):
                    ws.write_boolean(r - 1, c - 1, raw, fmt)
                elif isinstance(raw, str):
                    ws.write_string(r - 1, c - 1, raw, fmt)
                else:
                    ws.write_number(r - 1, c - 1, raw, fmt)
            if name == "inputs":
                col, first, last = sheets.gpu_validation
                ws.data_validation(first - 1, col - 1, last - 1, col - 1,
                                   {"validate": "list", "source": "=" + _hw_range("A")})
    finally:
        wb.close()
    return p

"""The decision matrix as an Excel workbook with live formulas (openpyxl; the only I/O is ``save``).

Sheets:

- ``inputs``   — one row per scenario: GPU, model architecture, deployment, request shape, peak
  load and the matrix's switches.  Edit any cell; everything else recomputes.
- ``hardware`` — the GPU catalog (memory, bandwidth, dense FLOP/s, price) and the dtype sizes.
- ``matrix``   — one row per scenario: the perf model's quantities (weights, KV bytes per token,
  KV capacity, step times, saturation), the load model at peak, each rule's verdict and the
  recommendation — all cell formulas, the same arithmetic as :mod:`turbogate.perf`,
  :mod:`turbogate.plan.latency` and :mod:`turbogate.plan.matrix`.
- ``knee``     — the knee's bisection, :data:`~turbogate.plan.latency.KNEE_ITERATIONS` halvings
  spelled out as cells (no macros, no iterative calculation).

Only functions common to Excel and LibreOffice are used (INDEX/MATCH, ROUNDUP, INT, MOD, SQRT,
POWER via ``^``); no LET or LAMBDA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from openpyxl import Workbook
from openpyxl.styles import Font, PatternFill
from openpyxl.utils import get_column_letter
from openpyxl.worksheet.datavalidation import DataValidation

from turbogate.perf import DTYPE_BYTES, GPUS, Deployment
from turbogate.plan.latency import KNEE_ITERATIONS
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
    ("mfu", "mfu"),
    ("bw_eff", "bandwidth efficiency"),
    ("step_oh", "step overhead (s)"),
    ("seq_oh", "per-sequence overhead (s)"),
    ("reserve", "activation reserve (bytes/GPU)"),
    ("allreduce", "TP all-reduce per layer (s)"),
)

_IN = {name: get_column_letter(i + 1) for i, (name, _h) in enumerate(INPUT_COLUMNS)}

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
    wread = (f"IF({{i:n_experts}}>1,({{m:n_params}}-{{m:n_expert_params}})*{{m:wbytes}}"
             f"+{{m:n_expert_params}}*{{m:wbytes}}*(1-(1-{{i:experts_per_token}}/{{i:n_experts}})^MAX({tokens},1)),"
             f"{{m:n_params}}*{{m:wbytes}})")
    mem = f"(({wread})+{{m:kvb}}*(({dctx})+({pctx}))+{{m:kvb}}*{tokens})"
    overhead = f"({{i:step_oh}}+{{i:seq_oh}}*(({ds})+{n_prefill})+IF({{i:tp}}>1,{{i:allreduce}}*2*{{i:n_layers}},0))"
    return f"IF({tokens}<=0,0,MAX({flops}/{{m:flops}},{mem}/{{m:bw}})+{overhead})"


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
_d("kv_cache", "KV cache bytes",
   "MAX(0,{m:hbm}*{i:gpu_mem_util}*{i:tp}-{m:weights}-{i:reserve}*{i:tp})")
_d("fits", "fits", "{m:kv_cache}>={m:kvb}*{i:block_size}")
_d("kv_tokens", "KV capacity tokens", "INT({m:kv_cache}/({m:kvb}*{i:block_size}))*{i:block_size}")
_d("per_seq", "KV tokens/sequence",
   "ROUNDUP(({i:prompt_tokens}+{i:max_tokens}/2)/{i:block_size},0)*{i:block_size}")
_d("c", "saturation batch",
   "MAX(1,MIN({i:batch_size},INT({m:kv_tokens}/{m:per_seq})))")
_d("sat_prefill", "prefill tokens/step at saturation", "{m:c}*{i:prompt_tokens}/{i:max_tokens}")
_d("spread", "token-budget spread",
   "MAX(1,({m:sat_prefill}+{m:c})/{i:max_batched})")
_d("s_sat", "step at saturation (s)",
   "(" + _step(_banker_round("{m:sat_prefill}/{m:spread}"), "{m:c}",
               "INT({m:c}*({i:prompt_tokens}+{i:max_tokens}/2))", "0",
               "MAX(1," + _banker_round("{m:c}/{i:max_tokens}/{m:spread}") + ")") + ")*{m:spread}")
_d("mu", "saturation rate (req/s)", "{m:c}/({i:max_tokens}*{m:s_sat})")
_d("s_idle", "lone decode step (s)", _step("0", "1", "INT({i:prompt_tokens}+{i:max_tokens}/2)", "0"))
_d("chunks", "prefill chunks", "MAX(1,ROUNDUP({i:prompt_tokens}/{i:max_batched},0))")
_d("chunk", "tokens/chunk", "ROUNDUP({i:prompt_tokens}/{m:chunks},0)")
_d("cached", "cached context/chunk", "INT(({m:chunks}-1)*{m:chunk}/2)")
_d("ttft0", "unloaded TTFT (s)", "{m:chunks}*" + _step("{m:chunk}", "0", "0", "{m:cached}"))
_d("ttft_full", "TTFT beside a full batch (s)",
   "{m:chunks}*" + _step("{m:chunk}", "{m:c}", "INT({m:c}*({i:prompt_tokens}+{i:max_tokens}/2))", "{m:cached}"))
_d("delta", "step growth per sequence (s)", "MAX(0,({m:s_sat}-{m:s_idle})/{m:c})")
_d("e2e0", "unloaded E2E (s)", "{m:ttft0}+({i:max_tokens}-1)*{m:s_idle}")
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

_M = {name: get_column_letter(i + 1) for i, (name, _h, _t) in enumerate(_DERIVED)}
RECOMMENDATION_COLUMN = _M["recommendation"]

# Knee sheet: per iteration, six cells: lo, hi, mid, s(mid), n(mid), e2e(mid).
_K_PER_IT = 6


def _k_col(iteration: int, offset: int) -> str:
    return str(get_column_letter(2 + iteration * _K_PER_IT + offset))


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
        ttft = _fill(f"{w}+MIN(1,{n})*{s}/2+{{m:ttft0}}+{n}/{{m:c}}*({{m:ttft_full}}-{{m:ttft0}})", row, m)
        cells.append(_fill(f"={ttft}+({{i:max_tokens}}-1)*{s}", row, m))
        del e2e
    last = KNEE_ITERATIONS - 1
    p_mid, p_hi, p_e2e = f"{_k_col(last, 2)}{row}", f"{_k_col(last, 1)}{row}", f"{_k_col(last, 5)}{row}"
    cells.append(f"=IF({p_e2e}>={target},{p_mid},{p_hi})")
    return cells


def knee_result_column() -> str:
    return str(get_column_letter(2 + KNEE_ITERATIONS * _K_PER_IT))


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
        "n_experts": m.n_experts, "experts_per_token": m.experts_per_token, "mfu": f.mfu,
        "bw_eff": f.bw_efficiency, "step_oh": f.step_overhead_s, "seq_oh": f.per_seq_overhead_s,
        "reserve": f.activation_reserve_bytes, "allreduce": f.tp_allreduce_s,
    }


def build_workbook(scenarios: Sequence[Scenario]) -> Workbook:
    """A workbook whose ``matrix!recommendation`` column recomputes from the ``inputs`` sheet."""
    if not scenarios:
        raise ValueError("at least one scenario is needed")
    wb = Workbook()
    bold = Font(bold=True)
    head_fill = PatternFill("solid", fgColor="DDEBF7")

    inputs = wb.active
    assert inputs is not None
    inputs.title = "inputs"
    for c, (_name, header) in enumerate(INPUT_COLUMNS, start=1):
        cell = inputs.cell(row=1, column=c, value=header)
        cell.font, cell.fill = bold, head_fill
    for r, sc in enumerate(scenarios, start=2):
        values = _input_values(sc)
        for c, (name, _h) in enumerate(INPUT_COLUMNS, start=1):
            inputs.cell(row=r, column=c, value=values[name])

    hw = wb.create_sheet("hardware")
    for c, header in enumerate(HW_COLUMNS, start=1):
        hw.cell(row=1, column=c, value=header).font = bold
    for r, gpu in enumerate(GPUS.values(), start=HW_FIRST_ROW):
        hw.cell(row=r, column=1, value=gpu.name)
        hw.cell(row=r, column=2, value=gpu.hbm_bytes)
        hw.cell(row=r, column=3, value=gpu.hbm_bandwidth)
        hw.cell(row=r, column=4, value=gpu.bf16_flops)
        hw.cell(row=r, column=5, value=gpu.fp8_flops if gpu.fp8_flops is not None else "")
        hw.cell(row=r, column=6, value=gpu.price_per_hour)
        hw.cell(row=r, column=7, value=gpu.source)
    hw[f"{DTYPE_COL}1"], hw[f"{DTYPE_BYTES_COL}1"] = "dtype", "bytes"
    hw[f"{DTYPE_COL}1"].font = hw[f"{DTYPE_BYTES_COL}1"].font = bold
    for r, (name, size) in enumerate(DTYPE_BYTES.items(), start=2):
        hw[f"{DTYPE_COL}{r}"], hw[f"{DTYPE_BYTES_COL}{r}"] = name, size

    last = len(scenarios) + 1
    gpu_list = DataValidation(type="list", formula1=_hw_range("A"), allow_blank=False)
    inputs.add_data_validation(gpu_list)
    gpu_list.add(f"{_IN['gpu']}2:{_IN['gpu']}{last}")

    matrix = wb.create_sheet("matrix")
    for c, (_name, header, _t) in enumerate(_DERIVED, start=1):
        cell = matrix.cell(row=1, column=c, value=header)
        cell.font, cell.fill = bold, head_fill
    knee_col = knee_result_column()
    for r in range(2, last + 1):
        for c, (name, _h, template) in enumerate(_DERIVED, start=1):
            formula = f"=knee!${knee_col}{r}" if name == "knee" else "=" + _fill(template, r)
            matrix.cell(row=r, column=c, value=formula)
        matrix[f"{RECOMMENDATION_COLUMN}{r}"].font = bold

    knee = wb.create_sheet("knee")
    knee.cell(row=1, column=1, value="scenario").font = bold
    for it in range(KNEE_ITERATIONS):
        for k, label in enumerate(("lo", "hi", "mid", "s", "n", "e2e")):
            knee[f"{_k_col(it, k)}1"] = f"{label}{it}"
    knee[f"{knee_col}1"] = "knee"
    for r in range(2, last + 1):
        for c, formula in enumerate(_knee_cells(r), start=1):
            knee.cell(row=r, column=c, value=formula)

    wb.calculation.fullCalcOnLoad = True
    return wb


def write_workbook(path: str | Path, scenarios: Sequence[Scenario]) -> Path:
    p = Path(path)
    build_workbook(scenarios).save(p)
    return p

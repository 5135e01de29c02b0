"""Accelerator catalog: memory, bandwidth and dense tensor throughput.

Figures are vendor datasheet values for *dense* math (no 2:4 sparsity).  ``link_bandwidth`` is
the datasheet GPU-to-GPU bandwidth one way (NVLink / Infinity Fabric total ÷ 2, or PCIe x16 ÷ 2
where the card has no NVLink); 0 where the datasheet gives none (TPU ICI is not modelled).  Memory is the
usable HBM a process sees (datasheet GB, taken as GiB-scale as nvidia-smi reports them).
``fp8_flops`` is ``None`` where the chip has no FP8 tensor path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from turbogate.errors import CatalogError

GiB = 1024**3
TB = 1e12  # bandwidth and FLOPs use decimal prefixes, as datasheets do
GB = 1e9


@dataclass(frozen=True, slots=True)
class GPU:
    name: str
    hbm_bytes: int
    hbm_bandwidth: float  # bytes/s
    bf16_flops: float  # dense FLOP/s
    fp8_flops: float | None  # dense FLOP/s, None where absent
    source: str
    price_per_hour: float  # indicative on-demand USD/h per chip, for the planner's defaults
    link_bandwidth: float = 0.0  # GPU-to-GPU bytes/s one way (NVLink, Infinity Fabric, PCIe): TP all-reduce
    bw_efficiency: float | None = None  # measured share of datasheet HBM bandwidth; None: PerfFactors' default
    mfu: float | None = None  # measured share of dense FLOP/s a whole prefill sustains; None: PerfFactors' default

    def flops_for(self, dtype: str) -> float:
        """Dense tensor FLOP/s for weights of ``dtype`` (FP8 only where the chip has it)."""
        if dtype in ("fp8", "int8") and self.fp8_flops is not None:
            return self.fp8_flops
        return self.bf16_flops


_CATALOG: tuple[GPU, ...] = (
    # NVIDIA A10 datasheet (A10G is AWS's A10 variant): 24 GB GDDR6, 600 GB/s, BF16 125 TF dense.
    GPU("A10G", 24 * GiB, 0.600 * TB, 125 * TB, None, "NVIDIA A10 datasheet (A10G on AWS G5)", 1.01,
        link_bandwidth=32 * GB),
    # NVIDIA L4 datasheet: 24 GB, 300 GB/s, BF16 121 TF dense, FP8 242.5 TF dense.
    GPU("L4", 24 * GiB, 0.300 * TB, 121 * TB, 242.5 * TB, "NVIDIA L4 datasheet", 0.80, link_bandwidth=32 * GB),
    # NVIDIA L40S datasheet: 48 GB, 864 GB/s, BF16 362 TF dense, FP8 733 TF dense.
    GPU("L40S", 48 * GiB, 0.864 * TB, 362 * TB, 733 * TB, "NVIDIA L40S datasheet", 1.86, link_bandwidth=32 * GB),
    # NVIDIA A100 datasheet (SXM4 40GB): 1,555 GB/s, BF16 312 TF dense, no FP8.
    GPU("A100-40G", 40 * GiB, 1.555 * TB, 312 * TB, None, "NVIDIA A100 datasheet (SXM4 40GB)", 3.67,
        link_bandwidth=300 * GB),
    # NVIDIA A100 datasheet (SXM4 80GB): 2,039 GB/s, BF16 312 TF dense, no FP8.
    GPU("A100-80G-SXM", 80 * GiB, 2.039 * TB, 312 * TB, None, "NVIDIA A100 datasheet (SXM4 80GB)", 4.10,
        link_bandwidth=300 * GB),
    # NVIDIA H100 datasheet (SXM5): 80 GB, 3.35 TB/s, BF16 989 TF dense, FP8 1,979 TF dense.
    GPU("H100-SXM", 80 * GiB, 3.35 * TB, 989 * TB, 1979 * TB, "NVIDIA H100 datasheet (SXM)", 6.98,
        link_bandwidth=450 * GB),
    # NVIDIA H100 datasheet (PCIe): 80 GB, 2.0 TB/s, BF16 756 TF dense, FP8 1,513 TF dense.
    GPU("H100-PCIe", 80 * GiB, 2.0 * TB, 756 * TB, 1513 * TB, "NVIDIA H100 datasheet (PCIe)", 4.76,
        link_bandwidth=300 * GB),
    # NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, BF16 989 TF dense, FP8 1,979 TF dense.
    # bw_efficiency fitted (docs/plan.md): published H200/H100 gain at bandwidth-bound 8B shapes is 1.16,
    # 1.33 at the default 0.8.
    GPU("H200", 141 * GiB, 4.8 * TB, 989 * TB, 1979 * TB, "NVIDIA H200 datasheet (SXM)", 8.00,
        link_bandwidth=450 * GB, bw_efficiency=0.7),
    # NVIDIA DGX B200 datasheet (1,440 GB / 64 TB/s over 8 GPUs): 180 GB, 8 TB/s per GPU;
    # BF16 2.25 PF dense, FP8 4.5 PF dense per GPU.
    GPU("B200", 180 * GiB, 8.0 * TB, 2250 * TB, 4500 * TB, "NVIDIA DGX B200 datasheet, per GPU", 11.00,
        link_bandwidth=900 * GB),
    # NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet: 96 GB GDDR7 (512-bit, 28 Gbps), 1,792 GB/s;
    # 4,000 FP4 AI TOPS with 2:4 sparsity, i.e. 1,000 TF FP8 and 500 TF BF16 dense; PCIe Gen5 x16
    # (64 GB/s one way), no NVLink.
    GPU("RTX-PRO-6000", 96 * GiB, 1.792 * TB, 500 * TB, 1000 * TB,
        "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet", 1.80, link_bandwidth=64 * GB),
    # NVIDIA GH200 Grace Hopper Superchip datasheet (the 144 GB HBM3e version): 4.9 TB/s, the H100's tensor
    # cores (BF16 989 TF, FP8 1,979 TF dense); NVLink 900 GB/s to the other GPUs (450 one way).
    GPU("GH200", 144 * GiB, 4.9 * TB, 989 * TB, 1979 * TB, "NVIDIA GH200 Grace Hopper Superchip datasheet (HBM3e)",
        5.50, link_bandwidth=450 * GB),
    # NVIDIA H100 NVL datasheet: 94 GB, 3.9 TB/s, BF16 835 TF dense (1,671 with sparsity), FP8 1,671 TF dense;
    # NVLink bridge 600 GB/s between a pair (300 one way).
    GPU("H100-NVL", 94 * GiB, 3.9 * TB, 835 * TB, 1671 * TB, "NVIDIA H100 NVL datasheet", 5.00,
        link_bandwidth=300 * GB),
    # AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, BF16 1,307.4 TF dense, FP8 2,614.9 TF dense.
    GPU("MI300X", 192 * GiB, 5.3 * TB, 1307.4 * TB, 2614.9 * TB, "AMD Instinct MI300X datasheet", 4.89,
        link_bandwidth=448 * GB),
    # AMD Instinct MI325X datasheet: 256 GB HBM3E, 6 TB/s, BF16 1,307.4 TF dense, FP8 2,614.9 TF dense;
    # Infinity Fabric 896 GB/s over 7 links (448 one way).
    GPU("MI325X", 256 * GiB, 6.0 * TB, 1307.4 * TB, 2614.9 * TB, "AMD Instinct MI325X datasheet", 5.50,
        link_bandwidth=448 * GB),
    # AMD Instinct MI355X datasheet: 288 GB HBM3E, 8 TB/s, BF16 2.5 PF dense, FP8 5.0 PF dense; Infinity
    # Fabric 1,075 GB/s over 7 links (537.5 one way).
    GPU("MI355X", 288 * GiB, 8.0 * TB, 2516.6 * TB, 5033.2 * TB, "AMD Instinct MI355X datasheet", 8.00,
        link_bandwidth=537.5 * GB),
    # Google Cloud TPU v4 system architecture page: 32 GiB HBM2, 1,200 GB/s, 275 TF BF16, no FP8.
    GPU("TPU-v4", 32 * GiB, 1.2 * TB, 275 * TB, None, "Google Cloud TPU v4 documentation", 3.22),
    # Google Cloud TPU v5e documentation: 16 GB HBM2, 819 GB/s, 197 TF BF16 (394 TOPS int8), no FP8.
    GPU("TPU-v5e", 16 * GiB, 0.819 * TB, 197 * TB, None, "Google Cloud TPU v5e documentation", 1.20),
)

GPUS: Mapping[str, GPU] = {gpu.name: gpu for gpu in _CATALOG}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


_ALIASES: dict[str, str] = {_key(gpu.name): gpu.name for gpu in _CATALOG}
_ALIASES.update(
    {
        "a10": "A10G",
        "a100": "A100-80G-SXM",
        "a10080g": "A100-80G-SXM",
        "a10080gb": "A100-80G-SXM",
        "a10040gb": "A100-40G",
        "h100": "H100-SXM",
        "h100sxm5": "H100-SXM",
        "h200sxm": "H200",
        "rtxpro6000blackwell": "RTX-PRO-6000",
        "rtxpro6000blackwellserveredition": "RTX-PRO-6000",
        "rtx6000pro": "RTX-PRO-6000",
        "mi300": "MI300X",
        "mi325": "MI325X",
        "mi355": "MI355X",
        "h100nvl94gb": "H100-NVL",
        "gh200144gb": "GH200",
        "gh200480gb": "GH200",
        "tpuv5litepod": "TPU-v5e",
        "v5e": "TPU-v5e",
        "v4": "TPU-v4",
    }
)


def get_gpu(name: str) -> GPU:
    """Look up a GPU by name, forgiving case and punctuation (``h100_sxm`` = ``H100-SXM``)."""
    canonical = _ALIASES.get(_key(name))
    if canonical is None:
        known = ", ".join(GPUS)
        raise CatalogError(f"unknown GPU {name!r}; known: {known}")
    return GPUS[canonical]

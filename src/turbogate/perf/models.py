"""Model catalog and Hugging Face ``config.json`` loading.

Parameter counts are derived from the architecture (so a custom config gets the same
treatment as a catalog entry); catalog entries are checked against the published totals in
the tests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turbogate.errors import CatalogError


@dataclass(frozen=True, slots=True)
class ModelSpec:
    name: str
    n_layers: int
    hidden_size: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_context: int
    tie_embeddings: bool = False
    n_experts: int = 1  # MoE: experts per layer (1 = dense)
    experts_per_token: int = 1  # MoE: experts each token is routed to

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def attention_params_per_layer(self) -> int:
        q_and_o = 2 * self.hidden_size * self.n_heads * self.head_dim
        k_and_v = 2 * self.hidden_size * self.n_kv_heads * self.head_dim
        return q_and_o + k_and_v

    @property
    def expert_params_per_layer(self) -> int:
        """One gated MLP (gate, up, down projections)."""
        return 3 * self.hidden_size * self.intermediate_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2)

    @property
    def n_params(self) -> int:
        """Total parameters (all experts)."""
        per_layer = self.attention_params_per_layer + self.n_experts * self.expert_params_per_layer
        router = self.hidden_size * self.n_experts if self.is_moe else 0
        return self.n_layers * (per_layer + router) + self.embedding_params

    @property
    def n_active_params(self) -> int:
        """Parameters touched per token (routed experts only)."""
        per_layer = self.attention_params_per_layer + self.experts_per_token * self.expert_params_per_layer
        return self.n_layers * per_layer + self.embedding_params

    @property
    def n_expert_params(self) -> int:
        return self.n_layers * self.n_experts * self.expert_params_per_layer


_CATALOG: tuple[ModelSpec, ...] = (
    # meta-llama/Llama-3.1-8B config.json (8.03B parameters).
    ModelSpec("llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072),
    # meta-llama/Llama-3.1-70B config.json (70.6B parameters).
    ModelSpec("llama-3.1-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072),
    # meta-llama/Llama-3.3-70B-Instruct config.json: the 3.1-70B architecture, new weights (70.6B).
    ModelSpec("llama-3.3-70b", 80, 8192, 64, 8, 128, 28672, 128256, 131072),
    # meta-llama/Llama-3.2-1B config.json (1.24B, tied embeddings): a small model for fast tests.
    ModelSpec("llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, tie_embeddings=True),
    # Qwen/Qwen2.5-7B config.json (7.6B parameters; 28 query heads, 4 KV heads).
    ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 32768),
    # mistralai/Mistral-7B-v0.3 config.json (7.25B parameters).
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32768, 32768),
    # meta-llama/Llama-3.1-405B config.json (405.9B parameters; 126 layers, 16 query heads per KV head).
    ModelSpec("llama-3.1-405b", 126, 16384, 128, 8, 128, 53248, 128256, 131072),
    # meta-llama/Llama-2-7b-hf config.json (6.74B parameters; no GQA, 4,096-token context).
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, 4096),
    # meta-llama/Llama-2-13b-hf config.json (13.0B parameters; no GQA).
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, 4096),
    # meta-llama/Llama-2-70b-hf config.json (69.0B parameters; 8 KV heads).
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, 4096),
    # mistralai/Mixtral-8x7B-v0.1 config.json (46.7B total, 12.9B active: 8 experts, top-2).
    ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768, n_experts=8, experts_per_token=2),
)

MODELS: Mapping[str, ModelSpec] = {m.name: m for m in _CATALOG}


def _key(name: str) -> str:
    name = name.lower().rsplit("/", 1)[-1]
    name = re.sub(r"(-(instruct|chat|hf|v0\.\d|it))+$", "", name)
    name = name.replace("meta-", "")
    return re.sub(r"[^a-z0-9.]", "", name)


_ALIASES: dict[str, str] = {_key(m.name): m.name for m in _CATALOG}
_ALIASES.update({"llama3.18b": "llama-3.1-8b", "llama38b": "llama-3.1-8b", "llama370b": "llama-3.1-70b"})


def get_model(name: str) -> ModelSpec:
    """A catalog model by name (``meta-llama/Llama-3.1-8B-Instruct`` works too)."""
    canonical = _ALIASES.get(_key(name))
    if canonical is None:
        raise CatalogError(f"unknown model {name!r}; known: {', '.join(MODELS)} (or pass a config.json path)")
    return MODELS[canonical]


def model_from_hf_config(config: Mapping[str, Any], name: str = "custom") -> ModelSpec:
    """Build a spec from a parsed Hugging Face ``config.json`` mapping.

    ``head_dim`` is taken from the config when given (Qwen3, Gemma and others set it apart
    from hidden/heads), else hidden_size / num_attention_heads.
    """
    cfg = dict(config)
    if "text_config" in cfg and "hidden_size" not in cfg:  # multimodal wrappers
        cfg = dict(cfg["text_config"])
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        layers = int(cfg["num_hidden_layers"])
        vocab = int(cfg["vocab_size"])
    except KeyError as exc:
        raise CatalogError(f"model config lacks required field {exc.args[0]!r}") from exc
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"model config has a non-integer field: {exc}") from exc
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    intermediate = int(cfg.get("intermediate_size") or cfg.get("moe_intermediate_size") or 4 * hidden)
    n_experts = int(cfg.get("num_local_experts") or cfg.get("num_experts") or 1)
    per_token = int(cfg.get("num_experts_per_tok") or 1) if n_experts > 1 else 1
    if n_experts > 1 and cfg.get("moe_intermediate_size"):
        intermediate = int(cfg["moe_intermediate_size"])
    return ModelSpec(
        name=name,
        n_layers=layers,
        hidden_size=hidden,
        n_heads=heads,
        n_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_context=int(cfg.get("max_position_embeddings") or 4096),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        n_experts=n_experts,
        experts_per_token=per_token,
    )


def load_hf_config(path: str | Path) -> ModelSpec:
    """Load a local Hugging Face ``config.json`` (a file, or a folder holding one)."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        data = json.loads(p.read_text())
    except FileNotFoundError as exc:
        raise CatalogError(f"model config not found: {p}") from exc
    except json.JSONDecodeError as exc:
        raise CatalogError(f"model config {p} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CatalogError(f"model config {p} is not a JSON object")
    name = p.parent.name if p.name == "config.json" and p.parent.name else p.stem
    return model_from_hf_config(data, name=name)


def resolve_model(name_or_path: str) -> ModelSpec:
    """A catalog name, or a path to a local ``config.json`` / model folder."""
    p = Path(name_or_path)
    if name_or_path.endswith(".json") or p.is_dir() or p.is_file():
        return load_hf_config(p)
    return get_model(name_or_path)

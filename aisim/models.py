"""Model architecture facts from shipped Hugging Face config.json files (data/models/)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aisim.errors import ConfigError

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "float8_e4m3fn": 1}


@dataclass(frozen=True)
class ModelArch:
    model_id: str
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    dtype_bytes: int
    hidden_size: int = 0
    intermediate_size: int = 0
    vocab_size: int = 0
    model_type: str = ""
    torch_dtype: str = "bfloat16"
    use_qk_norm: bool = False  # Qwen3 normalises q and k per head before RoPE
    # MoE, MLA / DSA and checkpoint quantization (read by aisim/memory.py); 0 / "" if absent
    num_experts: int = 0  # routed experts (num_experts or n_routed_experts)
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    num_shared_experts: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0  # DSA: keys each query attends to once the context exceeds it
    weight_quant: str = ""  # checkpoint weight quantization: "", "fp8" or "fp8_block"


def shipped_model_ids() -> list[str]:
    folder = resources.files("aisim.data") / "models"
    return sorted(
        p.name[: -len("_config.json")].replace("--", "/")
        for p in folder.iterdir()
        if p.name.endswith("_config.json")
    )


def load_model(model: str, field: str = "engine.model", base_dir: Path | None = None) -> ModelArch:
    """A shipped model id (e.g. Qwen/Qwen3-32B) or a path to a config.json."""
    raw = _read_config(model, field, base_dir)
    try:
        heads = int(raw["num_attention_heads"])
        kv_heads = int(raw.get("num_key_value_heads", heads))
        head_dim = int(raw.get("head_dim") or raw["hidden_size"] // heads)
        return ModelArch(
            model_id=model,
            num_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=head_dim,
            max_position_embeddings=int(raw["max_position_embeddings"]),
            dtype_bytes=_DTYPE_BYTES.get(str(raw.get("torch_dtype", "bfloat16")), 2),
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw.get("intermediate_size") or 0),
            vocab_size=int(raw.get("vocab_size") or 0),
            model_type=str(raw.get("model_type", "")),
            torch_dtype=str(raw.get("torch_dtype", "bfloat16")),
            use_qk_norm=str(raw.get("model_type", "")).startswith("qwen3"),
            num_experts=_int(raw, "num_experts") or _int(raw, "n_routed_experts"),
            num_experts_per_tok=_int(raw, "num_experts_per_tok"),
            moe_intermediate_size=_int(raw, "moe_intermediate_size"),
            num_shared_experts=_int(raw, "n_shared_experts"),
            q_lora_rank=_int(raw, "q_lora_rank"),
            kv_lora_rank=_int(raw, "kv_lora_rank"),
            qk_nope_head_dim=_int(raw, "qk_nope_head_dim"),
            qk_rope_head_dim=_int(raw, "qk_rope_head_dim"),
            v_head_dim=_int(raw, "v_head_dim"),
            index_n_heads=_int(raw, "index_n_heads"),
            index_head_dim=_int(raw, "index_head_dim"),
            index_topk=_int(raw, "index_topk"),
            weight_quant=_weight_quant(raw.get("quantization_config")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{field}: model config {model!r} lacks a usable {exc}") from None


def _int(raw: dict, key: str) -> int:
    value = raw.get(key)
    return int(value) if value is not None else 0


def _weight_quant(qcfg) -> str:
    """'fp8_block' for block-scaled fp8 checkpoints, 'fp8' for other fp8 ones, else ''."""
    if not isinstance(qcfg, dict) or str(qcfg.get("quant_method", "")).lower() != "fp8":
        return ""
    return "fp8_block" if qcfg.get("weight_block_size") else "fp8"


def _read_config(model: str, field: str, base_dir: Path | None) -> dict:
    name = model.replace("/", "--") + "_config.json"
    shipped = resources.files("aisim.data") / "models" / name
    if shipped.is_file():
        return json.loads(shipped.read_text())
    path = Path(model)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" and path.is_file():
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{field}: cannot read model config {path}: {exc}") from None
    known = ", ".join(shipped_model_ids())
    raise ConfigError(
        f"{field}: unknown model {model!r}; use a shipped model ({known}) "
        "or a path to a Hugging Face config.json"
    )

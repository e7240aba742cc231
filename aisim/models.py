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

    def kv_bytes_per_token(self, tensor_parallel: int) -> int:
        """K and V of one token on one rank: 2 x layers x (kv_heads / TP) x head_dim x bytes."""
        kv_heads = max(1, self.num_kv_heads // tensor_parallel)
        return 2 * self.num_layers * kv_heads * self.head_dim * self.dtype_bytes


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
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{field}: model config {model!r} lacks a usable {exc}") from None


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

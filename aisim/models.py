"""Model architecture facts from shipped Hugging Face config.json files (data/models/)."""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aisim.errors import ConfigError

HF_QUANT_FILE = "hf_quant_config.json"
"""A quantization description some checkpoints (ModelOpt exports) keep beside config.json."""


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
    # checkpoint quantization as AISimulate reads it (see checkpoint_quantization)
    weight_quant: str = ""  # weight algorithm: "" (none), "fp8", "fp8_block", "nvfp4", ...
    kv_cache_quant: str = ""  # declared KV cache dtype: "" (none declared), "fp8", "bfloat16"
    quant_source: str = ""  # where the declaration is: "quantization_config" or HF_QUANT_FILE
    # the weight algorithm covers the routed experts alone: the checkpoint's ignore list keeps
    # attention and shared-expert GEMMs bf16, and the KV cache stays bf16 unless declared
    experts_only_quant: bool = False
    # attention projection groups ("q", "kv", "o", "indexer") and shared experts the
    # checkpoint's exclusion lists keep unquantized (see quant_exclusions)
    attention_excluded: tuple[str, ...] = ()  # sorted
    shared_experts_excluded: bool = False
    # an entry inside the attention block names none of its projections (GLM-5-FP8's
    # `self_attn.q_a_layernorm`): read per backend and plan (attention_excluded_on)
    attention_other_excluded: bool = False
    # layers that attend within a window of `sliding_window` tokens (gpt-oss: `layer_types`
    # lists them as "sliding_attention"; Llama-4: half the layers, chunked attention of
    # `attention_chunk_size`); 0 = every layer attends in full
    banded_layers: int = 0
    sliding_window: int = 0
    # Llama-4: every moe_layer_step-th layer is an MoE layer, the others dense FFNs of width
    # dense_intermediate_size (`interleave_moe_layer_step`, `intermediate_size_mlp`)
    moe_layer_step: int = 1
    dense_intermediate_size: int = 0
    # DSA layers that reuse another layer's indexer top-k (GLM-5.2 / 5.3 `indexer_types`
    # "shared"): vLLM's module tables price them from their skip_indexer rows
    shared_indexer_layers: int = 0


def shipped_model_ids() -> list[str]:
    folder = resources.files("aisim.data") / "models"
    return sorted(
        p.name[: -len("_config.json")].replace("--", "/")
        for p in folder.iterdir()
        if p.name.endswith("_config.json") and not p.name.endswith(f"_{HF_QUANT_FILE}")
    )


def load_model(model: str, field: str = "engine.model", base_dir: Path | None = None) -> ModelArch:
    """A shipped model id (e.g. Qwen/Qwen3-32B) or a path to a config.json."""
    raw, hf_quant = _read_config(model, field, base_dir)
    raw = _language_model(raw)
    weights, kv, where = checkpoint_quantization(raw, hf_quant)
    experts_only = weights == INT4_WEIGHT_ONLY and _experts_only(raw.get("quantization_config"))
    if weights == MXFP4 and _experts_only(
        raw.get("quantization_config"), "modules_to_not_convert", _GQA_ATTENTION
    ):
        weights, experts_only = MXFP4_WEIGHT_ONLY, True
    attention_excluded, shared_excluded, other_excluded = quant_exclusions(raw, hf_quant)
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
            dtype_bytes=dtype_bytes(raw),
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw.get("intermediate_size") or 0),
            vocab_size=int(raw.get("vocab_size") or 0),
            model_type=str(raw.get("model_type", "")),
            torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "bfloat16"),
            use_qk_norm=_qk_norm(raw),
            num_experts=_int(raw, "num_experts")
            or _int(raw, "n_routed_experts")
            or _int(raw, "num_local_experts"),  # Mixtral's name for it
            num_experts_per_tok=_int(raw, "num_experts_per_tok"),
            moe_intermediate_size=_int(raw, "moe_intermediate_size")
            or (int(raw.get("intermediate_size") or 0) if _int(raw, "num_local_experts") else 0),
            num_shared_experts=_int(raw, "n_shared_experts"),
            q_lora_rank=_int(raw, "q_lora_rank"),
            kv_lora_rank=_int(raw, "kv_lora_rank"),
            qk_nope_head_dim=_int(raw, "qk_nope_head_dim"),
            qk_rope_head_dim=_int(raw, "qk_rope_head_dim"),
            v_head_dim=_int(raw, "v_head_dim"),
            index_n_heads=_int(raw, "index_n_heads"),
            index_head_dim=_int(raw, "index_head_dim"),
            index_topk=_int(raw, "index_topk"),
            weight_quant=weights,
            kv_cache_quant=kv,
            quant_source=where,
            experts_only_quant=experts_only,
            attention_excluded=attention_excluded,
            shared_experts_excluded=shared_excluded,
            attention_other_excluded=other_excluded,
            banded_layers=_banded_layers(raw),
            sliding_window=_window(raw) if _banded_layers(raw) else 0,
            moe_layer_step=_int(raw, "interleave_moe_layer_step") or 1,
            dense_intermediate_size=_int(raw, "intermediate_size_mlp"),
            shared_indexer_layers=_count(raw.get("indexer_types"), "shared"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{field}: model config {model!r} lacks a usable {exc}") from None


def _language_model(raw: dict) -> dict:
    """The language model of a multimodal wrapper (Kimi-K2.5: architecture figures under
    `text_config`), with the wrapper's own quantization_config when it has one (an NVIDIA
    ModelOpt export), else text_config's; a text model's config as it is."""
    text = raw.get("text_config")
    if "num_hidden_layers" in raw or not isinstance(text, dict):
        return raw
    merged = dict(text)
    if "quantization_config" in raw:
        merged["quantization_config"] = raw["quantization_config"]
    merged.setdefault("torch_dtype", raw.get("torch_dtype") or raw.get("dtype"))
    return merged


# model types whose sliding-window layers AISimulate prices as such (gpt-oss's also hold one
# window of KV); it reads other models' `layer_types` as full attention (oracle: a Qwen3-8B and
# a Mixtral given sliding layers price as without them)
BANDED_MODEL_TYPES = ("gpt_oss",)
WINDOWED_KV_MODEL_TYPES = BANDED_MODEL_TYPES
# Llama-4: AISimulate prices half the layers with chunked attention (the attention tables'
# rows at window_size = attention_chunk_size), whatever the config says of which layers
LLAMA4 = "llama4_text"


def _banded_layers(raw: dict) -> int:
    """How many layers attend within a window: those `layer_types` marks as sliding-window
    attention, for a model type whose banded layers are priced as such; half of Llama-4's."""
    if raw.get("model_type") == LLAMA4 and raw.get("attention_chunk_size"):
        return int(raw["num_hidden_layers"]) // 2
    if raw.get("model_type") not in BANDED_MODEL_TYPES:
        return 0
    return _count(raw.get("layer_types"), "sliding_attention")


def _count(kinds, kind: str) -> int:
    return sum(k == kind for k in kinds) if isinstance(kinds, list) else 0


def _window(raw: dict) -> int:
    return (
        _int(raw, "attention_chunk_size")
        if raw.get("model_type") == LLAMA4
        else _int(raw, "sliding_window")
    )


# Qwen3 and MiniMax-M2 normalise q and k per head before RoPE: AISimulate keys the extras on the
# architecture, not on the config's own use_qk_norm flag, and leaves them out of the Qwen3-VL
# language models (oracle: Qwen3-VL-8B's attention is Qwen3-8B's less the extras, 0.950663 ms
# per pass at TP1 in both phases)
QK_NORM_MODEL_TYPES = ("qwen3", "qwen3_moe", "minimax_m2")


def _qk_norm(raw: dict) -> bool:
    return str(raw.get("model_type", "")) in QK_NORM_MODEL_TYPES


def _int(raw: dict, key: str) -> int:
    value = raw.get(key)
    return int(value) if value is not None else 0


def dtype_bytes(raw: dict) -> int:
    """Bytes of one checkpoint element from torch_dtype (or the newer `dtype` key), as AISimulate
    sizes a P/D KV transfer: 4 for fp32, 1 for any 8-bit type, else 2 (also when absent)."""
    name = str(raw.get("torch_dtype") or raw.get("dtype") or "").lower()
    if name in ("float32", "fp32"):
        return 4
    if any(tag in name for tag in ("fp8", "float8", "int8")):
        return 1
    return 2


def _lower(value) -> str:
    return str(value).strip().lower() if value is not None else ""


def _kv_dtype(value) -> str:
    name = _lower(value)
    if name in ("e4m3", "e5m2"):
        return "fp8"
    return "bfloat16" if name in ("fp16", "float16", "bf16") else name


def checkpoint_quantization(raw: dict, hf_quant: dict | None) -> tuple[str, str, str]:
    """(weight algorithm, KV cache dtype, where declared) of a checkpoint, "" when undeclared.

    AISimulate reads two declarations of a text model: config.json's root `quantization_config`
    (quant_algo / quant_method / quantization_method for the weights, fp8 with a
    weight_block_size being fp8_block; kv_cache_quant_algo / kv_cache_quant_method /
    kv_cache_dtype or a kv_cache_scheme for the KV cache) and the `quantization` section of an
    hf_quant_config.json beside it, which wins. A `quantization_config` nested in text_config
    counts only for multimodal architectures, and torch_dtype never changes the pricing
    (oracle: float16 / float32 / float8 Qwen3-32B checkpoints give the bf16 figures).
    """
    hf = hf_quant.get("quantization") if isinstance(hf_quant, dict) else None
    hf = hf if isinstance(hf, dict) else {}
    if "quantization_config" in raw:
        qcfg = raw["quantization_config"]
        qcfg = qcfg if isinstance(qcfg, dict) else {}
    else:  # the hf_quant_config.json stands in for a missing quantization_config
        qcfg = {
            "quant_method": hf.get("quant_algo") or hf.get("quantization_algo"),
            "kv_cache_quant_method": hf.get("kv_cache_quant_algo"),
        }
    weights = _lower(
        hf.get("quant_algo")
        or qcfg.get("quant_algo")
        or qcfg.get("quant_method")
        or qcfg.get("quantization_method")
    )
    if weights == COMPRESSED_TENSORS and _int4_weight_only(qcfg):
        weights = INT4_WEIGHT_ONLY
    elif weights == "fp8" and qcfg.get("weight_block_size"):
        weights = "fp8_block"
    elif weights == "fp8" and not _dynamic_activations(qcfg):
        weights = "fp8_static"  # per-tensor fp8 is static unless the checkpoint says dynamic
    kv = _kv_dtype(
        hf.get("kv_cache_quant_algo")
        or qcfg.get("kv_cache_quant_algo")
        or qcfg.get("kv_cache_quant_method")
        or qcfg.get("kv_cache_dtype")
    )
    scheme = qcfg.get("kv_cache_scheme")
    if not kv and isinstance(scheme, dict):
        kind, bits = _lower(scheme.get("type")), scheme.get("num_bits")
        if "fp8" in kind or (kind == "float" and isinstance(bits, int) and bits <= 8):
            kv = "fp8"
        elif kind == "float" and isinstance(bits, int) and bits >= 16:
            kv = "bfloat16"
    from_hf = bool(
        hf.get("quant_algo")
        or hf.get("kv_cache_quant_algo")
        or ("quantization_config" not in raw and hf.get("quantization_algo"))
    )
    where = "" if not (weights or kv) else HF_QUANT_FILE if from_hf else "quantization_config"
    return weights, kv, where


COMPRESSED_TENSORS = "compressed-tensors"
INT4_WEIGHT_ONLY = "int4_wo"  # the moe table's dtype of int4 weights with bf16 activations
MXFP4 = "mxfp4"
MXFP4_WEIGHT_ONLY = "w4a16_mxfp4"  # the moe table's dtype of MXFP4 experts, bf16 activations
# module names of one MoE decoder layer whose GEMMs AISimulate prices at the checkpoint's
# weight algorithm unless its ignore list names them (oracle: an int4 Kimi-K2.5 whose ignore
# list drops attention and shared experts reads int4_wo GEMM rows, a table miss)
_ATTENTION_AND_SHARED = (
    "model.layers.1.self_attn.q_a_proj",
    "model.layers.1.self_attn.kv_a_proj_with_mqa",
    "model.layers.1.self_attn.q_b_proj",
    "model.layers.1.self_attn.kv_b_proj",
    "model.layers.1.self_attn.o_proj",
    "model.layers.1.mlp.shared_experts.gate_proj",
    "model.layers.1.mlp.shared_experts.up_proj",
    "model.layers.1.mlp.shared_experts.down_proj",
)
_GQA_ATTENTION = tuple(f"model.layers.1.self_attn.{p}_proj" for p in "qkvo")
_ROUTED_EXPERT = "model.layers.1.mlp.experts.0.gate_proj"


def _int4_weight_only(qcfg: dict) -> bool:
    """A compressed-tensors declaration of 4-bit integer weights with unquantized activations
    in every config group (w4a16: the moe table's int4_wo rows)."""
    groups = qcfg.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return False
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not isinstance(weights, dict) or group.get("input_activations") is not None:
            return False
        if _lower(weights.get("type")) != "int" or weights.get("num_bits") != 4:
            return False
    return True


def _experts_only(qcfg, key: str = "ignore", kept=_ATTENTION_AND_SHARED) -> bool:
    """Whether an exclusion list (compressed-tensors' `ignore`, an MXFP4 checkpoint's
    `modules_to_not_convert`) keeps every GEMM of `kept` (attention and shared experts)
    unquantized while the routed experts stay quantized. Entries are names, name suffixes,
    `re:` patterns or globs (`model.layers.*.self_attn` covers the block's projections)."""
    ignore = qcfg.get(key) if isinstance(qcfg, dict) else None
    if not isinstance(ignore, list):
        return False

    def ignored(name: str) -> bool:
        for entry in ignore:
            entry = str(entry)
            if entry.startswith("re:"):
                if re.match(entry[3:], name):
                    return True
            elif (
                name == entry
                or name.endswith("." + entry)
                or fnmatch.fnmatchcase(name, entry)
                or fnmatch.fnmatchcase(name, entry + ".*")
            ):
                return True
        return False

    return all(map(ignored, kept)) and not ignored(_ROUTED_EXPERT)


# attention projection groups and the module names that place an exclusion entry in each
_PROJECTION_GROUPS = {
    "q": ("q_a_proj", "q_b_proj", "q_proj"),
    "kv": ("kv_a_proj", "kv_b_proj", "kv_proj", "k_proj", "v_proj"),
    "o": ("o_proj",),
    "indexer": ("indexer",),
}
_WHOLE_BLOCK_TAILS = ("", "*", ".*")
# The DSA indexer's own weights (wq_b, weights_proj) stay bf16 in the memory model only when an
# entry covers the whole indexer module (DeepSeek-V3.2-NVFP4's `self_attn.indexer*`), not when
# it names a part of it (GLM-5-FP8's `indexers_proj`, `indexer.k_norm`; oracle `--detail
# memory`: 18,747,392 B a layer more on V3.2-NVFP4 at attention-DP 8, GLM-5-FP8 unchanged)
INDEXER_WEIGHTS = "indexer_weights"
_WHOLE_INDEXER_TAILS = (".indexer", ".indexer*", ".indexer.*")


def quant_exclusions(raw: dict, hf_quant: dict | None) -> tuple[tuple[str, ...], bool, bool]:
    """(attention projection groups kept unquantized, whether the shared experts are, whether
    an entry inside the attention block names none of its projections) from every exclusion
    list a checkpoint declares: config.json's quantization_config (modules_to_not_convert /
    exclude_modules / ignore) and hf_quant_config.json's (exclude_modules / ignore). An entry
    naming the whole attention block (`...self_attn*`) covers every group; other entries count
    by the projection they name (oracle: GLM-5 / GLM-5.1 / Kimi-K2.5 NVFP4 exclude the block,
    DeepSeek-V3.1 / V3.2 NVFP4 only q / kv and the indexer; docs/timing.md 3.5, 3.6). An entry
    under `self_attn` naming no projection (a norm) is kept apart: attention_excluded_on."""
    qcfg = raw.get("quantization_config")
    hf = hf_quant.get("quantization") if isinstance(hf_quant, dict) else None
    entries: list[str] = []
    for section, keys in (
        (qcfg, ("modules_to_not_convert", "exclude_modules", "ignore")),
        (hf, ("exclude_modules", "ignore")),
    ):
        for key in keys if isinstance(section, dict) else ():
            value = section.get(key)
            entries += [str(e) for e in value] if isinstance(value, list) else []
    groups: set[str] = set()
    other = False
    for entry in entries:
        tail = entry.rsplit("self_attn", 1)[1] if "self_attn" in entry else None
        if tail in _WHOLE_BLOCK_TAILS:
            groups.update(_PROJECTION_GROUPS)
            continue
        named = {g for g, names in _PROJECTION_GROUPS.items() if any(n in entry for n in names)}
        groups |= named
        if tail in _WHOLE_INDEXER_TAILS:
            groups.add(INDEXER_WEIGHTS)
        other = other or ("self_attn" in entry and not named)
    return tuple(sorted(groups)), any("shared_expert" in e for e in entries), other


def attention_excluded_on(model: ModelArch, backend: str) -> frozenset[str]:
    """The attention projection groups a backend's plan keeps unquantized. An exclusion entry
    under `self_attn` naming no projection (GLM-5-FP8's q_a / kv_a layernorms) excludes the
    whole block on TRT-LLM (DSA and dense MLA) and in vLLM's dense MLA plan, not in vLLM's DSA
    plan (oracle, one entry at a time on GLM-5-FP8, DeepSeek-V3.2 and DeepSeek-V3: module rows
    and resident weights; docs/timing.md 3.5)."""
    groups = frozenset(model.attention_excluded)
    vllm_dsa = backend == "vllm" and model.index_n_heads > 0
    if model.attention_other_excluded and not vllm_dsa:
        return frozenset(_PROJECTION_GROUPS)
    return groups


def _dynamic_activations(qcfg: dict) -> bool:
    """Whether a per-tensor fp8 declaration marks its activation scales dynamic
    (`activation_scheme: dynamic`, or `dynamic: true` on a config group's input activations)."""
    if _lower(qcfg.get("activation_scheme")) == "dynamic":
        return True
    groups = qcfg.get("config_groups")
    for group in groups.values() if isinstance(groups, dict) else ():
        acts = group.get("input_activations") if isinstance(group, dict) else None
        if isinstance(acts, dict) and acts.get("dynamic") is True:
            return True
    return False


def _json(path: Path, field: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{field}: cannot read model config {path}: {exc}") from None


def _read_config(model: str, field: str, base_dir: Path | None) -> tuple[dict, dict | None]:
    """config.json of the model, and the hf_quant_config.json beside it (None if absent)."""
    stem = model.replace("/", "--")
    shipped = resources.files("aisim.data") / "models" / f"{stem}_config.json"
    if shipped.is_file():
        quant = resources.files("aisim.data") / "models" / f"{stem}_{HF_QUANT_FILE}"
        return (
            json.loads(shipped.read_text()),
            json.loads(quant.read_text()) if quant.is_file() else None,
        )
    path = Path(model)
    if base_dir is not None and not path.is_absolute():
        path = base_dir / path
    if path.is_dir():
        path = path / "config.json"
    if path.suffix == ".json" and path.is_file():
        quant = path.parent / HF_QUANT_FILE
        return _json(path, field), _json(quant, field) if quant.is_file() else None
    known = ", ".join(shipped_model_ids())
    raise ConfigError(
        f"{field}: unknown model {model!r}; use a shipped model ({known}) "
        "or a path to a Hugging Face config.json"
    )

"""Valid AISimulate configs that ask for something aisim does not simulate yet.

:func:`unsupported_features` returns one human line per such request so the caller can stop
with a :class:`aisim.errors.NotAvailableError` instead of silently simulating something else.
When a feature lands, drop its id from :data:`NOT_YET_AVAILABLE`.
"""

from __future__ import annotations

from collections.abc import Iterator

from aisim.config.estimator import is_default_estimator_config, is_packaged_systems_root
from aisim.config.schema import (
    Config,
    DefaultCapacity,
    DefaultTiming,
    FixedTiming,
    SyntheticSource,
    Worker,
)

NOT_YET_AVAILABLE = frozenset(
    {
        "speculation",
        "afd",
        "sglang",
        "fpm_estimation",  # estimation modes other than auto / op_level
        "timing_identity",  # quantization / kernel-backend overrides
        "moe_controls_dense",  # enable_eplb / wideep_num_slots on a dense model
        "moe_backend",  # DeepEP / MegaMoE MoE backend (SGLang only in AISimulate 0.13)
        "estimator_options",  # non-default estimator_config, other systems roots, fpm_profile
        "trace_format",  # trace formats other than mooncake / mooncake-delta
        "session_source",  # synthetic-session traffic on P/D pools
        "images",
        "context_parallel",
        "kv_offload",  # host_offload, g3_offload, kvcr, state_cache, prefix_match_unit
        "host_model",  # host_loop, frontend, host_profile, vision
        "checkpoint_quantization",  # quantized checkpoints other than DeepSeek fp8_block
        "mla_checkpoint_quantization",  # MLA / DSA checkpoints other than the two below
    }
)
"""Feature ids that aisim does not implement yet."""

_NOTE = "is not available yet in aisim"

_FIXES = {
    "moe_controls_dense": "AISimulate refuses it too (EPLB and wide-EP slots need an MoE "
    "model); remove it",
    "moe_backend": "AISimulate 0.13 takes it with backend sglang only",
    "session_source": "run the sessions on an aggregated deployment",
    "estimator_options": "leave it out, or keep the values `aisimulate recommend` writes "
    "(AISimulate's defaults and its packaged database)",
    "default_capacity": "set capacity: {type: fixed, blocks: N}",
    "op_level_timing": "it comes with the op-time table",
    "mla_checkpoint_quantization": "the MLA / DSA plans price block-fp8 checkpoints, int4 "
    "routed experts beside bf16 GEMMs (moonshotai/Kimi-K2.5) and NVFP4 exports with an fp8 KV "
    "cache whose MLA block is bf16 or NVFP4 throughout (nvidia/Kimi-K2.5-NVFP4); "
    "use one, or fixed / polynomial timing with a fixed KV capacity",
    "checkpoint_quantization": "use the unquantized (BF16), a block-scaled fp8, a per-tensor "
    "fp8 or an NVFP4 checkpoint, or fixed / polynomial timing with a fixed KV capacity (they do "
    "not read the precision)",
}


def _model_is_mla(cfg: Config) -> bool:
    model = _model(cfg)
    return model is not None and model.kv_lora_rank > 0


def _model(cfg: Config):
    """engine.model's architecture, or None when it cannot be read (resolve says why)."""
    from pathlib import Path

    from aisim.models import load_model

    base = Path(cfg.source_path).parent if getattr(cfg, "source_path", None) else None
    try:
        return load_model(cfg.engine.model, base_dir=base)
    except Exception:
        return None


def _is_moe(cfg: Config) -> bool:
    """Whether engine.model has routed experts (True when it cannot be read: resolve says why)."""
    model = _model(cfg)
    return model is None or model.num_experts > 0


def _unpriced_quantization(cfg: Config) -> str | None:
    """What engine.model's checkpoint declares, when a run would price it and aisim cannot do
    so exactly; else None.

    The declared precision reaches the results only through op-level timing and the GPU memory
    model (capacity default): fixed and polynomial timing with a fixed capacity give AISimulate's
    BF16 figures for any checkpoint, and the P/D transfer size follows torch_dtype alone
    (oracle runs of Qwen3-32B / -FP8 / hf_quant_config variants). Priced op by op: block-scaled
    fp8 and NVFP4 dense / Qwen3 MoE checkpoints (goldens quant-*) and DeepSeek's fp8_block ones
    (dsv3-*, dsr1-*, dsv32-*).
    """
    if not any(
        isinstance(w.timing, DefaultTiming) or isinstance(w.kv_cache.capacity, DefaultCapacity)
        for w in cfg.engine.workers.values()
    ):
        return None
    model = _model(cfg)
    if model is None or not (model.weight_quant or model.kv_cache_quant not in ("", "bfloat16")):
        return None
    if model.kv_lora_rank == 0 and model.experts_only_quant and not model.kv_cache_quant:
        return None
    if model.kv_lora_rank == 0:
        # dense and Qwen3 MoE plans price block-scaled, per-tensor (static or dynamic) fp8
        # and NVFP4 weights with an fp8 or bf16 KV cache from the tables
        if model.weight_quant in (
            "",
            "fp8",
            "fp8_block",
            "fp8_static",
            "nvfp4",
        ) and model.kv_cache_quant in (
            "",
            "fp8",
            "bfloat16",
        ):
            return None
    elif model.weight_quant in ("fp8_block", "nvfp4") and model.kv_cache_quant == (
        "fp8" if model.weight_quant == "nvfp4" else ""
    ):
        # exclusion lists (docs/timing.md 3.5, 3.6): DSA modules take o_proj's dtype; a dense
        # MLA block is one module only when every projection shares a dtype
        from aisim.models import attention_excluded_on

        excluded = attention_excluded_on(model, cfg.engine.backend) & {"q", "kv", "o"}
        if model.index_n_heads > 0 or excluded in (set(), {"q", "kv", "o"}):
            return None
        names = {"q": "q", "kv": "kv", "o": "o_proj"}
        kept = " / ".join(names[g] for g in names if g in excluded)
        rest = " / ".join(names[g] for g in names if g not in excluded)
        dtype = "NVFP4" if model.weight_quant == "nvfp4" else "block-fp8"
        return (
            f"a {dtype} checkpoint whose MLA attention keeps {kept} projections bf16 and "
            f"{rest} {dtype} (AISimulate prices that block as separate per-projection GEMMs "
            "and attention kernels, which aisim has no plan for)"
        )
    elif model.experts_only_quant and not model.kv_cache_quant:
        return None  # int4 routed experts, bf16 GEMMs and KV (Kimi-K2.5; memory: _memory_of)
    parts = [f"weights {model.weight_quant}"] if model.weight_quant else []
    if model.kv_cache_quant:
        parts.append(f"KV cache {model.kv_cache_quant}")
    where = (
        "its config.json's quantization_config"
        if model.quant_source == "quantization_config"
        else f"its {model.quant_source}"
    )
    return f"a quantized checkpoint ({', '.join(parts)}; declared in {where})"


def _found(cfg: Config) -> Iterator[tuple[str, str, str]]:
    """(feature id, dotted path, what is asked for) for every non-trivial request."""
    src, eng = cfg.traffic.source, cfg.engine
    if src.TYPE == "trace" and src.format not in ("mooncake", "mooncake-delta"):
        yield "trace_format", "traffic.source.format", f"trace format {src.format!r}"
    if getattr(cfg.traffic.load, "agentic_lanes", None) is not None:
        yield "trace_format", "traffic.load.agentic_lanes", "agentic trace lanes"
    elif src.TYPE == "synthetic-session" and eng.mode != "aggregated":
        yield "session_source", "traffic.source.type", "multi-turn sessions in P/D"
    if isinstance(src, SyntheticSource) and src.images is not None:
        yield "images", "traffic.source.images", "image input (EPD)"
    if eng.mode != "aggregated":
        yield eng.mode, "engine.mode", f"{eng.mode!r} mode"
    if eng.backend == "sglang":
        yield "sglang", "engine.backend", "the SGLang scheduler"
    if eng.estimation_mode not in ("auto", "op_level"):
        yield "fpm_estimation", "engine.estimation_mode", f"estimation mode {eng.estimation_mode!r}"
    if eng.nextn > 0:
        yield "mtp", "engine.nextn", f"native MTP (nextn = {eng.nextn})"
    if eng.speculation is not None:
        yield "speculation", "engine.speculation", "speculative decoding"
    quant_keys = ("gemm_quant_mode", "moe_quant_mode", "kvcache_quant_mode", "fmha_quant_mode")
    # comm_quant_mode quantizes only context-parallel and AFD collectives in AISimulate 0.13
    # (both refused here): a no-op wherever aisim prices, shown with the oracle
    keys = ("attention_backend", "moe_kernel_source")
    mla = _model_is_mla(cfg)  # the MLA / DSA plans price the checkpoint's own dtypes only
    for key in (*quant_keys, *keys) if mla else keys:
        if getattr(eng, key) is not None:
            yield "timing_identity", f"engine.{key}", f"an override of {key}"
    for role, w in eng.workers.items() if mla else ():
        for key in quant_keys:
            if getattr(w.timing, key, None) is not None:
                where = f"engine.workers.{role}.timing.{key}"
                yield "timing_identity", where, f"an override of {key}"
    if eng.moe_backend is not None:
        # AISimulate 0.13 takes a moe_backend override (deepep_moe / megamoe) on SGLang only
        what = f"moe_backend {eng.moe_backend!r} (DeepEP / MegaMoE)"
        yield "moe_backend", "engine.moe_backend", what
    # EPLB and wide-EP slots: AISimulate 0.13 accepts them on vLLM / TRT-LLM MoE models and
    # prices exactly as without them; a dense model is refused
    for key, what in (
        ("enable_eplb", "expert load balancing"),
        ("wideep_num_slots", "wide-EP expert slots"),
    ):
        if getattr(eng, key) not in (None, False) and not _is_moe(cfg):
            yield "moe_controls_dense", f"engine.{key}", f"{what} on a model without experts"
    if eng.fpm_profile is not None:
        yield "estimator_options", "engine.fpm_profile", "a forward-pass-model profile"
    yield from _estimator_options(eng, "engine")
    if eng.encoder is not None:
        yield "images", "engine.workers.encoder", "an encoder worker (EPD)"
    quantized = _unpriced_quantization(cfg)
    if quantized is not None:
        feature = "mla_checkpoint_quantization" if mla else "checkpoint_quantization"
        yield feature, "engine.model", f"{eng.model!r} is {quantized}, which"
    for role, w in eng.workers.items():
        base = f"engine.workers.{role}"
        yield from _worker_features(w, base)


def _estimator_options(section, base: str) -> Iterator[tuple[str, str, str]]:
    """The estimator options of the engine or of one role's default timing that would change
    the pricing. Proven no-ops in AISimulate 0.13 pass (oracle, dense / MoE / DeepSeek-V3.2,
    SILICON and SOL): any valid transfer_policy (it steers only HYBRID / EMPIRICAL borrowing),
    fallback_policy allow (it matters only where data is missing, which aisim refuses), the
    default estimator_config, and systems_paths naming AISimulate's own packaged database."""
    roots = list(getattr(section, "systems_paths", None) or ())
    if getattr(section, "systems_path", None) is not None:
        roots.append(section.systems_path)
    key = "systems_paths" if getattr(section, "systems_paths", None) else "systems_path"
    if any(not is_packaged_systems_root(root) for root in roots):
        yield (
            "estimator_options",
            f"{base}.{key}",
            "performance data outside AISimulate's packaged database",
        )
    if section.estimator_config and not is_default_estimator_config(section.estimator_config):
        yield ("estimator_options", f"{base}.estimator_config", "a non-default estimator_config")


def _timing_features(timing: DefaultTiming, base: str) -> Iterator[tuple[str, str, str]]:
    """Per-role overrides of a default timing (AISimulate honours them role by role)."""
    if timing.forward_model != "op_level":
        yield "fpm_estimation", f"{base}.forward_model", "forward-pass-model timing ('fpm')"
    if timing.estimation_mode not in (None, "auto", "op_level"):
        yield (
            "fpm_estimation",
            f"{base}.estimation_mode",
            f"estimation mode {timing.estimation_mode!r}",
        )
    for key in ("attention_backend",):
        if getattr(timing, key) is not None:
            yield "timing_identity", f"{base}.{key}", f"an override of {key}"
    yield from _estimator_options(timing, base)


def _worker_features(w: Worker, base: str) -> Iterator[tuple[str, str, str]]:
    timing = w.timing
    if isinstance(timing, DefaultTiming):
        yield (
            "op_level_timing",
            f"{base}.timing",
            "op-level timing (type 'default')",
        )
        yield from _timing_features(timing, f"{base}.timing")
    elif not isinstance(timing, FixedTiming):
        yield "polynomial_timing", f"{base}.timing", f"{timing.TYPE!r} timing"
    kv = w.kv_cache
    if isinstance(kv.capacity, DefaultCapacity):
        yield (
            "default_capacity",
            f"{base}.kv_cache.capacity",
            "a KV capacity from the GPU memory model ('type: default')",
        )
    for key in ("host_offload", "g3_offload", "kvcr", "state_cache", "prefix_match_unit"):
        if getattr(kv, key) is not None:
            yield "kv_offload", f"{base}.kv_cache.{key}", f"KV cache option {key}"
    par = w.parallelism
    for key in ("prefill_context", "decode_context"):
        if getattr(par, key) is not None:
            yield "context_parallel", f"{base}.parallelism.{key}", "context parallelism"
    for key in ("frontend", "host_profile", "vision"):
        if getattr(w, key) is not None:
            yield "host_model", f"{base}.{key}", f"the {key} model"
    if w.host_loop:
        yield "host_model", f"{base}.host_loop", "the host loop model"


def unsupported_features(cfg: Config) -> list[str]:
    """One line per feature the (valid) config asks for that aisim does not implement yet.

    Each line names the dotted path, e.g. ``engine.nextn: native MTP (nextn = 2) is not
    available yet in aisim``.  An empty list means aisim can run the config.
    """
    lines: list[str] = []
    for feature, path, what in _found(cfg):
        if feature in NOT_YET_AVAILABLE:
            fix = _FIXES.get(feature)
            lines.append(f"{path}: {what} {_NOTE}" + (f"; {fix}" if fix else ""))
    return lines

"""The config space of the differential test (bench/difftest.py): random VALID AISimulate configs.

``sample_case(seed, index)`` draws one case from its own random stream (seeded by seed and
index), so a case can be regenerated alone and a run can be resumed or extended. A case is the
config (a dict written as YAML), the files it needs (a small Mooncake trace written by the
sampler itself) and its feature tags, which the summary counts per class so that a mismatch
class shows as a bucket ("mtp+kv:tight").

The weights are chosen so that every bucket aisim claims to simulate (README "What is
simulated today") gets samples, with extra weight on the combinations whose rules are the
hardest (MTP under KV pressure, P/D transfer modes, context limits over traces). Nothing aisim
documents as not available yet (MTP in P/D, MoE in SOL mode) is drawn: the space is what aisim
claims, so a run at 100 % means every case exact or refused by both simulators (those refusals
are checked by the config tests instead).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from difftest_models import (
    FP8_BLOCK_MODELS,
    KV_SHAPES,
    MLA_MODELS,
    MODEL_SPACE_SPLITS,
    MODEL_SPACES,
    VLLM_ONLY_MODELS,
    empirical_family,
)
from difftest_traffic import Workload, sample_traffic

from aisim.config.registry import BACKEND_VERSION_SLOTS, current_version

SPACE_VERSION = "13"
"""Bump when the sampler changes, so a resumed folder is not mixed (11: EMPIRICAL drawn;
12: engine.tokenization drawn; 13: synthetic-session traffic drawn)."""

DENSE = {"Qwen/Qwen3-0.6B": 16, "Qwen/Qwen3-8B": 32, "Qwen/Qwen3-32B": 64}
"""Dense models shipped in data/models, with their attention heads (tensor must divide them)."""

# (tensor, attention_data, moe_tensor, moe_expert, pipeline) per MoE model, with
# tensor x attention_data = moe_tensor x moe_expert; the splits the goldens and README name, plus
# neighbours of them (a slice the tables lack is a documented refusal, which the run counts)
MOE_SPLITS = {
    "Qwen/Qwen3-30B-A3B": [
        (1, 2, 1, 2, 1),
        (2, 1, 1, 2, 1),
        (2, 1, 2, 1, 1),
        (2, 2, 2, 2, 1),
        (2, 4, 1, 8, 1),
        (4, 1, 1, 4, 1),
        (1, 4, 1, 4, 1),
        (1, 8, 1, 8, 1),
        (4, 2, 1, 8, 1),
        (2, 2, 1, 4, 2),
    ],
    "Qwen/Qwen3-235B-A22B": [
        (4, 1, 1, 4, 1),
        (8, 1, 1, 8, 1),
        (4, 2, 1, 8, 1),
        (2, 4, 1, 8, 1),
        (1, 8, 1, 8, 1),
        (16, 1, 1, 16, 1),
    ],
    "deepseek-ai/DeepSeek-V3": [
        (1, 8, 1, 8, 1),
        (2, 4, 1, 8, 1),
        (4, 2, 1, 8, 1),
        (8, 1, 1, 8, 1),
        (8, 2, 1, 16, 1),
        (2, 2, 1, 4, 2),
        (1, 16, 1, 16, 1),
    ],
    "deepseek-ai/DeepSeek-R1": [(1, 8, 1, 8, 1), (2, 4, 1, 8, 1), (8, 1, 1, 8, 1)],
    "deepseek-ai/DeepSeek-V3.2": [
        (1, 8, 1, 8, 1),
        (2, 4, 1, 8, 1),
        (8, 1, 1, 8, 1),
        (1, 16, 1, 16, 1),
        (4, 2, 1, 8, 1),
    ],
}
MOE_SPLITS.update(MODEL_SPACE_SPLITS)

# the GPUs with silicon tables: b200_sxm half the time, the others share the rest
HARDWARE = {
    "b200_sxm": 0.5,
    "h200_sxm": 0.07,
    "h100_sxm": 0.07,
    "gb200": 0.07,
    "b300_sxm": 0.06,
    "gb300": 0.06,
    "a100_sxm": 0.06,
    "l40s": 0.04,
    "rtx_pro_6000_server": 0.03,
    "b60": 0.04,
}
QUANTIZED_CHECKPOINTS = {
    "Qwen/Qwen3-32B": {"Qwen/Qwen3-32B-FP8": 0.6, "Qwen/Qwen3-32B-FP8-Static-PerTensor": 0.4},
    "Qwen/Qwen3-30B-A3B": {"Qwen/Qwen3-30B-A3B-FP8": 1.0},
    "Qwen/Qwen3-235B-A22B": {
        "Qwen/Qwen3-235B-A22B-FP8": 0.5,
        "nvidia/Qwen3-235B-A22B-NVFP4": 0.5,
    },
    "MiniMaxAI/MiniMax-M2.5": {"nvidia/MiniMax-M2.5-NVFP4": 1.0},
}
"""Shipped block-fp8 / per-tensor fp8 / NVFP4 checkpoints of the sampled models (data/models)."""
NVFP4_GPUS = ("b200_sxm", "b300_sxm", "gb200", "gb300", "rtx_pro_6000_server")
"""GPUs whose tables hold NVFP4 GEMMs (the Blackwell ones)."""
FP8_BLOCK_GPUS = ("b200_sxm", "b300_sxm", "gb200", "gb300", "h100_sxm", "h200_sxm")
"""GPUs whose tables hold fp8_block GEMMs and the DeepSeek attention modules."""
GPU_MEMORY_GB = {
    "b200_sxm": 192, "b300_sxm": 288, "gb200": 192, "gb300": 288, "h100_sxm": 80,
    "h200_sxm": 141, "a100_sxm": 80, "l40s": 48, "rtx_pro_6000_server": 96, "b60": 24,
}  # fmt: skip
# for the memory model's capacity: GPUs a worker needs before the weights fit
WEIGHTS_GB = {
    "Qwen/Qwen3-0.6B": 1.2, "Qwen/Qwen3-8B": 16.4, "Qwen/Qwen3-32B": 65.5,
    "Qwen/Qwen3-30B-A3B": 61, "Qwen/Qwen3-235B-A22B": 470, "deepseek-ai/DeepSeek-V3": 690,
    "deepseek-ai/DeepSeek-R1": 690, "deepseek-ai/DeepSeek-V3.2": 690,
    "mistralai/Mixtral-8x7B-v0.1": 94, "mistralai/Mixtral-8x22B-v0.1": 282,
    "MiniMaxAI/MiniMax-M2.5": 230, "moonshotai/Kimi-K2-Instruct": 1030,
    "zai-org/GLM-5-FP8": 760, "zai-org/GLM-5.1-FP8": 760, "moonshotai/Kimi-K2.5": 600,
    "nvidia/Kimi-K2.5-NVFP4": 600, "nvidia/GLM-5-NVFP4": 430, "openai/gpt-oss-120b": 63,
    "nvidia/DeepSeek-V3.2-NVFP4": 400, "zai-org/GLM-5.2-FP8": 760, "nvidia/GLM-5.3-NVFP4": 430,
    "openai/gpt-oss-20b": 14, "meta-llama/Llama-4-Scout-17B-16E-Instruct": 218,
    "meta-llama/Llama-4-Maverick-17B-128E-Instruct": 800,
}  # fmt: skip


def min_gpus_default_capacity(model: str, hardware: str) -> int:
    """The fewest GPUs (a power of two) whose memory holds the weights with room for KV: fewer
    leave the memory model's capacity no KV budget (both simulators refuse)."""
    n = 1
    while WEIGHTS_GB[model] / n > 0.7 * GPU_MEMORY_GB[hardware]:
        n *= 2
    return n


@dataclass
class Case:
    """One sampled config, the files beside it and its feature tags."""

    config: dict
    files: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)


class _Draw:
    """Weighted draws from one seeded stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, weighted: dict):
        keys = list(weighted)
        return self.rng.choices(keys, weights=[weighted[k] for k in keys])[0]

    def one(self, seq):
        return self.rng.choice(list(seq))

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def between(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


def space_version(space: str = "default") -> str:
    # models2: Kimi-K2; 3: GLM-5-FP8; 4: GLM-5, GLM-5.1-FP8, Kimi-K2.5 and its NVFP4 export;
    # 5: GLM-5-NVFP4; 6: gpt-oss, Llama-4; 7: DeepSeek-V3.2-NVFP4; 8: GLM-5.2-FP8, GLM-5.3-NVFP4
    if space == "sessions":
        return f"{SPACE_VERSION}-sessions1"
    return SPACE_VERSION if space == "default" else f"{SPACE_VERSION}-{space}8"


def sample_case(seed: int, index: int, space: str = "default") -> Case:
    """Case `index` of run `seed` (independent of other indices) in model set `space`."""
    d = _Draw(random.Random(f"difftest:{space_version(space)}:{seed}:{index}"))
    tags: list[str] = []
    mode = d.pick({"aggregated": 0.65, "disaggregated": 0.35})
    if space == "sessions":
        mode = "aggregated"  # sessions in P/D: a documented refusal
    backend = d.pick({"vllm": 0.65, "trtllm": 0.35})
    model = d.pick(MODEL_SPACES[space])
    if model in VLLM_ONLY_MODELS:
        backend = "vllm"
    moe = model not in DENSE
    tags += [
        backend,
        "pd" if mode == "disaggregated" else "agg",
        "model:" + model.split("/")[1],
        "family:" + ("dense" if not moe else "mla" if model in MLA_MODELS else "moe"),
    ]
    # native MTP needs op-level timing in every role (AISimulate rejects it otherwise); in P/D it
    # is a documented refusal of aisim, so only a few P/D cases ask for it
    mtp = d.chance(0.30 if mode == "aggregated" else 0.0)  # MTP in P/D: not claimed
    timing_kind = "op" if mtp else d.pick({"fixed": 0.5, "polynomial": 0.1, "op": 0.4})
    tags.append("timing:" + timing_kind)
    hardware = d.pick(
        {
            hw: w
            for hw, w in HARDWARE.items()
            if model not in FP8_BLOCK_MODELS or hw in FP8_BLOCK_GPUS
        }
    )
    if hardware == "b60":  # vLLM only, dense models, at most 4 cards a group (its measured ones)
        backend = "vllm"
        tags[0] = backend
        if moe:
            hardware = "b200_sxm"
    tags.append("hw:" + hardware)
    engine: dict = {"mode": mode, "model": model, "hardware": hardware, "backend": backend}
    slots = BACKEND_VERSION_SLOTS.get(hardware, {}).get(backend, {})
    if "next" in slots and d.chance(0.2):  # the next slot, by number or alias
        engine["backend_version"] = d.pick({slots["next"]: 0.7, "next": 0.3})
        tags.append("ver:next")
    elif d.chance(0.3):
        engine["backend_version"] = current_version(hardware, backend)
    if timing_kind == "op":
        if d.chance(0.15 if not moe else 0.0):  # MoE in SOL mode: not claimed
            engine["database_mode"] = "SOL"
            tags.append("db:SOL")
        elif d.chance(0.1):  # silicon wherever the tables answer; else refused by aisim
            engine["database_mode"] = "HYBRID"
            tags.append("db:HYBRID")
        elif d.chance(0.25 if empirical_family(model) else 0.0):
            engine["database_mode"] = "EMPIRICAL"
            tags.append("db:EMPIRICAL")
            if d.chance(0.2):
                engine["transfer_policy"] = d.one(["off", "conservative", "balanced", "xquant"])
        if d.chance(0.3):
            engine["estimation_mode"] = "op_level"
        if d.chance(0.2):
            engine["enable_shared_layer"] = d.one([True, False])
    if mtp:
        nextn = d.pick({1: 0.25, 2: 0.35, 3: 0.25, 4: 0.08, 5: 0.07})
        accepted = d.pick({"zero": 0.1, "all": 0.15, "half": 0.15, "random": 0.6})
        engine["nextn"] = nextn
        engine["nextn_accepted"] = {
            "zero": 0.0,
            "all": float(nextn),
            "half": nextn / 2,
            "random": round(d.rng.uniform(0, nextn), 1),
        }[accepted]
        tags.append("mtp")

    traffic, wl = sample_traffic(d, tags, mode, sessions=space == "sessions")
    if d.chance(0.18):
        engine["context_length"] = _context_limit(d, wl)
        tags.append("ctx-limit")
    if d.chance(0.12):
        engine["enable_chunked_prefill"] = False
        tags.append("chunk-off")
    no_chunk = engine.get("enable_chunked_prefill") is False
    nextn = engine.get("nextn", 0)
    if mode == "aggregated":
        engine["workers"] = {
            "aggregated": _worker(
                d, tags, model, hardware, backend, timing_kind, wl, "aggregated", no_chunk, nextn
            )
        }
    else:
        engine["workers"] = {
            "prefill": _worker(
                d, tags, model, hardware, backend, timing_kind, wl, "prefill", no_chunk, 0
            ),
            "decode": _worker(
                d, tags, model, hardware, backend, timing_kind, wl, "decode", no_chunk, nextn
            ),
        }
        kvt = _kv_transfer(d, tags)
        if kvt is not None:
            engine["kv_transfer"] = kvt
    _precision(d, tags, engine, model, hardware, timing_kind)
    if d.chance(0.2):  # a tokenizer ahead of admission (docs/rules.md 2.3)
        engine["tokenization"] = {
            "workers": d.one([1, 1, 2, 3, 4]),
            "base_ms": d.one([0.0, 0.5, 1.0, 2.75, 10.0, 30.0]),
            "per_input_token_us": d.one([0.0, 1.0, 2.0, 3.7, 25.0]),
        }
        tags.append("tokenizer")
    config = {"traffic": traffic["traffic"], "engine": engine}
    return Case(config=config, files=traffic["files"], tags=sorted(set(tags)))


def _precision(d: _Draw, tags: list[str], engine: dict, model: str, hw: str, timing: str) -> None:
    """A quantized checkpoint of the sampled model, or quant_mode overrides of its dtypes.

    Drawn last, so the deployment is sized for the BF16 weights (the memory model's capacity
    then has more room, never less). MLA models take neither (a documented refusal)."""
    if model in MLA_MODELS or not d.chance(0.25):
        return
    checkpoints = dict(QUANTIZED_CHECKPOINTS.get(model, {}))
    if hw not in NVFP4_GPUS:
        checkpoints = {k: w for k, w in checkpoints.items() if "NVFP4" not in k}
    if checkpoints and d.chance(0.5):
        engine["model"] = d.pick(checkpoints)
        tags.append("prec:" + ("nvfp4" if "NVFP4" in engine["model"] else "fp8-ckpt"))
        return
    if timing != "op":
        return
    keys = ["gemm_quant_mode", "kvcache_quant_mode"]
    keys += ["moe_quant_mode"] if model not in DENSE else []
    key = d.one(keys)
    if key == "kvcache_quant_mode":
        engine[key] = "fp8"
        if d.chance(0.5):
            engine["fmha_quant_mode"] = "fp8"
    else:
        modes = {"fp8": 0.3, "fp8_block": 0.3, "nvfp4": 0.2 if hw in NVFP4_GPUS else 0.0}
        if key == "gemm_quant_mode":
            modes["fp8_static"] = 0.2
        engine[key] = d.pick(modes)
    tags.append("prec:" + key.split("_")[0])


# --------------------------------------------------------------------------- traffic


def _context_limit(d: _Draw, wl: Workload) -> int:
    """An integer context_length that truncates outputs or rejects some prompts."""
    prompts = sorted(wl.prompts)
    longest = prompts[-1] + max(wl.outputs)
    if len(set(prompts)) > 1 and d.chance(0.7):
        # between two prompt lengths: the longer prompts are rejected
        lo, hi = prompts[len(prompts) // 3], prompts[-1]
        return max(2, d.between(lo, hi)) if hi > lo else hi
    if d.chance(0.2):
        return max(1, prompts[0] - d.between(0, 3))  # every request rejected (exit 1)
    return d.between(prompts[-1] + 1, max(prompts[-1] + 1, longest - 1))  # outputs truncated


# --------------------------------------------------------------------------- workers


def _parallelism(
    d: _Draw, tags: list[str], model: str, hardware: str, timing_kind: str, role: str
) -> dict:
    if model in DENSE:
        heads = DENSE[model]
        tensor = d.pick({1: 0.35, 2: 0.3, 4: 0.25, 8: 0.08, 16: 0.02 if heads >= 64 else 0})
        if hardware == "b60":
            tensor = min(tensor, 4)
        par: dict = {"tensor": tensor}
        if d.chance(0.15):
            par["attention_data"] = 2
        if timing_kind == "op" and d.chance(0.1) and role != "decode":
            par["pipeline"] = 2
    else:
        t, adp, mt, me, pp = d.one(MOE_SPLITS[model])
        par = {"tensor": t, "attention_data": adp, "moe_tensor": mt, "moe_expert": me}
        if pp > 1:
            par["pipeline"] = pp
    if d.chance(0.25):
        par["replicas"] = d.pick({2: 0.8, 3: 0.2})
    if par.get("attention_data", 1) > 1:
        tags.append("dp>1")
    if par.get("pipeline", 1) > 1:
        tags.append("pp>1")
    if par.get("replicas", 1) > 1:
        tags.append("replicas>1")
    return par


def _worker(
    d: _Draw,
    tags: list[str],
    model: str,
    hardware: str,
    backend: str,
    timing_kind: str,
    wl: Workload,
    role: str,
    no_chunk: bool,
    nextn: int,
) -> dict:
    par = _parallelism(d, tags, model, hardware, timing_kind, role)
    worker: dict = {"parallelism": par}
    # scheduler: token budget, running-request limit, vLLM prefill interval
    sched: dict = {}
    longest = max(wl.prompts)
    budget = d.pick(
        {
            64: 0.08,
            100: 0.1,
            128: 0.08,
            256: 0.12,
            512: 0.12,
            1024: 0.1,
            2048: 0.12,
            4096: 0.08,
            8192: 0.2,
        }
    )
    if no_chunk and d.chance(0.85):
        budget = max(budget, longest)  # a prompt larger than the budget stalls (both refuse)
    sched["max_batched_tokens"] = budget
    if role == "prefill" and d.chance(0.45):
        tags.append("pd-prefill-seqs-unset")  # the prefill role defaults to one sequence
    else:
        sched["max_sequences"] = d.pick(
            {1: 0.05, 2: 0.08, 4: 0.12, 8: 0.15, 16: 0.15, 64: 0.15, 256: 0.3}
        )
    if backend == "vllm" and d.chance(0.15):
        sched["prefill_schedule_interval"] = d.pick({2: 0.7, 3: 0.3})
        tags.append("psi>1")
    worker["scheduler"] = sched
    worker["kv_cache"] = _kv_cache(d, tags, model, hardware, backend, par, wl, sched, role, nextn)
    worker["timing"] = _timing(d, timing_kind)
    if d.chance(0.05):
        worker["startup_seconds"] = d.one([0.5, 2.0])
        tags.append("startup")
    return worker


def _kv_cache(
    d: _Draw,
    tags: list[str],
    model: str,
    hardware: str,
    backend: str,
    par: dict,
    wl: Workload,
    sched: dict,
    role: str,
    nextn: int,
) -> dict:
    block = (
        d.pick({16: 0.3, 32: 0.3, 64: 0.3, 128: 0.1})
        if backend == "vllm"
        else d.pick({16: 0.2, 32: 0.5, 64: 0.3})
    )
    kv: dict = {"block_size": block}
    if d.chance(0.22):
        kv["prefix_caching"] = False
        tags.append("prefix-off")
    gpus = par.get("tensor", 1) * par.get("attention_data", 1)
    fewest = min_gpus_default_capacity(model, hardware)
    can_default = gpus >= fewest
    # aisim refuses the memory model's capacity under MTP; a few cases keep that refusal checked
    default = (0.02 if nextn else 0.15) if can_default else 0
    pressure = d.pick(
        {"ample": 0.3, "tight": 0.4, "default": default, "bytes": 0.05, "too-small": 0.02}
    )
    tags.append(f"kv:{pressure}" + (f"@{role}" if role != "aggregated" else ""))
    if pressure == "default":
        cap: dict = {"type": "default"}
        # a smaller fraction leaves the big models on their fewest GPUs no KV budget at all
        roomy = gpus >= 2 * fewest
        if roomy and d.chance(0.3):
            cap["memory_fraction"] = d.one([0.5, 0.8, 0.95])
        kv["capacity"] = cap
        return kv
    # blocks one request needs at its longest (prompt + output + MTP drafts)
    longest = max(p + o for p, o in zip(wl.prompts, wl.outputs, strict=True))
    one = math.ceil((longest + nextn + 1) / block)
    running = max(1, min(wl.in_flight, sched.get("max_sequences", 1 if role == "prefill" else 256)))
    ranks = par.get("attention_data", 1)
    per_rank = max(1, math.ceil(running / ranks))
    if pressure == "ample":
        blocks = one * per_rank * 2 + d.between(8, 200)
    elif pressure == "too-small":
        blocks = max(1, one - d.between(1, 3))
    else:  # tight: a few requests fit, so they queue, preempt or wait for a reservation
        blocks = max(one + d.between(0, 2), int(one * per_rank * d.rng.uniform(0.25, 0.9)))
    if pressure == "bytes":  # AISimulate sizes a byte capacity only with explicit token bytes
        kv["bytes_per_token"] = _kv_bytes(model, par)
        kv["capacity"] = {"type": "fixed", "bytes": blocks * block * kv["bytes_per_token"]}
    else:
        kv["capacity"] = {"type": "fixed", "blocks": blocks}
    return kv


def _kv_bytes(model: str, par: dict) -> int:
    """Roughly one token's KV bytes on one rank (the value a `bytes` capacity is given)."""
    per_layer, layers = KV_SHAPES.get(model, (656, 61))
    return max(1, per_layer * layers // max(1, par.get("tensor", 1)))


def _timing(d: _Draw, kind: str) -> dict:
    if kind == "op":
        return {"type": "default"}
    if kind == "polynomial":
        return {"type": "polynomial"}
    # a zero time now and then: passes that end as they start have their own order (rules 9.2)
    return {
        "type": "fixed",
        "prefill_ms": d.one([0, 1, 2.5, 7, 7.3, 10, 15]),
        "decode_ms": d.one([0, 0.5, 1, 1.7, 2, 3]),
    }


def _kv_transfer(d: _Draw, tags: list[str]) -> dict | None:
    if d.chance(0.12):
        tags.append("kvt:absent")
        return None
    kvt: dict = {}
    if d.chance(0.4):
        kvt["bandwidth_gb_per_second"] = None
        tags.append("kvt:null-bw")
    else:
        kvt["bandwidth_gb_per_second"] = d.one([5.0, 25.0, 50.0, 100.0, 400.0])
        tags.append("kvt:bw")
    if d.chance(0.35):
        kvt["timing_mode"] = "full_prompt"
        tags.append("kvt:full_prompt")
    elif d.chance(0.5):
        kvt["timing_mode"] = "destination_missing"
    if d.chance(0.2):
        kvt["bytes_per_token"] = d.one([1024, 65536, 131072])
        tags.append("kvt:bytes")
    return kvt

"""Leaf builders: attention grid slices (docs/timing.md 4.2-4.4) and the GQA attention block.

`attention_slice` cuts one key slice of a context / generation attention table into the CSR
`GridSlice` that `aisim.kernels.optime_attention` walks; `gqa_attention` is the dense Qwen3 /
Llama attention of one rank (both slices, their SOL constants and the fused per-layer extras),
shared by the dense and the Qwen3 MoE families. Every discrete-key miss is raised here as
`OpTableError`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels.optime_attention import GridSlice
from aisim.models import ModelArch
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables, ordered_rows, row_power

# attention kernel_source priority ("lane order", docs/timing.md 4.2); lanes not listed rank after
# them. A key slice is priced from its first lane alone (see attention_slice).
LANE_ORDER = {
    "vllm": ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode", "vllm_triton_attn"),
    "trtllm": ("torch_flow", "default"),
}
LANE_PINNED_VERSIONS = {"vllm": ("0.24.0",)}
"""The vLLM versions AISimulate's attention-lane defaults pin a lane order for. At any other
vLLM version (0.31.0, 0.14.0, 0.28.0, ...) it falls back to its plain "default" lane, which no
vLLM row carries, so the lanes rank in the order the resolved table first shows them
(docs/timing.md 4.2)."""
EXTRA_FACTOR = 1.1  # fused attention extras (docs/timing.md 4.4)


def lane_order(backend: str, version: str) -> tuple[str, ...]:
    """The attention kernel_source priority at a backend version."""
    pinned = LANE_PINNED_VERSIONS.get(backend)
    if pinned is not None and version not in pinned:
        return ()
    return LANE_ORDER.get(backend, ())


def _lane(kernel_source) -> str:
    return str(kernel_source) or "default"


def lane_ranks(lanes: tuple[str, ...], kernel_sources) -> dict[str, int]:
    """Every lane's priority: the lane order first, then the table's other lanes in the order
    their first rows appear in resolution order (docs/timing.md 4.2)."""
    rank = {lane: i for i, lane in enumerate(lanes)}
    for ks in dict.fromkeys(kernel_sources.tolist()):
        rank.setdefault(_lane(ks), len(rank))
    return rank


def csr_nest(leaves: dict[tuple, float], energy: dict[tuple, float]) -> dict[str, np.ndarray]:
    """Three-level (axis0, axis1, axis2) -> latency leaves as the CSR arrays of a `GridSlice`
    (values and offsets per level, latency and energy per leaf)."""
    keys = sorted(leaves)
    v0, o0, v1, o1, v2, lat = [], [0], [], [0], [], []
    for key in keys:
        if not v0 or v0[-1] != key[0]:
            if v0:
                o0.append(len(v1))
            v0.append(key[0])
            new1 = True
        else:
            new1 = v1[-1] != key[1]
        if new1:
            if v1:
                o1.append(len(v2))
            v1.append(key[1])
        v2.append(key[2])
        lat.append(leaves[key])
    o0.append(len(v1))
    o1.append(len(v2))
    return {
        "v0": np.asarray(v0, np.float64),
        "o0": np.asarray(o0, np.int64),
        "v1": np.asarray(v1, np.float64),
        "o1": np.asarray(o1, np.int64),
        "v2": np.asarray(v2, np.float64),
        "lat": np.asarray(lat, np.float64),
        "en": np.asarray([energy[key] for key in keys], np.float64),
    }


def first_leaves(
    coords, latency: list[float], power: list[float]
) -> tuple[dict[tuple, float], dict[tuple, float]]:
    """(latency, energy) leaves keyed by coordinate tuple; the first row of a key wins."""
    leaves: dict[tuple, float] = {}
    energy: dict[tuple, float] = {}
    for key, lat, pw in zip(coords, latency, power, strict=True):
        if key not in leaves:
            leaves[key] = lat
            energy[key] = pw * lat
    return leaves, energy


def absent_grid(par: np.ndarray | None = None) -> GridSlice:
    """The stand-in for a slice the plan does not read (`par` kept for its SOL)."""
    return GridSlice(
        v0=np.ones(1),
        o0=np.zeros(2, np.int64),
        v1=np.ones(1),
        o1=np.zeros(2, np.int64),
        v2=np.ones(1),
        lat=np.ones(1),
        en=np.zeros(1),
        par=np.zeros(KA.PAR_SIZE, np.float64) if par is None else par,
    )


def attention_par(
    n_kv: int, head_dim: int, kv_bytes: float, flops: float, mem_bw: float, mha: bool
) -> np.ndarray:
    """The SOL constants of an attention slice (optime_attention.PAR_*)."""
    par = np.zeros(KA.PAR_SIZE, np.float64)
    par[KA.PAR_NUM_KV_HEADS] = n_kv
    par[KA.PAR_HEAD_DIM] = head_dim
    par[KA.PAR_KV_BYTES] = kv_bytes
    par[KA.PAR_FLOPS] = flops
    par[KA.PAR_WINDOW] = 0.0
    par[KA.PAR_MEM_BW] = mem_bw
    par[KA.PAR_MHA] = 1.0 if mha else 0.0
    return par


def attention_slice(
    tables: Tables,
    family: str,
    lanes: tuple[str, ...],
    fmha_dtype: str,
    kv_dtype: str,
    n_heads: int,
    n_kv: int,
    d: int,
    par: np.ndarray,
    window: int = 0,
) -> GridSlice:
    """The key slice; context (heads, seq, batch), generation (heads, batch, kv). `window`:
    the rows measured with that sliding window (0 = full attention)."""
    op = "context_attention" if family == "context_attention" else "generation_attention"
    if family not in tables:
        raise OpTableError(op, "table", f"the op-time table has no {family} family")
    c = ordered_rows(tables[family])
    n_kv_lookup = 0 if n_heads == n_kv else n_kv
    table_nkv = np.where(c["num_heads"] == c["num_key_value_heads"], 0, c["num_key_value_heads"])
    mask = (
        (c["kv_cache_dtype"] == kv_dtype)
        & (table_nkv == n_kv_lookup)
        & (c["head_dim"] == d)
        & (c["window_size"] == window)
    )
    if family == "context_attention":
        mask &= c["attn_dtype"] == fmha_dtype
        mask &= c["step"] == 0
    if "beam_width" in c:
        mask &= c["beam_width"] == 1
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        key = f"attn_dtype={fmha_dtype} " if family == "context_attention" else ""
        key += f"kv_cache_dtype={kv_dtype} n_kv={n_kv_lookup} head_dim={d} window={window}"
        raise OpTableError(op, key, f"{family} perf data missing for this key slice")
    rank = lane_ranks(lanes, c["kernel_source"])
    lane_rank = np.array([rank[_lane(s)] for s in c["kernel_source"][idx]], np.int64)
    # One lane per key: the first lane of the order that has rows for it, alone. The others
    # never fill its gaps, so in vLLM the trtllmdecode isl = 1 context rows stay unused and a
    # prefill below isl 16 falls to the utilisation hold over the trtllmprefill leaves (pinned
    # in tests/golden_optable/attention_corners.json).
    idx = idx[lane_rank == lane_rank.min()]
    gen = family == "generation_attention"
    heads_a = c["num_heads"][idx].tolist()
    b_a = c["batch_size"][idx].tolist()
    s_a = (c["isl"][idx] + c["step"][idx]).tolist() if gen else c["isl"][idx].tolist()
    coords = [(hh, b, s) if gen else (hh, s, b) for hh, b, s in zip(heads_a, b_a, s_a, strict=True)]
    leaves, energy = first_leaves(coords, c["latency"][idx].tolist(), row_power(c, idx))
    if gen:
        for key, lat in leaves.items():
            sol = KA.attention_sol_ms.py_func(
                KA.KIND_GENERATION, float(key[0]), float(key[1]), float(key[2]), par
            )
            leaves[key] = lat if lat >= sol else sol  # load-time SOL clamp
    return GridSlice(**csr_nest(leaves, energy), par=par)


class GqaAttention(NamedTuple):
    """The dense (GQA / MHA) attention of one rank: slices and PassScalars fields."""

    context: GridSlice
    generation: GridSlice
    scalars: dict  # heads and the fused extras (PassScalars field names)
    # the sliding-window layers' slices (window_size rows), None without such layers
    banded_context: GridSlice | None = None
    banded_generation: GridSlice | None = None


def banded_leaves(attention: GqaAttention) -> dict:
    """The OpPlan leaves of the sliding-window layers' slices (none without such layers)."""
    if attention.banded_context is None:
        return {}
    return {
        "banded_context_attention": attention.banded_context,
        "banded_generation_attention": attention.banded_generation,
    }


def gqa_attention(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    *,
    backend: str,
    version: str,
    tensor_parallel: int,
    silicon: bool,
    kv_cache_dtype: str = "bfloat16",
    fmha_dtype: str = "bfloat16",
) -> GqaAttention:
    """Context / generation slices at the rank's heads, plus the fused per-layer extras.

    The extras (docs/timing.md 4.4) are memory-op units with their bytes: kv_write, K and V of the
    new token (2 units); rope, q and k read + write (2 units); qk_norm, 8 units over q and k
    (Qwen3 only). Byte split inferred from the golden totals.
    """
    t = int(tensor_parallel)
    d = model.head_dim
    n_heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    kv_bytes = DTYPE_BYTES[kv_cache_dtype]
    flops = system.tensor_flops(fmha_dtype)
    lanes = lane_order(backend, version)

    def slices(window: int) -> tuple[GridSlice, GridSlice]:
        pars = [attention_par(n_kv, d, kv_bytes, flops, system.mem_bw, n_heads == n_kv)]
        pars.append(pars[0].copy())
        for par in pars:
            par[KA.PAR_WINDOW] = float(window)
        if not silicon:
            return absent_grid(pars[0]), absent_grid(pars[1])
        return tuple(
            attention_slice(
                tables, family, lanes, fmha_dtype, kv_cache_dtype, n_heads, n_kv, d, par, window
            )
            for family, par in zip(("context_attention", "generation_attention"), pars, strict=True)
        )

    context, generation = slices(0)
    banded = slices(model.sliding_window) if model.banded_layers else (None, None)
    # the new token's K and V at the attention dtype, whatever the cache stores (observed: an fp8
    # KV cache leaves the context extras at bf16 bytes)
    kv_write_b = 2.0 * n_kv * d * DTYPE_BYTES[fmha_dtype]
    rope_b = 2.0 * (n_heads + n_kv) * d * 2.0
    qk_b = 4.0 * (n_heads + n_kv) * d * 2.0 if model.use_qk_norm else 0.0
    qk_units = 8 if model.use_qk_norm else 0
    ctx_units = 4 + qk_units
    ctx_bytes = kv_write_b + rope_b + qk_b

    def extra_ms(units: int, nbytes: float) -> float:
        if units == 0:
            return 0.0
        return EXTRA_FACTOR * (
            units * system.mem_const_s * 1e3 + nbytes / (system.mem_bw * system.mem_eff) * 1e3
        )

    def extra_sol_ms(units: int, nbytes: float) -> float:
        return EXTRA_FACTOR * nbytes / system.mem_bw * 1e3 if units else 0.0

    scalars = {
        "heads": n_heads,
        "ctx_extra_ms": extra_ms(ctx_units, ctx_bytes),
        "ctx_extra_sol_ms": extra_sol_ms(ctx_units, ctx_bytes),
        "gen_extra_ms": extra_ms(qk_units, qk_b),
        "gen_extra_sol_ms": extra_sol_ms(qk_units, qk_b),
    }
    return GqaAttention(context, generation, scalars, *banded)


def deployment_attention(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment,
    *,
    silicon: bool,
    kv_cache_dtype: str,
    fmha_dtype: str,
) -> GqaAttention:
    """`gqa_attention` for a deployment's rank; a missing slice under EMPIRICAL is refused as
    the cross-shape borrowing it would need (aisim.timing.leaf_empirical.borrowing_refusal)."""
    from aisim.timing.leaf_empirical import borrowing_refusal

    try:
        return gqa_attention(
            model,
            tables,
            system,
            backend=deployment.backend,
            version=deployment.version,
            tensor_parallel=int(deployment.tensor),
            silicon=silicon,
            kv_cache_dtype=kv_cache_dtype,
            fmha_dtype=fmha_dtype,
        )
    except OpTableError as exc:
        raise borrowing_refusal(exc, ("xshape",), deployment, tables, "context_attention") from None

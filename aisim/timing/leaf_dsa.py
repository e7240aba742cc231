"""Leaf builders: DeepSeek attention-module slices (docs/timing.md 4.8) as `GridSlice`s.

The module tables measure a whole per-layer attention module: DSA (V3.2: MLA + the sparse
indexer) or dense MLA (V3 / R1). A slice is selected by a key (architecture or model, mla
dtype, kv dtype, gemm type) and read by `aisim.kernels.optime_attention` on the axes
  context:    (cached prefix + 1, new tokens, batch) at exactly the rank's head count (the
              prefix axis is shifted by one so the log2 distances of the hold stay finite);
  generation: (heads, batch, kv = isl + step);
raw latencies (no load-time SOL clamp). The SOL constants (`optime_dsa`) are fitted to
AISimulate 0.13's per-op SOL parts from the model config. Also here: TRT-LLM's `context_mla`
kernel table and vLLM's dense MLA context module, both read like dense context attention.
A missing slice is raised as `OpTableError`, naming it.
"""

from __future__ import annotations

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_dsa as KD
from aisim.kernels.optime_attention import GridSlice
from aisim.models import ModelArch
from aisim.timing.leaf_attention import csr_nest, first_leaves
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables, ordered_rows, row_power

MLA_DTYPE = "bfloat16"  # the latent attention's compute dtype in every module table


def module_key(
    model: ModelArch, key_column: str, key_value: str, gemm_dtype: str, kv_dtype: str
) -> dict:
    """The key of the model's rows in a module table."""
    return {
        key_column: key_value,
        "mla_dtype": MLA_DTYPE,
        "kv_cache_dtype": kv_dtype,
        "gemm_type": gemm_dtype,
    }


def _module_par(
    model: ModelArch, heads: int, kv_dtype: str, system: GpuSystem, attended_keys: float
) -> np.ndarray:
    par = np.zeros(KD.DSA_PAR_SIZE, np.float64)
    par[KA.PAR_NUM_KV_HEADS] = heads
    par[KA.PAR_HEAD_DIM] = model.kv_lora_rank + model.qk_rope_head_dim
    par[KA.PAR_KV_BYTES] = DTYPE_BYTES[kv_dtype]
    par[KA.PAR_FLOPS] = system.tensor_flops(MLA_DTYPE)
    par[KA.PAR_WINDOW] = attended_keys
    par[KA.PAR_MEM_BW] = system.mem_bw
    return par


def dsa_module_par(
    model: ModelArch,
    heads: int,
    gemm_dtype: str,
    kv_dtype: str,
    system: GpuSystem,
    skip_indexer: bool = False,
) -> np.ndarray:
    """The DSA module SOL's constants (`optime_dsa.dsa_context_sol_ms` and friends).

    Fitted to AISimulate 0.13's per-op SOL on V3.2 (fp8_block GEMMs, fp8 KV): the weights read
    are q_a, kv_a, q_b, o_proj and the indexer's wq_b / wk / weights_proj (kv_b is absorbed:
    its FLOPs count, its weights do not); the per-new-token bytes (768 per head at V3.2) are
    matched by 4 x (nope + rope) without knowing which tensors they stand for.
    `skip_indexer`: the context module of a layer that reuses another layer's indexer
    (GLM-5.2 / 5.3 on vLLM) runs no indexer: no wq_b / wk / weights_proj, no indexer logits,
    no indexer key cache (oracle: five prefixed chunks of GLM-5.2-FP8 at attention-DP 8, exact
    only without all three).
    """
    par = _module_par(model, heads, kv_dtype, system, 2048.0)  # keys = index_topk
    hidden = model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    wb = DTYPE_BYTES[gemm_dtype]
    kvb = DTYPE_BYTES[kv_dtype]
    par[KD.DSA_TOPK] = model.index_topk
    indexer = (
        model.q_lora_rank * model.index_n_heads * model.index_head_dim
        + hidden * model.index_head_dim
        + hidden * model.index_n_heads
    )
    par[KD.DSA_W0] = wb * (
        hidden * model.q_lora_rank + hidden * latent + (0 if skip_indexer else indexer)
    )
    par[KD.DSA_WH] = wb * (model.q_lora_rank * qk + model.v_head_dim * hidden)
    # The kernel counts 2 W FLOPs a token for the weight bytes W and divides every GEMM-group
    # FLOP by one rate, DSA_FP8_FLOPS. The GEMMs run at their dtype's rate and the indexer at
    # fp8's, so that rate is wb x the GEMM rate (2 W / (wb rate) = 2 weights / rate), and kv_b's
    # and the indexer's FLOPs are rescaled to it. fp8 GEMMs: the plain fp8 rate; bf16: kv_b at
    # the bf16 rate (GLM-5-FP8 on TRT-LLM, whose module is bf16); NVFP4: 0.5625 bytes a weight
    # at the nvfp4 rate (DeepSeek-V3.2-NVFP4, off the grid; docs/timing.md 4.8)
    fp8_rate = system.tensor_flops("fp8")
    gemm_rate = system.tensor_flops(gemm_dtype)
    rate = wb * gemm_rate
    par[KD.DSA_KVB_FLOPS_H] = (
        2.0 * model.kv_lora_rank * (model.qk_nope_head_dim + model.v_head_dim)
    ) * (rate / gemm_rate)
    par[KD.DSA_ATTN_FLOPS_H] = 2.0 * (latent + model.kv_lora_rank)
    if not skip_indexer:
        par[KD.DSA_IDX_FLOPS] = 2.0 * model.index_n_heads * model.index_head_dim * (rate / fp8_rate)
        par[KD.DSA_IDX_KEY_BYTES] = model.index_head_dim + 4  # fp8 key + one fp32 scale
    par[KD.DSA_NEW_BYTES_H] = 4.0 * qk
    par[KD.DSA_KEY_BYTES_H] = latent * kvb
    par[KD.DSA_KEY_BYTES] = latent * kvb
    par[KD.DSA_FP8_FLOPS] = rate
    return par


def mla_module_par(
    model: ModelArch, heads: int, gemm_dtype: str, kv_dtype: str, system: GpuSystem
) -> np.ndarray:
    """The dense MLA generation module SOL's constants (`optime_dsa.mla_generation_sol_ms`).

    Fitted to AISimulate 0.13's per-op SOL on V3 at 128 heads; the generation bytes per
    sequence besides the latent KV (3456 per head) are matched by 6 x latent without knowing
    which tensors they stand for.
    """
    par = _module_par(model, heads, kv_dtype, system, 1e18)  # every key attended
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    kvb = DTYPE_BYTES[kv_dtype]
    par[KD.DSA_W0] = (
        DTYPE_BYTES[gemm_dtype] * model.kv_lora_rank * (model.qk_nope_head_dim + model.v_head_dim)
    )
    par[KD.DSA_KVB_FLOPS_H] = 2.0 * model.kv_lora_rank * (model.qk_nope_head_dim + model.v_head_dim)
    par[KD.DSA_ATTN_FLOPS_H] = 2.0 * (latent + model.kv_lora_rank)
    par[KD.DSA_KEY_BYTES] = latent * kvb
    par[KD.DSA_FP8_FLOPS] = system.tensor_flops("fp8")
    par[KD.MLA_GEN_SEQ_BYTES_H] = 6.0 * latent
    return par


def _slice_mask(c: dict, key: dict, skip: bool = False) -> np.ndarray:
    """The key's rows: those of the full DSA layers, or with `skip` those measured for the
    layers that reuse another layer's indexer (the skip_indexer rows)."""
    mask = np.ones(len(c["latency"]), bool)
    for col, value in key.items():
        mask &= c[col] == value
    if "skip_indexer" in c:
        mask &= c["skip_indexer"] == int(skip)
    elif skip:
        mask[:] = False
    return mask


def module_slice(
    tables: Tables,
    family: str,
    key: dict,
    heads: int,
    par: np.ndarray,
    where: str,
    skip: bool = False,
) -> GridSlice:
    """A DSA / MLA module slice (axes in the module doc), raw latencies; `skip`: the rows of
    the layers that reuse another layer's indexer."""
    op = "context_attention" if "context" in family else "generation_attention"
    slice_text = " ".join([family, *(f"{k}={v}" for k, v in key.items())])
    if skip:
        slice_text += " skip_indexer=1"
    if family not in tables:
        raise OpTableError(op, slice_text, f"the op-time table has no {family} family ({where})")
    c = ordered_rows(tables[family])
    mask = _slice_mask(c, key, skip)
    gen = "generation" in family
    if not gen:
        mask &= c["num_heads"] == heads
        slice_text += f" num_heads={heads}"
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError(op, slice_text, f"attention module perf data missing for {where}")
    measured = set(c["num_heads"][idx].tolist())
    if gen and measured != {heads} and len(measured) == 1:
        # a head axis of one point: AISimulate extrapolates over heads from it by a rule aisim
        # does not have (oracle: Kimi-K2.5-NVFP4 on rtx_pro_6000_server, whose bf16 / fp8
        # module rows hold 1 head only, generation 144.489 ms a pass at 64 heads)
        raise OpTableError(
            op,
            f"{slice_text} num_heads={heads}",
            f"attention module perf data holds {sorted(measured)[0]} head(s) only for {where}",
        )
    a0 = c["num_heads"][idx] if gen else c["step"][idx] + 1
    a1 = c["batch_size"][idx] if gen else c["isl"][idx]
    a2 = c["isl"][idx] + c["step"][idx] if gen else c["batch_size"][idx]
    # TRT-LLM module tables carry power, vLLM's do not
    coords = zip(a0.tolist(), a1.tolist(), a2.tolist(), strict=True)
    leaves, energy = first_leaves(coords, c["latency"][idx].tolist(), row_power(c, idx))
    return GridSlice(**csr_nest(leaves, energy), par=par)


def with_hold_leaves(
    par: np.ndarray, tables: Tables, family: str, key: dict, skip: bool = False
) -> np.ndarray:
    """`par` followed by the DSA context slice's leaves at every head count, packed for
    `optime_dsa.dsa_context_hold`: (heads, prefix, new tokens, batch, latency, energy)."""
    c = ordered_rows(tables[family])
    idx = np.nonzero(_slice_mask(c, key, skip))[0]
    leaves: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    coords = zip(
        c["num_heads"][idx].tolist(),
        c["step"][idx].tolist(),
        c["isl"][idx].tolist(),
        c["batch_size"][idx].tolist(),
        strict=True,
    )
    for k, lat, pw in zip(coords, c["latency"][idx].tolist(), row_power(c, idx), strict=True):
        leaves.setdefault(k, (lat, pw * lat))  # first row wins
    packed = np.array([[*k, *leaves[k]] for k in sorted(leaves)], np.float64).reshape(-1)
    out = np.concatenate([par, packed])
    out[KD.DSA_HOLD_NUM] = len(leaves)
    return out


def mla_context_module_slice(tables: Tables, family: str, key: dict, par: np.ndarray) -> GridSlice:
    """vLLM's dense MLA context module (V3 / R1) as a context-attention slice (heads, seq,
    batch): AISimulate reads it like dense context attention (seq = new + prefix, sqrt blend
    on seq, prefix correction, MHA SOL), every lane's rows merged, first row wins."""
    c = ordered_rows(tables[family])
    return _heads_seq_batch_slice(c, np.nonzero(_slice_mask(c, key) & (c["step"] == 0))[0], par)


def context_mla_slice(
    tables: Tables,
    kv_dtype: str,
    heads: int,
    par: np.ndarray,
    where: str,
    read_heads: int | None = None,
) -> GridSlice:
    """TRT-LLM's context MLA kernel (`context_mla` table, key mla_dtype = kv_cache_dtype) as a
    context-attention slice (heads, seq, batch); no load-time SOL clamp. With `read_heads`
    (a model whose kernel rows are read at another head count) the slice holds only those
    rows, labelled `heads`, so a query at the model's heads reads them."""
    slice_text = f"context_mla mla_dtype={kv_dtype} kv_cache_dtype={kv_dtype}"
    if "context_mla" not in tables:
        raise OpTableError(
            "context_mla_block",
            slice_text,
            f"the op-time table has no context_mla family ({where})",
        )
    c = ordered_rows(tables["context_mla"])
    mask = (c["mla_dtype"] == kv_dtype) & (c["kv_cache_dtype"] == kv_dtype) & (c["step"] == 0)
    idx = np.nonzero(mask)[0]
    lookup = heads if read_heads is None else read_heads
    if idx.size == 0 or not np.any(c["num_heads"][idx] == lookup):
        raise OpTableError(
            "context_mla_block",
            f"{slice_text} num_heads={lookup}",
            f"context MLA perf data missing for {where}",
        )
    if read_heads is not None and read_heads != heads:
        idx = idx[c["num_heads"][idx] == read_heads]
        c = {**c, "num_heads": np.where(c["num_heads"] == read_heads, heads, c["num_heads"])}
    return _heads_seq_batch_slice(c, idx, par)


def _heads_seq_batch_slice(c: dict, idx: np.ndarray, par: np.ndarray) -> GridSlice:
    """Rows `idx` of a context table as a (heads, seq, batch) slice, first row wins."""
    coords = zip(
        c["num_heads"][idx].tolist(),
        c["isl"][idx].tolist(),
        c["batch_size"][idx].tolist(),
        strict=True,
    )
    leaves, energy = first_leaves(coords, c["latency"][idx].tolist(), row_power(c, idx))
    return GridSlice(**csr_nest(leaves, energy), par=par)

"""The context MLA block of dense-MLA DeepSeek models (V3 / R1) on TRT-LLM.

AISimulate does not read TRT-LLM's `mla_context_module` table for the prefill: it reports one
`context_mla_block` op per layer made of kernel-level lookups, summed:
  downscale GEMM (q_a + kv_a fused: n = q_lora_rank + kv_lora_rank + rope dim, k = hidden)
  + q_b GEMM (n = heads x (nope + rope), k = q_lora_rank)
  + kv_b GEMM (n = heads x (nope + v), k = kv_lora_rank)
  + o_proj GEMM (n = hidden, k = heads x v)        -- all at m = new tokens, checkpoint dtype
  + the context MLA kernel (`context_mla` table, key mla_dtype = kv_cache_dtype, num_heads per
    rank; grid (heads, seq, batch) with the dense context-attention rules: sqrt blend along
    seq, prefix correction (seq^2 - prefix^2) / seq^2, MHA SOL at the kv dtype's bytes and the
    fmha dtype's FLOPs for ragged brackets and the hold).
Its energy is the GEMMs' (the kernel table has no power). Decode keeps the module table
(`mla_generation_module`), which AISimulate does read. Checked against AISimulate's
`static_phase_diagnostics` on ~450 shapes (batch 1-512, new tokens 1-100000, prefixes up to
5000, TP 1 and 8) to 1e-14 relative: see NOTES.md, Issue 6.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.plan import _DTYPE_BYTES, _power, csr_nest
from aisim.timing.tables import Tables, ordered_rows


class MlaBlock(NamedTuple):
    gemm_ops: list        # (name, n, k, dtype), appended to the plan's GEMM ops
    sub_ops: list         # (name, kind, gemm name or None, param): summed per layer, in order
    nest: dict            # the context_mla slice as a CSR nest (v0..lat, en)
    par: np.ndarray       # float64[KA.PAR_SIZE] for the slice's SOL


def trtllm_context_mla_block(model: ModelArch, tables: Tables, heads: int, gemm_dtype: str,
                             kv_dtype: str, flops: float, mem_bw: float,
                             where: str) -> MlaBlock:
    """The per-layer pieces of AISimulate's TRT-LLM `context_mla_block` at `heads` per rank."""
    h = model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    gemm_ops = [
        ("mla_downscale_gemm", model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim,
         h, gemm_dtype),
        ("mla_q_b_gemm", heads * qk, model.q_lora_rank, gemm_dtype),
        ("mla_kv_b_gemm", heads * (model.qk_nope_head_dim + model.v_head_dim),
         model.kv_lora_rank, gemm_dtype),
        ("mla_o_gemm", h, heads * model.v_head_dim, gemm_dtype),
    ]
    sub_ops = [(name, KP.OP_GEMM_TOKENS, name, 0.0) for name, *_r in gemm_ops]
    sub_ops.append(("mla_context_kernel", KP.OP_ATTN_CONTEXT, None, 0.0))
    nest = _context_mla_nest(tables, kv_dtype, heads, where)
    par = np.zeros(KA.PAR_SIZE, np.float64)
    par[KA.PAR_NUM_KV_HEADS] = heads
    par[KA.PAR_MHA] = 1.0          # MLA context runs as MHA over the decompressed k / v
    par[KA.PAR_HEAD_DIM] = qk      # the SOL is linear in d, only its ratios are used
    par[KA.PAR_KV_BYTES] = _DTYPE_BYTES[kv_dtype]
    par[KA.PAR_FLOPS] = flops
    par[KA.PAR_MEM_BW] = mem_bw
    return MlaBlock(gemm_ops, sub_ops, nest, par)


def _context_mla_nest(tables: Tables, kv_dtype: str, heads: int,
                      where: str) -> dict[str, np.ndarray]:
    slice_text = f"context_mla mla_dtype={kv_dtype} kv_cache_dtype={kv_dtype}"
    if "context_mla" not in tables:
        raise OpTableError("context_mla_block", slice_text,
                           f"the op-time table has no context_mla family ({where})")
    c = ordered_rows(tables["context_mla"])
    mask = (c["mla_dtype"] == kv_dtype) & (c["kv_cache_dtype"] == kv_dtype) & (c["step"] == 0)
    idx = np.nonzero(mask)[0]
    if idx.size == 0 or not np.any(c["num_heads"][idx] == heads):
        raise OpTableError("context_mla_block", f"{slice_text} num_heads={heads}",
                           f"context MLA perf data missing for {where}")
    leaves: dict[tuple[int, int, int], float] = {}
    energy: dict[tuple[int, int, int], float] = {}
    for hh, s, b, lat, pw in zip(c["num_heads"][idx].tolist(), c["isl"][idx].tolist(),
                                 c["batch_size"][idx].tolist(), c["latency"][idx].tolist(),
                                 _power(c, idx), strict=True):
        key = (hh, s, b)
        if key not in leaves:   # first row wins; no load-time SOL clamp (context attention)
            leaves[key] = lat
            energy[key] = pw * lat
    return csr_nest(leaves, energy)

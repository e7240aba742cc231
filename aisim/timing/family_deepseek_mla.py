"""Plan family: DeepSeek-V3 / R1 (dense MLA attention, MoE; docs/timing.md 3.6, 4.8).

Decode reads the `mla_generation_module` table (the whole attention module per layer, keyed
by model id; R1 reads V3's rows) with the dense-MLA SOL (optime_dsa.mla_generation_sol_ms).
The prefill attention is one reported `context_mla_block` op, made per backend:
* vLLM: the `mla_context_module` table read like dense context attention (seq = new + prefix,
  sqrt blend on seq, prefix correction, MHA SOL); vLLM also prices a `tp_allreduce` op, two
  allreduces of tokens x hidden per layer over the attention-TP group (0 at TP 1, but listed);
* TRT-LLM: AISimulate does not read the module table for the prefill; it sums kernel-level
  lookups per layer:
    downscale GEMM (q_a + kv_a fused: n = q_lora_rank + kv_lora_rank + rope dim, k = hidden)
    + q_b GEMM (n = heads x (nope + rope), k = q_lora_rank)
    + kv_b GEMM (n = heads x (nope + v), k = kv_lora_rank)
    + o_proj GEMM (n = hidden, k = heads x v)       -- all at m = new tokens, checkpoint dtype
    + the context MLA kernel (`context_mla` table at the rank's heads, read like dense context
      attention with the MHA SOL at the kv dtype's bytes and FLOPs).
  Its energy is the GEMMs' (the kernel table has no power). Checked against AISimulate's
  `static_phase_diagnostics` on ~450 shapes (batch 1-512, new tokens 1-100000, prefixes up to
  5000, TP 1 and 8) to 1e-14 relative (NOTES.md, "DeepSeek-V3 / R1 on TRT-LLM").
The shared expert is split over the attention-TP group. The rest of the layer:
aisim.timing.deepseek_layers.
"""

from __future__ import annotations

import numpy as np

from aisim.errors import NotAvailableError
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.deepseek_layers import (
    DeepSeekAttention,
    DeepSeekDtypes,
    build_deepseek_plan,
    deepseek_gemms,
)
from aisim.timing.leaf_attention import absent_grid, attention_par
from aisim.timing.leaf_dsa import (
    MLA_DTYPE,
    context_mla_slice,
    mla_context_module_slice,
    mla_module_par,
    module_key,
    module_slice,
)
from aisim.timing.leaf_gemm import GemmOp
from aisim.timing.plan_record import Deployment, OpRow, PassPlan, sum_block
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables

MODEL_TYPE = "deepseek_v3"
CONTEXT_MODULE = "mla_context_module"
GENERATION_MODULE = "mla_generation_module"
# The models whose rows the MLA module tables hold, by their native attention heads. A plan
# reads the rows of the model nearest in heads to its own (oracle, gb300 vLLM 0.31.0, whose
# tables also hold Kimi-K3's rows: Kimi-K2, Kimi-K2.5 and a 64- or 96-head DeepSeek-V3 config
# read Kimi-K3's, DeepSeek-V3 its own; every other table holds DeepSeek-V3's alone).
MODULE_MODEL_HEADS = {"deepseek-ai/DeepSeek-V3": 128, "moonshotai/Kimi-K3": 96}
KERNEL_TABLE_HEADS = 128  # AISimulate keys the TRT-LLM context MLA kernel at DeepSeek's heads


def module_model(model: ModelArch, tables: Tables, where: str) -> str:
    """The model whose rows of the MLA module tables the plan reads: of those the context
    module table holds, the one nearest in native attention heads."""
    held = (
        set(np.unique(tables[CONTEXT_MODULE]["model"]).tolist())
        if CONTEXT_MODULE in tables
        else set()
    )
    unknown = held - set(MODULE_MODEL_HEADS)
    known = sorted(
        (abs(h - model.num_attention_heads), m) for m, h in MODULE_MODEL_HEADS.items() if m in held
    )
    if unknown or (len(known) > 1 and known[0][0] == known[1][0]):
        raise NotAvailableError(
            f"op-level timing for {where}: the MLA module tables hold rows of "
            f"{', '.join(sorted(held))}; which of them a {model.num_attention_heads}-head model "
            "reads is not known to aisim (use another backend version or GPU)"
        )
    return known[0][1] if known else next(iter(MODULE_MODEL_HEADS))


def build_deepseek_mla_plan(
    model: ModelArch, tables: Tables, system: GpuSystem, deployment: Deployment
) -> PassPlan:
    deployment.check_moe_mode()
    where = deployment.where(model.model_id)
    deployment.moe_group_gpus(where)
    t = int(deployment.tensor)
    heads = model.num_attention_heads // t
    dtypes = DeepSeekDtypes.of(model, deployment.backend)
    trtllm = deployment.backend == "trtllm"
    block_gemms = _trtllm_block_gemms(model, heads, dtypes.attention) if trtllm else []
    gemms = deepseek_gemms(model, tables, system, deployment, t, block_gemms)
    key = module_key(
        model, "model", module_model(model, tables, where), dtypes.attention, dtypes.kv
    )
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    kv_bytes = DTYPE_BYTES[dtypes.kv]
    module_par = mla_module_par(model, heads, dtypes.attention, dtypes.kv, system)
    # a deployment whose context module table lacks the rank's head count is refused on both
    # backends, although only vLLM reads that table (and across all head counts)
    module_slice(tables, CONTEXT_MODULE, key, heads, module_par, where)
    # MLA context runs as MHA over the decompressed k / v; its SOL is linear in d, only its
    # ratios are used
    if trtllm:
        # the context MLA kernel is read at DeepSeek-V3's 128 heads over t whatever the
        # model's own count (Kimi-K2 has 64); its GEMMs keep the model's heads
        par = attention_par(
            heads, qk, kv_bytes, system.tensor_flops(dtypes.kv), system.mem_bw, mha=True
        )
        read = KERNEL_TABLE_HEADS // t
        context = context_mla_slice(tables, dtypes.kv, heads, par, where, read_heads=read)
        sub_ops = [
            OpRow("context", op.name, KP.OP_GEMM_TOKENS, op.name, 0.0, 1.0) for op in block_gemms
        ]
        sub_ops.append(OpRow("context", "mla_context_kernel", KP.OP_ATTN_CONTEXT, None, 0.0, 1.0))
    else:
        par = attention_par(
            heads, qk, kv_bytes, system.tensor_flops(MLA_DTYPE), system.mem_bw, mha=True
        )
        context = mla_context_module_slice(tables, CONTEXT_MODULE, key, par)
        sub_ops = [OpRow("context", "mla_context_module", KP.OP_ATTN_CONTEXT, None, 0.0, 1.0)]
    generation = module_slice(tables, GENERATION_MODULE, key, heads, module_par, where)
    block, hidden = sum_block("context", "mla_block", sub_ops, float(model.num_layers))
    part = DeepSeekAttention(
        context_op=block,
        generation_name="mla_block",
        dsa_context=absent_grid(),
        dsa_generation=generation,
        context_attention=context,
        hidden=hidden,
        tp_allreduce=not trtllm,
    )
    return build_deepseek_plan(model, tables, system, deployment, gemms, t, part)


def _trtllm_block_gemms(model: ModelArch, heads: int, dtype: str) -> list[GemmOp]:
    """The GEMMs of TRT-LLM's context MLA block at `heads` per rank."""
    h = model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    return [
        GemmOp(
            "mla_downscale_gemm",
            model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim,
            h,
            dtype,
        ),
        GemmOp("mla_q_b_gemm", heads * qk, model.q_lora_rank, dtype),
        GemmOp(
            "mla_kv_b_gemm",
            heads * (model.qk_nope_head_dim + model.v_head_dim),
            model.kv_lora_rank,
            dtype,
        ),
        GemmOp("mla_o_gemm", h, heads * model.v_head_dim, dtype),
    ]

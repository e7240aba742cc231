"""The op plan of one forward pass for MoE models: DeepSeek-V3.2 (MLA + DSA) and friends.

Resolved once in Python, like the dense plan (aisim.timing.plan), into the same `DensePlan`
arrays: the MoE-specific leaves (DSA module nests, the routed-expert curve, the NCCL dispatch
curves) fill the plan's MoE fields; dense fields that the model does not use stay placeholders.

One rank of an attention-DP group (timing.md 2.5, vLLM): every layer is priced as an MoE layer
(AISimulate keeps its all-MoE approximation under attention-DP, so the dense leading layers of
DeepSeek are MoE layers too), per layer
  add_norm_1 -> attention module (DSA: q/kv low-rank projections, indexer, sparse MLA, o_proj)
  -> add_norm_2 -> shared expert (gate_up GEMM, act, down GEMM) -> router GEMM (bf16)
  -> NCCL all_gather (pre-dispatch) -> routed experts at global tokens = local x attention-DP
  -> NCCL reduce_scatter (post-dispatch);
plus embedding and the lm_head (bf16, m = requests) once. In decode the MoE block is one
overlap op: max(router + dispatch + experts + combine, shared expert). Every discrete-key miss
is raised here as `OpTableError`, naming the missing slice.
"""

from __future__ import annotations

import numpy as np

from aisim.errors import NotAvailableError, OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_dsa as KD
from aisim.kernels import optime_moe as KM
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.plan import (
    _DTYPE_BYTES,
    _DTYPE_FLOPS,
    GEMM_MAX_NEIGHBOURS,
    MODES,
    DensePlan,
    PassPlan,
    _empty_nest,
    _GemmSites,
    _power,
    csr_nest,
    no_moe_arrays,
)
from aisim.timing.plan_mla import MlaBlock, trtllm_context_mla_block
from aisim.timing.tables import Tables, ordered_rows

# model_type -> attention module tables and the key column that selects the model's rows:
# DSA (V3.2: MLA + sparse indexer) by architecture, dense MLA (V3 / R1) by model id
ATTENTION_MODULES = {
    "deepseek_v32": ("dsa_context_module", "dsa_generation_module", "architecture",
                     "DeepseekV32ForCausalLM"),
    "deepseek_v3": ("mla_context_module", "mla_generation_module", "model",
                    "deepseek-ai/DeepSeek-V3"),
}
MOE_DISTRIBUTION = "power_law_1.01"   # DeepSeek family (timing.md 2.5)


def is_moe_model(model: ModelArch) -> bool:
    return model.num_experts > 0


def build_moe_plan(model: ModelArch, tables: Tables, system: dict, *, backend: str,
                   version: str, tensor_parallel: int = 1, pipeline_parallel: int = 1,
                   attention_dp: int = 1, moe_tensor: int = 1, moe_expert: int = 1,
                   mode: str = "SILICON", nextn: int = 0) -> PassPlan:
    """Resolve the per-rank op plan of a DeepSeek-V3.2 forward pass (timing.md 2.5)."""
    where = (f"{model.model_id} on {backend} {version} with tensor {tensor_parallel} x "
             f"attention_data {attention_dp}, moe_tensor {moe_tensor} x moe_expert {moe_expert}")
    if mode != "SILICON":
        raise NotAvailableError(f"database_mode {mode}: MoE models are priced in SILICON mode "
                                "only so far")
    if model.kv_lora_rank == 0:
        return _build_gqa_moe_plan(model, tables, system, backend=backend, version=version,
                                   t=int(tensor_parallel), pp=int(pipeline_parallel),
                                   adp=int(attention_dp), moe_tensor=moe_tensor,
                                   moe_expert=moe_expert, mode=mode, nextn=nextn, where=where)
    modules = ATTENTION_MODULES.get(model.model_type)
    if modules is None:
        raise NotAvailableError(
            f"op-level timing for {where}: model type {model.model_type!r} has no attention "
            f"module tables; MLA models priced so far: {', '.join(ATTENTION_MODULES)}")
    ctx_family, gen_family, key_column, key_value = modules
    t = int(tensor_parallel)
    adp = int(attention_dp)
    if t * adp != moe_tensor * moe_expert:
        raise NotAvailableError(
            f"op-level timing for {where}: tensor x attention_data ({t * adp}) must equal "
            f"moe_tensor x moe_expert ({moe_tensor * moe_expert})")
    num_gpus = moe_tensor * moe_expert

    h = model.hidden_size
    L = model.num_layers
    heads = model.num_attention_heads // t
    gemm_dtype = model.weight_quant or "bfloat16"
    moe_dtype = gemm_dtype
    kv_dtype = "fp8" if model.weight_quant else "bfloat16"
    mla_dtype = "bfloat16"
    # AISimulate keeps V3.2's shared expert whole under attention-TP (vLLM and TRT-LLM)
    shared_tp = 1 if model.index_n_heads > 0 else t
    shared_inter = model.moe_intermediate_size * max(1, model.num_shared_experts) // shared_tp
    gpu = system["gpu"]
    node = system["node"]
    mem_bw = float(gpu["mem_bw"])

    def flops_of(dtype: str) -> float:
        return float(gpu[_DTYPE_FLOPS[dtype]])

    # ---- GEMMs (fp8_block ones come from the vLLM 0.25.0 donor: enable_shared_layer)
    gemm_ops = [
        ("shared_gate_up_gemm", 2 * shared_inter, h, gemm_dtype),
        ("shared_ffn2_gemm", h, shared_inter, gemm_dtype),
        ("router_gemm", model.num_experts, h, "bfloat16"),
        ("logits_gemm", model.vocab_size // t, h, "bfloat16"),  # frontier waiver at n > 65536
    ]
    # TRT-LLM dense MLA (V3 / R1): the prefill attention is AISimulate's composed block
    mla_block = None
    if backend == "trtllm" and model.index_n_heads == 0:
        mla_block = trtllm_context_mla_block(model, tables, heads, gemm_dtype, kv_dtype,
                                             flops_of(kv_dtype), mem_bw, where)
        gemm_ops += mla_block.gemm_ops
    gemm = _GemmSites(tables, mem_bw, flops_of)
    g_num = np.zeros(len(gemm_ops), np.int64)
    g_sites = np.full((len(gemm_ops), GEMM_MAX_NEIGHBOURS), -1, np.int64)
    g_w = np.zeros((len(gemm_ops), GEMM_MAX_NEIGHBOURS), np.float64)
    descr = []
    for gi, (name, n, k, dtype) in enumerate(gemm_ops):
        try:
            num, ids, ws, text = gemm.resolve(name, dtype, n, k)
        except OpTableError as exc:
            raise OpTableError(name, f"gemm dtype={dtype} n={n} k={k}",
                               f"{exc.detail}; {where} (fp8_block GEMMs need "
                               "enable_shared_layer: true)") from None
        g_num[gi] = num
        g_sites[gi, :len(ids)] = ids
        g_w[gi, :len(ws)] = ws
        descr.append(text)
    gi_of = {name: gi for gi, (name, *_r) in enumerate(gemm_ops)}

    # ---- attention modules, MoE curve, NCCL curves
    dsa_par = np.zeros(KD.DSA_PAR_SIZE, np.float64)
    dsa_par[KA.PAR_NUM_KV_HEADS] = heads
    dsa_par[KA.PAR_HEAD_DIM] = model.kv_lora_rank + model.qk_rope_head_dim
    dsa_par[KA.PAR_KV_BYTES] = _DTYPE_BYTES[kv_dtype]
    dsa_par[KA.PAR_FLOPS] = flops_of(mla_dtype)
    # keys each query attends to in the SOL: index_topk (2048) for DSA, all of them for MLA
    dsa_par[KA.PAR_WINDOW] = 2048.0 if model.index_n_heads > 0 else 1e18
    dsa_par[KA.PAR_MEM_BW] = mem_bw
    if model.index_n_heads > 0:
        _dsa_sol_par(dsa_par, model, gemm_dtype, kv_dtype, flops_of("fp8"))
    else:
        _mla_sol_par(dsa_par, model, gemm_dtype, kv_dtype, flops_of("fp8"))
    key = {key_column: key_value, "mla_dtype": mla_dtype, "kv_cache_dtype": kv_dtype,
           "gemm_type": gemm_dtype}
    if backend == "vllm" and model.index_n_heads == 0:
        # vLLM's MLA module (V3 / R1): AISimulate reports it as `*_mla_block` (silicon) and
        # reads the context module like dense context attention (NOTES.md, issue 6)
        mla_par = np.zeros(KA.PAR_SIZE, np.float64)
        mla_par[KA.PAR_NUM_KV_HEADS] = heads
        mla_par[KA.PAR_MHA] = 1.0   # MHA over the decompressed k / v; the SOL is linear in d
        mla_par[KA.PAR_HEAD_DIM] = model.qk_nope_head_dim + model.qk_rope_head_dim
        mla_par[KA.PAR_KV_BYTES] = _DTYPE_BYTES[kv_dtype]
        mla_par[KA.PAR_FLOPS] = flops_of(mla_dtype)
        mla_par[KA.PAR_MEM_BW] = mem_bw
        mla_block = MlaBlock([], [("mla_context_module", KP.OP_ATTN_CONTEXT, None, 0.0)],
                             _mla_module_context_nest(tables, ctx_family, key), mla_par)
    dsa_ctx = _dsa_nest(tables, ctx_family, key, heads, where)
    dsa_gen = _dsa_nest(tables, gen_family, key, heads, where)
    dsa_ctx_par = dsa_par
    if model.index_n_heads > 0:   # the context hold borrows every head count (optime_dsa)
        # (not checked for the dense MLA module: its table has prefix 0 only and several
        # lanes, and AISimulate prices a cached prefix there another way; see NOTES.md)
        dsa_ctx_par = _with_hold_leaves(dsa_par, tables, ctx_family, key)
    moe_x, moe_y, moe_en, moe_par = _moe_slice(tables, moe_dtype, MOE_DISTRIBUTION, model,
                                               moe_tensor, moe_expert, adp, flops_of, mem_bw,
                                               where)
    comm = _dispatch_curves(tables, t, adp, num_gpus, where, backend, node)

    consts = np.zeros(KP.NUM_CONSTS, np.float64)
    consts[KP.C_MODE] = MODES[mode]
    consts[KP.C_MEM_BW] = mem_bw
    consts[KP.C_MEM_EFF] = float(gpu["mem_bw_empirical_scaling_factor"])
    consts[KP.C_MEM_CONST_S] = float(gpu["mem_empirical_constant_latency"])
    consts[KP.C_LINK_BW] = float(node["intra_node_bw"])
    consts[KP.C_INTER_BW] = float(node["inter_node_bw"])
    consts[KP.C_P2P_LAT_S] = float(node["p2p_latency"])
    consts[KP.C_TP] = t
    consts[KP.C_AR_ELEM_BYTES] = 2.0
    consts[KP.C_NEXTN] = nextn
    consts[KP.C_HEADS] = heads
    consts[KP.C_NCCL_GPUS] = num_gpus
    # under attention TP x DP the dispatch allreduce is folded into the NCCL curves
    consts[KP.C_DISPATCH_AR] = 1.0 if t > 1 and adp == 1 else 0.0

    # ---- op lists: (name, kind, gemm index, per-token param, scale)
    # TRT-LLM gathers fp8 MoE inputs at one byte per element: half the bf16 message
    # (the NCCL all_gather of attention-DP only: the attention-TP allreduce moves bf16)
    gather = 0.5 if backend == "trtllm" and moe_dtype in ("fp8", "fp8_block") and adp > 1 else 1.0
    # vLLM, dense MLA (V3 / R1): AISimulate prices a `tp_allreduce` op, two allreduces of
    # tokens x hidden per layer over the attention-TP group (0 at TP 1, but listed); V3.2 and
    # TRT-LLM have no attention-TP allreduce op (checked at TP 8, 2 x 1024 and 2 x 101)
    tp_allreduce = backend == "vllm" and model.index_n_heads == 0
    embedding_ar = False

    def moe_block(layer_scale: float) -> tuple[list, list]:
        routed = [
            ("router_gemm", KP.OP_GEMM_TOKENS, gi_of["router_gemm"], 0.0, layer_scale),
            ("moe_pre_dispatch", KP.OP_NCCL_ALL_GATHER, -1, float(h * adp) * gather,
             layer_scale),
            ("moe", KP.OP_MOE, -1, 0.0, layer_scale),
            ("moe_post_dispatch", KP.OP_NCCL_REDUCE_SCATTER, -1, float(h * adp), layer_scale),
        ]
        shared = [
            ("shared_gate_up_gemm", KP.OP_GEMM_TOKENS, gi_of["shared_gate_up_gemm"], 0.0,
             layer_scale),
            ("shared_act_gate", KP.OP_MEM_TOKENS, -1, (2 * shared_inter + shared_inter) * 2.0,
             layer_scale),
            ("shared_ffn2_gemm", KP.OP_GEMM_TOKENS, gi_of["shared_ffn2_gemm"], 0.0,
             layer_scale),
        ]
        return routed, shared

    rows: list[tuple] = []
    ctx_scale = float(L)
    routed, shared = moe_block(ctx_scale)
    attention = ("context", "attention", KP.OP_DSA_CONTEXT, -1, 0.0, ctx_scale)
    if mla_block is not None:   # op_index / op_param: first hidden sub-op (set below), count
        attention = ("context", "mla_block", KP.OP_SUM, -1, float(len(mla_block.sub_ops)),
                     ctx_scale)
    rows += [("context", "embedding", KP.OP_MEM_TOKENS, -1, 2.0 * h, 1.0),
             ("context", "add_norm_1", KP.OP_MEM_TOKENS, -1, 8.0 * h, ctx_scale),
             attention,
             ("context", "add_norm_2", KP.OP_MEM_TOKENS, -1, 8.0 * h, ctx_scale)]
    rows += [("context", *r) for r in shared + routed]
    rows += [("context", "logits_gemm", KP.OP_GEMM_REQUESTS, gi_of["logits_gemm"], 0.0, 1.0)]
    if embedding_ar:
        rows.append(("context", "embedding_ar", KP.OP_ALLREDUCE, -1, float(h), 1.0))
    if tp_allreduce:
        rows.append(("context", "tp_allreduce", KP.OP_ALLREDUCE, -1, float(h), 2.0 * ctx_scale))
    rows += [("context", "p2p", KP.OP_P2P, -1, 2.0 * h, float(pipeline_parallel - 1))]
    num_ctx = len(rows)
    gen_scale = float(L + nextn)
    once = gen_scale / L
    routed, shared = moe_block(1.0)   # inside the overlap op: per layer, scaled by the overlap
    rows += [("generation", "embedding", KP.OP_MEM_TOKENS, -1, 2.0 * h, once),
             ("generation", "add_norm_1", KP.OP_MEM_TOKENS, -1, 8.0 * h, gen_scale),
             ("generation", "attention" if mla_block is None else "mla_block",
              KP.OP_DSA_GENERATION, -1, 0.0, gen_scale),
             ("generation", "add_norm_2", KP.OP_MEM_TOKENS, -1, 8.0 * h, gen_scale),
             ("generation", "moe_overlap", KP.OP_OVERLAP, -1, 0.0, gen_scale),
             ("generation", "logits_gemm", KP.OP_GEMM_REQUESTS, gi_of["logits_gemm"], 0.0,
              once)]
    if embedding_ar:
        rows.append(("generation", "embedding_ar", KP.OP_ALLREDUCE, -1, float(h), once))
    if tp_allreduce:
        rows.append(("generation", "tp_allreduce", KP.OP_ALLREDUCE, -1, float(h),
                     2.0 * gen_scale))
    rows += [("generation", "p2p", KP.OP_P2P, -1, 2.0 * h,
              float(pipeline_parallel - 1) * once)]
    num_ops = len(rows)
    consts[KP.C_OVL_A_LO] = num_ops
    consts[KP.C_OVL_B_LO] = num_ops + len(routed)
    consts[KP.C_OVL_B_HI] = num_ops + len(routed) + len(shared)
    rows += [("hidden", *r) for r in routed + shared]   # evaluated only inside the overlap
    ctx_nest, ctx_par = _empty_nest(), np.zeros(KA.PAR_SIZE, np.float64)
    if mla_block is not None:
        at = [r[1] for r in rows].index("mla_block")
        rows[at] = (*rows[at][:3], len(rows), *rows[at][4:])
        rows += [("hidden", name, kind, gi_of[g] if g else -1, param, 1.0)
                 for name, kind, g, param in mla_block.sub_ops]
        ctx_nest, ctx_par = mla_block.nest, mla_block.par
    consts[KP.C_NUM_CTX_OPS] = num_ctx
    consts[KP.C_NUM_OPS] = num_ops

    arrays = no_moe_arrays()
    arrays.update({f"dsa_ctx_{k}": v for k, v in dsa_ctx.items()}, dsa_ctx_par=dsa_ctx_par,
                  dsa_gen_par=dsa_par.copy())
    arrays.update({f"dsa_gen_{k}": v for k, v in dsa_gen.items()})
    arrays.update(moe_x=moe_x, moe_y=moe_y, moe_en=moe_en, moe_par=moe_par,
                  **{k: v for k, v in comm.items() if not k.startswith("ar_")})
    nest = _empty_nest()
    plan = DensePlan(
        consts=consts,
        op_kind=np.asarray([r[2] for r in rows], np.int64),
        op_index=np.asarray([r[3] for r in rows], np.int64),
        op_param=np.asarray([r[4] for r in rows], np.float64),
        op_scale=np.asarray([r[5] for r in rows], np.float64),
        gemm_n=np.array([float(g[1]) for g in gemm_ops]),
        gemm_k=np.array([float(g[2]) for g in gemm_ops]),
        gemm_flops=np.array([flops_of(g[3]) for g in gemm_ops]),
        gemm_bpe=np.array([_DTYPE_BYTES[g[3]] for g in gemm_ops]),
        gemm_num_sites=g_num, gemm_sites=g_sites, gemm_weights=g_w,
        **gemm.arrays(),
        **{f"ctx_{k}": v for k, v in ctx_nest.items() if k != "en"}, ctx_par=ctx_par,
        **{f"gen_{k}": v.copy() for k, v in nest.items() if k != "en"},
        gen_par=np.zeros(KA.PAR_SIZE, np.float64),
        ar_x=comm["ar_x"], ar_y=comm["ar_y"],
        scratch_d=np.zeros(8, np.float64), scratch_i=np.zeros(8, np.int64),
        ctx_en=ctx_nest["en"], gen_en=np.zeros(1), ar_en=comm["ar_en"],
        **arrays,
    )
    names = tuple(f"{phase}_{name}" for phase, name, *_r in rows[:num_ops])
    return PassPlan(arrays=plan, op_names=names, num_ctx_ops=num_ctx, model_id=model.model_id,
                    backend=backend, version=version, mode=mode, tensor_parallel=t,
                    gemm_descr=tuple(descr))


# ------------------------------------------------------------------ Qwen3 MoE (GQA attention)

QWEN_MOE_DISTRIBUTION = "power_law_1.2"


def _build_gqa_moe_plan(model: ModelArch, tables: Tables, system: dict, *, backend: str,
                        version: str, t: int, pp: int, adp: int, moe_tensor: int,
                        moe_expert: int, mode: str, nextn: int, where: str) -> PassPlan:
    """Qwen3 MoE: the dense attention block (GQA, qk-norm extras) + router + routed experts.

    The attention slices, fused extras and allreduce curve are the dense plan's (same model,
    same tensor parallelism); the FFN becomes router GEMM (when >= 128 experts), dispatch,
    experts and combine.
    """
    from aisim.timing.plan import build_dense_plan

    if t * adp != moe_tensor * moe_expert:
        raise NotAvailableError(
            f"op-level timing for {where}: tensor x attention_data ({t * adp}) must equal "
            f"moe_tensor x moe_expert ({moe_tensor * moe_expert})")
    num_gpus = moe_tensor * moe_expert
    dense = build_dense_plan(model, tables, system, backend=backend, version=version,
                             tensor_parallel=t, pipeline_parallel=pp, mode=mode, nextn=nextn)
    d0 = dense.arrays
    h = model.hidden_size
    L = model.num_layers
    heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    d = model.head_dim
    gpu = system["gpu"]
    mem_bw = float(gpu["mem_bw"])

    def flops_of(dtype: str) -> float:
        return float(gpu[_DTYPE_FLOPS[dtype]])

    gemm_dtype = model.weight_quant or "bfloat16"
    gemm_ops = [
        ("qkv_gemm", heads * d + 2 * n_kv * d, h, gemm_dtype),
        ("proj_gemm", h, heads * d, gemm_dtype),
        ("router_gemm", model.num_experts, h, "bfloat16"),
        ("logits_gemm", model.vocab_size // t, h, "bfloat16"),
    ]
    gemm = _GemmSites(tables, mem_bw, flops_of)
    g_num = np.zeros(len(gemm_ops), np.int64)
    g_sites = np.full((len(gemm_ops), GEMM_MAX_NEIGHBOURS), -1, np.int64)
    g_w = np.zeros((len(gemm_ops), GEMM_MAX_NEIGHBOURS), np.float64)
    descr = []
    for gi, (name, n, k, dtype) in enumerate(gemm_ops):
        num, ids, ws, text = gemm.resolve(name, dtype, n, k)
        g_num[gi] = num
        g_sites[gi, :len(ids)] = ids
        g_w[gi, :len(ws)] = ws
        descr.append(text)
    gi_of = {name: gi for gi, (name, *_r) in enumerate(gemm_ops)}
    moe_x, moe_y, moe_en, moe_par = _moe_slice(tables, gemm_dtype, QWEN_MOE_DISTRIBUTION, model,
                                               moe_tensor, moe_expert, adp, flops_of, mem_bw,
                                               where)
    comm = _dispatch_curves(tables, t, adp, num_gpus, where, backend, system["node"])
    consts = d0.consts.copy()
    consts[KP.C_NCCL_GPUS] = num_gpus
    # under attention TP x DP the dispatch allreduce is folded into the NCCL curves
    consts[KP.C_DISPATCH_AR] = 1.0 if t > 1 and adp == 1 else 0.0

    rows: list[tuple] = []
    for phase in ("context", "generation"):
        layer = float(L + (nextn if phase == "generation" else 0))
        once = layer / L
        attn = KP.OP_ATTN_CONTEXT if phase == "context" else KP.OP_ATTN_GENERATION
        rows += [(phase, "embedding", KP.OP_MEM_TOKENS, -1, 2.0 * h, once),
                 (phase, "add_norm_1", KP.OP_MEM_TOKENS, -1, 8.0 * h, layer),
                 (phase, "qkv_gemm", KP.OP_GEMM_TOKENS, gi_of["qkv_gemm"], 0.0, layer),
                 (phase, "attention", attn, -1, 0.0, layer),
                 (phase, "proj_gemm", KP.OP_GEMM_TOKENS, gi_of["proj_gemm"], 0.0, layer),
                 (phase, "add_norm_2", KP.OP_MEM_TOKENS, -1, 8.0 * h, layer)]
        if model.num_experts >= 128:   # smaller routers are not priced (AISimulate)
            rows.append((phase, "router_gemm", KP.OP_GEMM_TOKENS, gi_of["router_gemm"], 0.0,
                         layer))
        rows += [(phase, "moe_pre_dispatch", KP.OP_NCCL_ALL_GATHER, -1, float(h * adp), layer),
                 (phase, "moe", KP.OP_MOE, -1, 0.0, layer),
                 (phase, "moe_post_dispatch", KP.OP_NCCL_REDUCE_SCATTER, -1, float(h * adp),
                  layer),
                 (phase, "p2p", KP.OP_P2P, -1, 2.0 * h, float(pp - 1) * once)]
        # the embedding's allreduce over the attention-TP group (0 at TP 1, still listed)
        rows.insert(-1, (phase, "embedding_ar", KP.OP_ALLREDUCE, -1, float(h), once))
        if phase == "generation":   # the MoE family has no context lm_head (AISimulate)
            rows.insert(-1, (phase, "logits_gemm", KP.OP_GEMM_REQUESTS, gi_of["logits_gemm"],
                             0.0, once))
        if phase == "context":
            num_ctx = len(rows)
    consts[KP.C_NUM_CTX_OPS] = num_ctx
    consts[KP.C_NUM_OPS] = len(rows)
    base = d0._asdict()
    base.update(
        consts=consts,
        op_kind=np.asarray([r[2] for r in rows], np.int64),
        op_index=np.asarray([r[3] for r in rows], np.int64),
        op_param=np.asarray([r[4] for r in rows], np.float64),
        op_scale=np.asarray([r[5] for r in rows], np.float64),
        gemm_n=np.array([float(g[1]) for g in gemm_ops]),
        gemm_k=np.array([float(g[2]) for g in gemm_ops]),
        gemm_flops=np.array([flops_of(g[3]) for g in gemm_ops]),
        gemm_bpe=np.array([_DTYPE_BYTES[g[3]] for g in gemm_ops]),
        gemm_num_sites=g_num, gemm_sites=g_sites, gemm_weights=g_w, **gemm.arrays(),
        moe_x=moe_x, moe_y=moe_y, moe_en=moe_en, moe_par=moe_par, **comm)
    return PassPlan(arrays=DensePlan(**base), op_names=tuple(f"{r[0]}_{r[1]}" for r in rows),
                    num_ctx_ops=num_ctx, model_id=model.model_id, backend=backend,
                    version=version, mode=mode, tensor_parallel=t, gemm_descr=tuple(descr))


def _dispatch_curves(tables: Tables, t: int, adp: int, num_gpus: int, where: str,
                     backend: str, node: dict) -> dict[str, np.ndarray]:
    """Curves of the vLLM MoE dispatch / combine (custom allreduce when attention-TP > 1 over
    the whole MoE group, NCCL all_gather / reduce_scatter when attention-DP > 1; both together:
    aisim.timing.dispatch_tpdp). Groups beyond the measured sizes (more than one node) read
    the largest measured curves, scaled (aisim.timing.multinode)."""
    from aisim.timing.dispatch_tpdp import tp_dp_dispatch_curves
    from aisim.timing.plan import _allreduce_curve

    if t > 1 and adp > 1:
        return tp_dp_dispatch_curves(tables, backend, t, adp, num_gpus, where, node)
    out = {"ar_x": np.ones(1), "ar_y": np.ones(1), "ar_en": np.zeros(1), "ag_x": np.ones(1),
           "ag_y": np.ones(1), "rs_x": np.ones(1), "rs_y": np.ones(1)}
    if t > 1:
        out["ar_x"], out["ar_y"], out["ar_en"] = _allreduce_curve(tables, num_gpus, node)
    if adp > 1:
        out["ag_x"], out["ag_y"] = _nccl_curve(tables, "all_gather", num_gpus, where, node)
        out["rs_x"], out["rs_y"] = _nccl_curve(tables, "reduce_scatter", num_gpus, where, node)
    return out


def _moe_slice(tables, dtype, distribution, model, moe_tp, moe_ep, adp, flops_of, mem_bw,
               where):
    moe_x, moe_y, moe_en = _moe_curve(tables, dtype, distribution, model, moe_tp, moe_ep, where)
    par = np.zeros(KM.MOE_PAR_SIZE, np.float64)
    par[KM.MOE_TOPK] = model.num_experts_per_tok
    par[KM.MOE_HIDDEN] = model.hidden_size
    par[KM.MOE_INTER] = model.moe_intermediate_size
    par[KM.MOE_EXPERTS] = model.num_experts
    par[KM.MOE_TP] = moe_tp
    par[KM.MOE_EP] = moe_ep
    par[KM.MOE_BPE] = _DTYPE_BYTES[dtype]
    par[KM.MOE_FLOPS] = flops_of(dtype)
    par[KM.MOE_MEM_BW] = mem_bw
    par[KM.MOE_DP] = adp
    par[KM.MOE_GATED] = 3.0
    return moe_x, moe_y, moe_en, par


# ------------------------------------------------------------------------------ DSA modules


def _dsa_sol_par(par: np.ndarray, model: ModelArch, gemm_dtype: str, kv_dtype: str,
                 fp8_flops: float) -> None:
    """The DSA module SOL's constants (`optime_attention.dsa_sol_ms`), from the model config.

    Fitted to AISimulate 0.13's per-op SOL on V3.2 (fp8_block GEMMs, fp8 KV): the weights read
    are q_a, kv_a, q_b, o_proj and the indexer's wq_b / wk / weights_proj (kv_b is absorbed:
    its FLOPs count, its weights do not); the per-new-token bytes (768 per head at V3.2) are
    matched by 4 x (nope + rope) without knowing which tensors they stand for.
    """
    hidden = model.hidden_size
    qk = model.qk_nope_head_dim + model.qk_rope_head_dim
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    wb = _DTYPE_BYTES[gemm_dtype]
    kvb = _DTYPE_BYTES[kv_dtype]
    par[KD.DSA_TOPK] = model.index_topk
    par[KD.DSA_W0] = wb * (hidden * model.q_lora_rank + hidden * latent
                           + model.q_lora_rank * model.index_n_heads * model.index_head_dim
                           + hidden * model.index_head_dim + hidden * model.index_n_heads)
    par[KD.DSA_WH] = wb * (model.q_lora_rank * qk + model.v_head_dim * hidden)
    par[KD.DSA_KVB_FLOPS_H] = 2.0 * model.kv_lora_rank * (model.qk_nope_head_dim
                                                          + model.v_head_dim)
    par[KD.DSA_ATTN_FLOPS_H] = 2.0 * (latent + model.kv_lora_rank)
    par[KD.DSA_IDX_FLOPS] = 2.0 * model.index_n_heads * model.index_head_dim
    par[KD.DSA_IDX_KEY_BYTES] = model.index_head_dim + 4   # fp8 key + one fp32 scale
    par[KD.DSA_NEW_BYTES_H] = 4.0 * qk
    par[KD.DSA_KEY_BYTES_H] = latent * kvb
    par[KD.DSA_KEY_BYTES] = latent * kvb
    par[KD.DSA_FP8_FLOPS] = fp8_flops



def _mla_sol_par(par: np.ndarray, model: ModelArch, gemm_dtype: str, kv_dtype: str,
                 fp8_flops: float) -> None:
    """The dense MLA generation module SOL's constants (`optime_dsa.mla_generation_sol_ms`).

    Fitted to AISimulate 0.13's per-op SOL on V3 at 128 heads; the generation bytes per
    sequence besides the latent KV (3456 per head) are matched by 6 x latent without knowing
    which tensors they stand for.
    """
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    kvb = _DTYPE_BYTES[kv_dtype]
    par[KD.DSA_W0] = _DTYPE_BYTES[gemm_dtype] * model.kv_lora_rank * (model.qk_nope_head_dim
                                                                      + model.v_head_dim)
    par[KD.DSA_KVB_FLOPS_H] = 2.0 * model.kv_lora_rank * (model.qk_nope_head_dim
                                                          + model.v_head_dim)
    par[KD.DSA_ATTN_FLOPS_H] = 2.0 * (latent + model.kv_lora_rank)
    par[KD.DSA_KEY_BYTES] = latent * kvb
    par[KD.DSA_FP8_FLOPS] = fp8_flops
    par[KD.MLA_GEN_SEQ_BYTES_H] = 6.0 * latent


def _mla_module_context_nest(tables: Tables, family: str, key: dict) -> dict[str, np.ndarray]:
    """vLLM's dense MLA context module (V3 / R1) as a context-attention nest (heads, seq,
    batch): AISimulate reads it like dense context attention (seq = new + prefix, sqrt blend
    on seq, prefix correction, MHA SOL), every lane's rows merged, first row wins."""
    c = ordered_rows(tables[family])
    idx = np.nonzero(_slice_mask(c, key) & (c["step"] == 0))[0]
    leaves: dict[tuple[int, int, int], float] = {}
    energy: dict[tuple[int, int, int], float] = {}
    coords = zip(c["num_heads"][idx].tolist(), c["isl"][idx].tolist(),
                 c["batch_size"][idx].tolist(), strict=True)
    for k, lat, pw in zip(coords, c["latency"][idx].tolist(), _power(c, idx), strict=True):
        if k not in leaves:
            leaves[k] = lat
            energy[k] = pw * lat
    return csr_nest(leaves, energy)


def _with_hold_leaves(par: np.ndarray, tables: Tables, family: str, key: dict) -> np.ndarray:
    """`par` followed by the DSA context slice's leaves at every head count, packed for
    `optime_dsa.dsa_context_hold`: (heads, prefix, new tokens, batch, latency, energy)."""
    c = ordered_rows(tables[family])
    idx = np.nonzero(_slice_mask(c, key))[0]
    leaves: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    coords = zip(c["num_heads"][idx].tolist(), c["step"][idx].tolist(),
                 c["isl"][idx].tolist(), c["batch_size"][idx].tolist(), strict=True)
    for k, lat, pw in zip(coords, c["latency"][idx].tolist(), _power(c, idx), strict=True):
        leaves.setdefault(k, (lat, pw * lat))   # first row wins
    packed = np.array([[*k, *leaves[k]] for k in sorted(leaves)], np.float64).reshape(-1)
    out = np.concatenate([par, packed])
    out[KD.DSA_HOLD_NUM] = len(leaves)
    return out


def _slice_mask(c: dict, key: dict) -> np.ndarray:
    mask = np.ones(len(c["latency"]), bool)
    for col, value in key.items():
        mask &= c[col] == value
    if "skip_indexer" in c:
        mask &= c["skip_indexer"] == 0
    return mask


def _dsa_nest(tables: Tables, family: str, key: dict, heads: int,
              where: str) -> dict[str, np.ndarray]:
    """A DSA / MLA module slice as a CSR nest, raw latencies (no load-time SOL clamp).

    context: (cached prefix + 1, new tokens, batch) at exactly `heads` heads per rank (the
    prefix axis is shifted by one so the log2 distances of the hold stay finite);
    generation: (heads, batch, kv = isl + step).
    """
    op = "context_attention" if "context" in family else "generation_attention"
    slice_text = " ".join([family, *(f"{k}={v}" for k, v in key.items())])
    if family not in tables:
        raise OpTableError(op, slice_text, f"the op-time table has no {family} family ({where})")
    c = ordered_rows(tables[family])
    mask = _slice_mask(c, key)
    gen = "generation" in family
    if not gen:
        mask &= c["num_heads"] == heads
        slice_text += f" num_heads={heads}"
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError(op, slice_text, f"attention module perf data missing for {where}")
    a0 = c["num_heads"][idx] if gen else c["step"][idx] + 1
    a1 = c["batch_size"][idx] if gen else c["isl"][idx]
    a2 = c["isl"][idx] + c["step"][idx] if gen else c["batch_size"][idx]
    leaves: dict[tuple[int, int, int], float] = {}
    energy: dict[tuple[int, int, int], float] = {}
    for k0, k1, k2, lat, pw in zip(a0.tolist(), a1.tolist(), a2.tolist(),
                                   c["latency"][idx].tolist(), _power(c, idx), strict=True):
        if (k0, k1, k2) not in leaves:   # first row wins
            leaves[(k0, k1, k2)] = lat
            energy[(k0, k1, k2)] = pw * lat   # TRT-LLM module tables carry power, vLLM's not
    return csr_nest(leaves, energy)



# -------------------------------------------------------------------------- MoE and NCCL


def _moe_curve(tables: Tables, dtype: str, distribution: str, model: ModelArch, moe_tp: int,
               moe_ep: int, where: str):
    slice_text = (f"moe moe_dtype={dtype} distribution={distribution} "
                  f"topk={model.num_experts_per_tok} num_experts={model.num_experts} "
                  f"hidden={model.hidden_size} inter={model.moe_intermediate_size} "
                  f"moe_tp={moe_tp} moe_ep={moe_ep}")
    if "moe" not in tables:
        raise OpTableError("moe", slice_text, f"the op-time table has no moe family ({where})")
    c = ordered_rows(tables["moe"])
    mask = ((c["moe_dtype"] == dtype) & (c["distribution"] == distribution)
            & (c["topk"] == model.num_experts_per_tok) & (c["num_experts"] == model.num_experts)
            & (c["hidden_size"] == model.hidden_size)
            & (c["inter_size"] == model.moe_intermediate_size)
            & (c["moe_tp_size"] == moe_tp) & (c["moe_ep_size"] == moe_ep))
    if "low_latency" in c:
        mask &= c["low_latency"] == 0
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError("moe", slice_text, f"MoE perf data missing for {where}")
    first: dict[int, tuple[float, float]] = {}
    for x, y, pw in zip(c["num_tokens"][idx].tolist(), c["latency"][idx].tolist(),
                        _power(c, idx), strict=True):
        first.setdefault(x, (y, pw * y))
    xs = sorted(first)
    return (np.asarray(xs, np.float64), np.asarray([first[x][0] for x in xs], np.float64),
            np.asarray([first[x][1] for x in xs], np.float64))


def _nccl_curve(tables: Tables, collective: str, num_gpus: int, where: str,
                node: dict | None = None):
    """The NCCL `collective` curve at `num_gpus`; with `node`, a group larger than every
    measured one is the largest measured curve scaled (aisim.timing.multinode)."""
    slice_text = f"nccl op_name={collective} nccl_dtype=half num_gpus={num_gpus}"
    if "nccl" not in tables:
        raise OpTableError("moe_pre_dispatch", slice_text,
                           f"the op-time table has no nccl family ({where})")
    c = ordered_rows(tables["nccl"])
    mask = (c["op_name"] == collective) & (c["nccl_dtype"] == "half")
    if node is not None:
        from aisim.timing.multinode import group_scale, measured_groups, scaled

        groups = measured_groups(c["num_gpus"], mask)
        if groups and num_gpus > groups[-1]:
            return scaled(_nccl_curve(tables, collective, groups[-1], where),
                          group_scale(num_gpus, groups[-1], node))
    mask &= c["num_gpus"] == num_gpus
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError("moe_pre_dispatch", slice_text, f"NCCL perf data missing for {where}")
    first: dict[int, float] = {}
    for x, y in zip(c["message_size"][idx].tolist(), c["latency"][idx].tolist(), strict=True):
        first.setdefault(x, y)
    xs = sorted(first)
    return np.asarray(xs, np.float64), np.asarray([first[x] for x in xs], np.float64)

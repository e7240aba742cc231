"""The DeepSeek op plan around its attention: MoE layers, dispatch, the decode overlap.

Shared by the two DeepSeek families (aisim.timing.family_deepseek_dsa: V3.2, DSA attention;
aisim.timing.family_deepseek_mla: V3 / R1, dense MLA attention), which supply the attention
part (`DeepSeekAttention`). One rank of an attention-DP group (docs/timing.md 3.5, 3.6): every
layer is priced as an MoE layer (AISimulate keeps its all-MoE approximation under attention-DP,
so the dense leading layers are MoE layers too), per layer
  add_norm_1 -> attention -> add_norm_2 -> shared expert (gate_up GEMM, act, down GEMM)
  -> router GEMM (bf16) -> NCCL all_gather (pre-dispatch) -> routed experts at global tokens =
  local x attention-DP -> NCCL reduce_scatter (post-dispatch);
plus embedding and the lm_head (bf16, m = requests) once. In decode the MoE block is one
overlap op: max(router + dispatch + experts + combine, shared expert).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aisim.kernels import optime_pass as KP
from aisim.kernels.optime_attention import GridSlice
from aisim.models import ModelArch, attention_excluded_on
from aisim.timing.leaf_attention import absent_grid
from aisim.timing.leaf_dispatch import dispatch_curves, gather_scale
from aisim.timing.leaf_gemm import GemmOp, gemm_sites
from aisim.timing.leaf_moe import moe_curve
from aisim.timing.plan_record import Deployment, OpRow, PassPlan, allreduce_scalars, assemble
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables

MOE_DISTRIBUTION = "power_law_1.01"  # DeepSeek token routing of the moe table


@dataclass(frozen=True)
class DeepSeekDtypes:
    gemm: str  # GEMMs: the checkpoint's weight quant, else bf16
    kv: str  # KV cache: fp8 with a quantized checkpoint, else bf16
    moe: str  # routed experts: the checkpoint's weight quant, else bf16
    attention: str = ""  # the attention module's GEMMs (module rows' gemm_type); "" = gemm
    shared: str = ""  # the shared expert's GEMMs; "" = gemm

    def __post_init__(self) -> None:
        object.__setattr__(self, "attention", self.attention or self.gemm)
        object.__setattr__(self, "shared", self.shared or self.gemm)

    @classmethod
    def of(cls, model: ModelArch, backend: str = "vllm") -> DeepSeekDtypes:
        weights = model.weight_quant or "bfloat16"
        if model.experts_only_quant:
            # int4 experts beside bf16 GEMMs keep a bf16 KV cache (oracle: Kimi-K2.5's MLA
            # module reads the bf16 / bf16 rows, its memory model 61 x 576 x 2 bytes a token)
            from aisim.memory import default_quant_modes

            gemm, moe, kv = default_quant_modes(model)
            return cls(gemm, kv, moe)
        kv = "fp8" if model.weight_quant else "bfloat16"
        if weights not in ("nvfp4", "fp8_block"):
            return cls(weights, kv, weights)
        # quantized checkpoints keep parts bf16 by their exclusion lists: the module rows carry
        # one gemm_type, o_proj's (the largest projection), and an NVFP4 export's shared expert
        # its own (docs/timing.md 3.5, 3.6)
        excluded = attention_excluded_on(model, backend)
        shared = weights == "nvfp4" and model.shared_experts_excluded
        return cls(
            weights,
            kv,
            weights,
            attention="bfloat16" if "o" in excluded else weights,
            shared="bfloat16" if shared else weights,
        )


@dataclass
class DeepSeekAttention:
    """The attention part of a DeepSeek layer, as its family resolved it."""

    context_op: OpRow  # the context attention op (OP_DSA_CONTEXT or an OP_SUM)
    generation_name: str  # the generation module op's name
    dsa_context: GridSlice
    dsa_generation: GridSlice
    context_attention: GridSlice = field(default_factory=absent_grid)  # OP_ATTN_CONTEXT reads
    hidden: list = field(default_factory=list)  # sub-ops of OP_SUM attention ops
    generation_op: OpRow | None = None  # None: the module op over every decode layer
    dsa_context_skip: GridSlice = field(default_factory=absent_grid)  # OP_DSA_*_SKIP read
    dsa_generation_skip: GridSlice = field(default_factory=absent_grid)
    tp_allreduce: bool = False  # two allreduces of tokens x hidden per layer over the
    # attention-TP group (0 at TP 1, but listed)


def deepseek_gemms(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment: Deployment,
    shared_tp: int,
    attention_ops: list[GemmOp],
) -> tuple[list[GemmOp], tuple]:
    """The shared expert (split over shared_tp), router and lm_head GEMMs plus the attention
    part's, resolved (gemm_sites' result); a miss names the shared-layer switch."""
    dtypes = DeepSeekDtypes.of(model, deployment.backend)
    h = model.hidden_size
    shared_inter = _shared_inter(model, shared_tp)
    ops = [
        GemmOp("shared_gate_up_gemm", 2 * shared_inter, h, dtypes.shared),
        GemmOp("shared_ffn2_gemm", h, shared_inter, dtypes.shared),
        GemmOp("router_gemm", model.num_experts, h, "bfloat16"),
        # n > 65536 at TP 1: resolved by the frontier waiver
        GemmOp("logits_gemm", model.vocab_size // deployment.tensor, h, "bfloat16"),
        *attention_ops,
    ]
    where = deployment.where(model.model_id)
    hint = f"{where} (fp8_block GEMMs need enable_shared_layer: true)"
    return ops, gemm_sites(ops, tables, system, miss_hint=hint)


def _shared_inter(model: ModelArch, shared_tp: int) -> int:
    return model.moe_intermediate_size * max(1, model.num_shared_experts) // shared_tp


def build_deepseek_plan(
    model: ModelArch,
    tables: Tables,
    system: GpuSystem,
    deployment: Deployment,
    gemms: tuple[list[GemmOp], tuple],
    shared_tp: int,
    part: DeepSeekAttention,
) -> PassPlan:
    """The plan around the attention part; `gemms`: deepseek_gemms(...)'s result."""
    where = deployment.where(model.model_id)
    num_gpus = deployment.moe_group_gpus(where)
    t, adp = int(deployment.tensor), int(deployment.attention_dp)
    dtypes = DeepSeekDtypes.of(model, deployment.backend)
    moe = moe_curve(
        tables,
        model,
        dtype=dtypes.moe,
        distribution=MOE_DISTRIBUTION,
        moe_tp=deployment.moe_tensor,
        moe_ep=deployment.moe_expert,
        attention_dp=adp,
        system=system,
        where=where,
    )
    comm = dispatch_curves(tables, deployment.backend, t, adp, num_gpus, where, system)

    h = model.hidden_size
    L = model.num_layers
    gather = gather_scale(deployment.backend, dtypes.moe, adp, system)
    shared_inter = _shared_inter(model, shared_tp)

    def moe_block(phase: str, layer: float) -> tuple[list[OpRow], list[OpRow]]:
        routed = [
            OpRow(phase, "router_gemm", KP.OP_GEMM_TOKENS, "router_gemm", 0.0, layer),
            OpRow(
                phase,
                "moe_pre_dispatch",
                KP.OP_NCCL_ALL_GATHER,
                None,
                float(h * adp) * gather,
                layer,
            ),
            OpRow(phase, "moe", KP.OP_MOE, None, 0.0, layer),
            OpRow(
                phase, "moe_post_dispatch", KP.OP_NCCL_REDUCE_SCATTER, None, float(h * adp), layer
            ),
        ]
        shared = [
            OpRow(
                phase, "shared_gate_up_gemm", KP.OP_GEMM_TOKENS, "shared_gate_up_gemm", 0.0, layer
            ),
            OpRow(
                phase,
                "shared_act_gate",
                KP.OP_MEM_TOKENS,
                None,
                (2 * shared_inter + shared_inter) * 2.0,
                layer,
            ),
            OpRow(phase, "shared_ffn2_gemm", KP.OP_GEMM_TOKENS, "shared_ffn2_gemm", 0.0, layer),
        ]
        return routed, shared

    def tail(phase: str, layer: float, once: float) -> list[OpRow]:
        rows = [OpRow(phase, "logits_gemm", KP.OP_GEMM_REQUESTS, "logits_gemm", 0.0, once)]
        if part.tp_allreduce:
            rows.append(OpRow(phase, "tp_allreduce", KP.OP_ALLREDUCE, None, float(h), 2.0 * layer))
        return [
            *rows,
            OpRow(phase, "p2p", KP.OP_P2P, None, 2.0 * h, float(deployment.pipeline - 1) * once),
        ]

    ctx = float(L)
    routed, shared = moe_block("context", ctx)
    rows = [
        OpRow("context", "embedding", KP.OP_MEM_TOKENS, None, 2.0 * h, 1.0),
        OpRow("context", "add_norm_1", KP.OP_MEM_TOKENS, None, 8.0 * h, ctx),
        part.context_op,
        OpRow("context", "add_norm_2", KP.OP_MEM_TOKENS, None, 8.0 * h, ctx),
        *shared,
        *routed,
        *tail("context", ctx, 1.0),
    ]
    gen = float(L + deployment.nextn)
    once = gen / L
    rows += [
        OpRow("generation", "embedding", KP.OP_MEM_TOKENS, None, 2.0 * h, once),
        OpRow("generation", "add_norm_1", KP.OP_MEM_TOKENS, None, 8.0 * h, gen),
        part.generation_op
        or OpRow("generation", part.generation_name, KP.OP_DSA_GENERATION, None, 0.0, gen),
        OpRow("generation", "add_norm_2", KP.OP_MEM_TOKENS, None, 8.0 * h, gen),
        OpRow("generation", "moe_overlap", KP.OP_OVERLAP, None, 0.0, gen),
        *tail("generation", gen, once),
    ]
    num_ops = len(rows)
    # inside the overlap op: per layer, scaled by the overlap
    routed, shared = moe_block("hidden", 1.0)
    rows += [*routed, *shared, *part.hidden]
    scalars = {
        **allreduce_scalars(system, t),
        "heads": model.num_attention_heads // t,
        "dispatch_gpus": num_gpus,
        "dispatch_allreduce": comm.with_allreduce,
        "overlap_a_lo": num_ops,
        "overlap_b_lo": num_ops + len(routed),
        "overlap_b_hi": num_ops + len(routed) + len(shared),
    }
    gemm_ops, gemm = gemms
    return assemble(
        model.model_id,
        deployment,
        system,
        rows,
        gemm_ops,
        gemm,
        scalars,
        context_attention=part.context_attention,
        dsa_context=part.dsa_context,
        dsa_generation=part.dsa_generation,
        dsa_context_skip=part.dsa_context_skip,
        dsa_generation_skip=part.dsa_generation_skip,
        allreduce=comm.allreduce,
        all_gather=comm.all_gather,
        reduce_scatter=comm.reduce_scatter,
        moe=moe,
    )

"""The resolved op plan: `OpPlan` (what the kernels read) plus the names a breakdown reports.

A family module (aisim.timing.families lists them) composes a plan from leaf builders and
hands the pieces to `assemble`: its op rows (`OpRow`, in the engine's order: context ops, then
generation ops, then hidden sub-ops of composite ops), its GEMM sites, the leaves it reads and
the scalars it sets; every leaf it does not read gets a 1-element stand-in, every scalar it does
not set 0, so all plans share one numba type.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from aisim.errors import NotAvailableError
from aisim.kernels import optime_pass as KP
from aisim.kernels.optime_pass import OpList, OpPlan, PassScalars
from aisim.timing.leaf_attention import absent_grid
from aisim.timing.leaf_comm import absent_curve
from aisim.timing.leaf_empirical import absent_grids
from aisim.timing.leaf_gemm import GemmOp, gemm_sites
from aisim.timing.leaf_moe import absent_moe
from aisim.timing.system import GpuSystem

MODES = {"SILICON": KP.MODE_SILICON, "SOL": KP.MODE_SOL, "EMPIRICAL": KP.MODE_EMPIRICAL}
_SCALAR_TYPES = typing.get_type_hints(PassScalars)


@dataclass(frozen=True)
class Deployment:
    """What a plan is resolved for besides the model and the tables."""

    backend: str
    version: str
    tensor: int = 1
    pipeline: int = 1
    attention_dp: int = 1
    moe_tensor: int = 1
    moe_expert: int = 1
    mode: str = "SILICON"
    nextn: int = 0
    quant_modes: tuple[str, str, str, str] = ("", "", "", "")  # gemm / moe / kvcache / fmha
    transfers: tuple[str, ...] = ()  # EMPIRICAL: the transfer kinds it may borrow util with

    def where(self, model_id: str) -> str:
        return (
            f"{model_id} on {self.backend} {self.version} with tensor {self.tensor} x "
            f"attention_data {self.attention_dp}, moe_tensor {self.moe_tensor} x "
            f"moe_expert {self.moe_expert}"
        )

    def moe_group_gpus(self, where: str) -> int:
        """The MoE group size; attention tensor x attention-DP must fill it exactly."""
        if self.tensor * self.attention_dp != self.moe_tensor * self.moe_expert:
            raise NotAvailableError(
                f"op-level timing for {where}: tensor x attention_data "
                f"({self.tensor * self.attention_dp}) must equal moe_tensor x moe_expert "
                f"({self.moe_tensor * self.moe_expert})"
            )
        return self.moe_tensor * self.moe_expert

    def check_moe_mode(self, empirical: bool = False) -> None:
        """Refuse the modes a MoE family is not priced in (`empirical`: it has EMPIRICAL)."""
        if self.mode == "SILICON" or (empirical and self.mode == "EMPIRICAL"):
            return
        raise NotAvailableError(
            f"database_mode {self.mode}: MoE models are priced in SILICON mode, and in "
            "EMPIRICAL for GQA-attention families without sliding windows (Qwen3 MoE, "
            "Mixtral, MiniMax-M2); use database_mode: SILICON"
        )

    def check_mode(self) -> None:
        if self.mode not in MODES:
            raise NotAvailableError(
                f"database_mode {self.mode}: only SILICON, SOL and EMPIRICAL are available "
                "(HYBRID prices as SILICON where the tables cover every op)"
            )
        if self.pipeline < 1:
            raise NotAvailableError(f"pipeline parallelism {self.pipeline} is not valid")


@dataclass(frozen=True)
class PassPlan:
    """A resolved plan plus the names the breakdown reports."""

    arrays: OpPlan
    op_names: tuple[str, ...]  # "context_<op>" then "generation_<op>"
    num_ctx_ops: int
    model_id: str
    backend: str
    version: str
    mode: str
    tensor_parallel: int
    gemm_descr: tuple[str, ...]  # per GEMM op: how its shape is resolved (for inspection)


class OpRow(NamedTuple):
    """One op of the plan. `gemm` names a GEMM op of the plan (or is None); OP_SUM rows get
    their first hidden sub-op as index from `assemble` (param = their sub-op count)."""

    phase: str  # "context", "generation" or "hidden" (evaluated inside a composite op)
    name: str
    kind: int  # optime_pass.OP_*
    gemm: str | None
    param: float  # bytes or elements per token
    scale: float  # layers (or 1) multiplier


def pass_scalars(**values) -> np.ndarray:
    """The PASS_SCALARS record of PassScalars fields (unset fields 0; an unknown name raises)."""
    view = PassScalars(
        **{name: kind(values.pop(name, 0)) for name, kind in _SCALAR_TYPES.items()}, **values
    )
    record = np.zeros(1, KP.PASS_SCALARS)  # zeroed padding: equal plans, equal bytes
    for name, value in view._asdict().items():
        record[name] = value
    return record


def scalars_of(arrays: OpPlan) -> PassScalars:
    """A plan's scalars as Python numbers, by name."""
    return PassScalars(*arrays.scalars[0].tolist())


def system_scalars(system: GpuSystem) -> dict:
    """The PassScalars fields that come from the GPU system."""
    return {
        "mem_bw": system.mem_bw,
        "mem_eff": system.mem_eff,
        "mem_const_s": system.mem_const_s,
        "inter_bw": system.inter_node_bw,
        "p2p_latency_s": system.p2p_latency_s,
    }


def allreduce_scalars(system: GpuSystem, tensor: int) -> dict:
    """The PassScalars of the attention-TP allreduce: its group, bf16 elements, and the link
    its SOL runs on (a group beyond one node is priced on the inter-node link)."""
    return {
        "allreduce_gpus": tensor,
        "allreduce_elem_bytes": 2.0,
        "link_bw": system.group_bw(tensor),
    }


def assemble(
    model_id: str,
    deployment: Deployment,
    system: GpuSystem,
    rows: list[OpRow],
    gemm_ops: list[GemmOp],
    gemm: tuple,
    scalars: dict,
    **leaves,
) -> PassPlan:
    """The plan of `rows` (context, generation, then hidden; OP_SUM blocks point at the first
    of the hidden rows named after them, see `sum_block`). `gemm`: gemm_sites(...)'s result;
    `leaves`: OpPlan leaf fields the family reads; `scalars`: its PassScalars fields."""
    num_ctx = sum(r.phase == "context" for r in rows)
    num_ops = sum(r.phase != "hidden" for r in rows)
    gemm_index = {op.name: gi for gi, op in enumerate(gemm_ops)}
    index = []
    for i, r in enumerate(rows):
        if r.kind == KP.OP_SUM:
            index.append(_first_sub_op(rows, i))
        else:
            index.append(-1 if r.gemm is None else gemm_index[r.gemm])
    ops = OpList(
        kind=np.asarray([r.kind for r in rows], np.int64),
        index=np.asarray(index, np.int64),
        param=np.asarray([r.param for r in rows], np.float64),
        scale=np.asarray([r.scale for r in rows], np.float64),
    )
    record, descr = gemm
    arrays = OpPlan(
        scalars=pass_scalars(
            mode=MODES[deployment.mode],
            num_ctx_ops=num_ctx,
            num_ops=num_ops,
            nextn=deployment.nextn,
            **system_scalars(system),
            **scalars,
        ),
        ops=ops,
        gemm=record,
        **{**_stand_ins(), **leaves},
    )
    return PassPlan(
        arrays=arrays,
        op_names=tuple(f"{r.phase}_{r.name}" for r in rows[:num_ops]),
        num_ctx_ops=num_ctx,
        model_id=model_id,
        backend=deployment.backend,
        version=deployment.version,
        mode=deployment.mode,
        tensor_parallel=deployment.tensor,
        gemm_descr=descr,
    )


SUM_MARK = "/"  # hidden rows of an OP_SUM block are named "<block>/<sub-op>"


def sum_block(phase: str, name: str, sub_ops: list[OpRow], scale: float) -> tuple[OpRow, list]:
    """An OP_SUM op `name` made of `sub_ops` (per layer, summed) and its hidden rows."""
    hidden = [
        r._replace(phase="hidden", name=f"{name}{SUM_MARK}{r.name}", scale=1.0) for r in sub_ops
    ]
    return OpRow(phase, name, KP.OP_SUM, None, float(len(sub_ops)), scale), hidden


def attention_rows(phase: str, layers: float, num_layers: int, banded: int):
    """The attention op of `phase` (its row and hidden rows) over `layers` layers (the decoder's
    num_layers, + nextn in decode): a table op, or, with `banded` sliding-window layers, one
    reported op summing the full layers' and the banded layers' lookups, each times its layer
    count, scaled by layers / num_layers."""
    context = phase == "context"
    full = KP.OP_ATTN_CONTEXT if context else KP.OP_ATTN_GENERATION
    if not banded:
        return OpRow(phase, "attention", full, None, 0.0, layers), []
    band = KP.OP_ATTN_CONTEXT_BANDED if context else KP.OP_ATTN_GENERATION_BANDED
    block = f"{phase}_attention{SUM_MARK}"  # one block per phase: the phase names it
    hidden = [
        OpRow("hidden", f"{block}full", full, None, 0.0, float(num_layers - banded)),
        OpRow("hidden", f"{block}banded", band, None, 0.0, float(banded)),
    ]
    return OpRow(phase, "attention", KP.OP_SUM, None, 2.0, layers / num_layers), hidden


def _first_sub_op(rows: list[OpRow], i: int) -> int:
    """The first hidden row of OP_SUM row i's block: named `<phase>_<name>/...` when both
    phases have such a block, else `<name>/...`."""
    prefixes = (f"{rows[i].phase}_{rows[i].name}{SUM_MARK}", f"{rows[i].name}{SUM_MARK}")
    for prefix in prefixes:
        for j, r in enumerate(rows):
            if r.phase == "hidden" and r.name.startswith(prefix):
                return j
    raise ValueError(f"no hidden rows for the {rows[i].phase} op {rows[i].name}")


def placeholder_plan() -> OpPlan:
    """An OpPlan-typed value for runs without op-level timing (one kernel specialization)."""
    ops = OpList(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1), np.zeros(1))
    record, _ = gemm_sites([], None, _NO_SYSTEM)
    return OpPlan(scalars=pass_scalars(), ops=ops, gemm=record, **_stand_ins())


def unpriced_plan(model_id: str, deployment: Deployment) -> PassPlan:
    """The plan of a run that prices no pass: no ops (every price would be 0)."""
    return PassPlan(
        arrays=placeholder_plan(),
        op_names=(),
        num_ctx_ops=0,
        model_id=model_id,
        backend=deployment.backend,
        version=deployment.version,
        mode=deployment.mode,
        tensor_parallel=deployment.tensor,
        gemm_descr=(),
    )


def _stand_ins() -> dict:
    """Every OpPlan leaf as a stand-in, plus the attention hold's scratch space."""
    return {
        "context_attention": absent_grid(),
        "generation_attention": absent_grid(),
        "banded_context_attention": absent_grid(),
        "banded_generation_attention": absent_grid(),
        "dsa_context": absent_grid(),
        "dsa_generation": absent_grid(),
        "dsa_context_skip": absent_grid(),
        "dsa_generation_skip": absent_grid(),
        "allreduce": absent_curve(),
        "all_gather": absent_curve(),
        "reduce_scatter": absent_curve(),
        "moe": absent_moe(),
        "empirical": absent_grids(),
        "scratch_d": np.zeros(8, np.float64),
        "scratch_i": np.zeros(8, np.int64),
    }


_NO_SYSTEM = GpuSystem(
    mem_bw=1.0,
    mem_eff=1.0,
    mem_const_s=0.0,
    intra_node_bw=1.0,
    inter_node_bw=1.0,
    p2p_latency_s=0.0,
    gpus_per_node=None,
    flops={},
)

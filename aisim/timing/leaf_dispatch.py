"""Leaf builder: the MoE dispatch / combine curves of one rank (docs/timing.md 3.7).

vLLM's dispatch (combine) is a custom allreduce of tokens x hidden over the whole MoE group
when attention is tensor-parallel, and the NCCL all_gather (reduce_scatter) of tokens x hidden x
attention-DP when attention is data-parallel (TRT-LLM: the NCCL collective alone).
`dispatch_curves` returns the plan's allreduce, all_gather and reduce_scatter curves for the
deployment; groups beyond the measured sizes read the largest measured curves, scaled
(aisim.timing.multinode).

Attention tensor- AND data-parallel (tensor t x attention_data D, both > 1; the MoE group spans
G = t x D GPUs = moe_tensor x moe_expert). What AISimulate 0.13 prices there (found with its
per-op evaluation, `static_phase_diagnostics`, on DeepSeek-V3 and Qwen3 MoE; see NOTES.md,
"attention tensor x attention-DP groups"):
  * the attention-TP allreduces (vLLM: DeepSeek's `tp_allreduce`, Qwen3's `embedding_ar`) run
    over the t GPUs of one attention-TP group: the custom-allreduce curve at num_gpus = t;
  * vLLM dispatch (combine): a custom allreduce of tokens x hidden over all G GPUs PLUS the NCCL
    all_gather (reduce_scatter) of tokens x hidden x D over the G GPUs, as at attention-DP alone;
  * TRT-LLM dispatch (combine) on an SM 100 GPU: the NCCL all_gather (reduce_scatter) alone, as
    at attention-DP alone (fp8 gathers at half the message); no allreduce. On any other GPU: the
    custom allreduce of tokens x hidden over all G GPUs alone, pre and post (AISimulate checks
    attention-TP first there; found on h100 / h200 / b300 / a100 Qwen3-235B TP2 x DP4).

The plan has one allreduce curve (read by OP_ALLREDUCE over PassScalars.allreduce_gpus), which
then must be the t-GPU curve, while vLLM's dispatch needs the G-GPU one too. Both dispatch terms
are piecewise linear in the same variable e = tokens x hidden x D (the allreduce at e / D) and
both extrapolate proportionally to e beyond their curves (the utilisation hold: SOL(e) / util,
SOL linear in e), so their sum is again such a curve: it is merged into one curve over the
union of the two breakpoint sets and stored as the NCCL curve, and the kernel's separate
dispatch allreduce (PassScalars.dispatch_allreduce) stays off. Interpolating the merged curve
equals the sum of the two lookups up to float rounding (~1e-16 relative).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from aisim.kernels.optime_comm import Curve
from aisim.timing.leaf_comm import absent_curve, allreduce_curve, nccl_curve
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables


class DispatchCurves(NamedTuple):
    allreduce: Curve
    all_gather: Curve
    reduce_scatter: Curve
    with_allreduce: bool  # the kernel adds the allreduce to each dispatch / combine


def dispatch_curves(
    tables: Tables, backend: str, t: int, adp: int, num_gpus: int, where: str, system: GpuSystem
) -> DispatchCurves:
    """The curves of tensor t x attention_data adp over a `num_gpus` MoE group."""
    if t > 1 and adp > 1:
        return _tp_dp_curves(tables, backend, t, adp, num_gpus, where, system)
    ar = allreduce_curve(tables, num_gpus, system) if t > 1 else absent_curve()
    ag = rs = absent_curve()
    if adp > 1:
        ag = nccl_curve(tables, "all_gather", num_gpus, where, system)
        rs = nccl_curve(tables, "reduce_scatter", num_gpus, where, system)
    return DispatchCurves(ar, ag, rs, with_allreduce=t > 1)


def trtllm_gathers(system: GpuSystem) -> bool:
    """TRT-LLM's MoE dispatch on an SM 100 GPU (b200_sxm, gb200): the NCCL all_gather /
    reduce_scatter whenever attention is data-parallel, fp8 inputs gathered at half the
    message. Every other GPU (SM 90, 103, 120, ...) takes the custom allreduce over the group
    when attention is also tensor-parallel, and gathers at the full bf16 message."""
    return system.sm_version == 100


GATHERED_QUANTIZED = ("fp8", "fp8_block", "nvfp4")
"""Expert dtypes whose MoE inputs TRT-LLM gathers quantized, at their DTYPE_BYTES per element
(NVFP4: 4-bit values and one one-byte scale per 16 elements)."""


def gather_scale(backend: str, dtype: str, attention_dp: int, system: GpuSystem) -> float:
    """The pre-dispatch all_gather's message per bf16 element: TRT-LLM on an SM 100 GPU gathers
    fp8 / NVFP4 MoE inputs quantized, at DTYPE_BYTES per element of the two-byte bf16 message
    (the all_gather of attention-DP only; the attention-TP allreduce moves bf16)."""
    if (
        backend == "trtllm"
        and dtype in GATHERED_QUANTIZED
        and attention_dp > 1
        and trtllm_gathers(system)
    ):
        return DTYPE_BYTES[dtype] / 2.0
    return 1.0


def _tp_dp_curves(
    tables: Tables, backend: str, t: int, adp: int, num_gpus: int, where: str, system: GpuSystem
) -> DispatchCurves:
    ar = allreduce_curve(tables, t, system)
    if backend == "trtllm" and not trtllm_gathers(system):
        # the custom allreduce of tokens x hidden over the whole group, pre and post, stored
        # as the NCCL curves over their variable e = tokens x hidden x adp (the allreduce at
        # e / adp; the proportional hold beyond the curve reads the same)
        moe_ar = allreduce_curve(tables, num_gpus, system)
        over_e = Curve(moe_ar.x * adp, moe_ar.y, moe_ar.en)
        return DispatchCurves(ar, over_e, over_e, with_allreduce=False)
    ag = nccl_curve(tables, "all_gather", num_gpus, where, system)
    rs = nccl_curve(tables, "reduce_scatter", num_gpus, where, system)
    if backend == "vllm":
        moe_ar = allreduce_curve(tables, num_gpus, system)
        ag = _without_energy(*summed_curve(ag.x, ag.y, moe_ar.x * adp, moe_ar.y))
        rs = _without_energy(*summed_curve(rs.x, rs.y, moe_ar.x * adp, moe_ar.y))
    return DispatchCurves(ar, ag, rs, with_allreduce=False)


def _without_energy(x: np.ndarray, y: np.ndarray) -> Curve:
    return Curve(x, y, np.zeros(x.shape[0]))


def summed_curve(
    ax: np.ndarray, ay: np.ndarray, bx: np.ndarray, by: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One curve equal to curve a + curve b, each read as `optime_interp.curve_le` reads a
    curve: raw linear inside, proportional hold (y_edge x e / x_edge) outside."""
    xs = np.union1d(ax, bx)
    return xs, np.array([_read(ax, ay, x) + _read(bx, by, x) for x in xs.tolist()], np.float64)


def _read(x: np.ndarray, y: np.ndarray, e: float) -> float:
    """`optime_interp.curve_le`'s latency in plain Python (same float operations)."""
    n = x.shape[0]
    lo = int(np.searchsorted(x, e, side="left"))
    if lo < n and x[lo] == e:
        return float(y[lo])
    if 0 < lo < n:
        w = (e - x[lo - 1]) / (x[lo] - x[lo - 1])
        return float(y[lo - 1] + (y[lo] - y[lo - 1]) * w)
    j = 0 if lo == 0 else n - 1
    # SOL(e) / (SOL(x_edge) / y_edge): the SOL is linear in e, only the ratio is left
    return float(e / (x[j] / y[j]))

"""MoE dispatch / combine when attention is tensor- AND data-parallel (tensor t x attention_data
D, both > 1; the MoE group spans G = t x D GPUs = moe_tensor x moe_expert).

What AISimulate 0.13 prices there (found with its per-op evaluation, `static_phase_diagnostics`,
on DeepSeek-V3 and Qwen3 MoE; see NOTES.md "Issue 6, session 5"):
  * the attention-TP allreduces (vLLM: DeepSeek's `tp_allreduce`, Qwen3's `embedding_ar`) run
    over the t GPUs of one attention-TP group: the custom-allreduce curve at num_gpus = t;
  * vLLM dispatch (combine): a custom allreduce of tokens x hidden over all G GPUs PLUS the NCCL
    all_gather (reduce_scatter) of tokens x hidden x D over the G GPUs, as at attention-DP alone;
  * TRT-LLM dispatch (combine): the NCCL all_gather (reduce_scatter) alone, as at attention-DP
    alone (fp8 gathers at half the message); no allreduce.

The plan has one allreduce curve (`ar_x`, read by OP_ALLREDUCE at num_gpus = C_TP), which now
must be the t-GPU curve, while vLLM's dispatch needs the G-GPU one too. Both dispatch terms are
piecewise linear in the same variable e = tokens x hidden x D (the allreduce at e / D) and both
extrapolate proportionally to e beyond their curves (the utilisation hold: SOL(e) / util, SOL
linear in e), so their sum is again such a curve: it is merged into one curve over the union of
the two breakpoint sets and stored as the NCCL curve, and the kernel's separate dispatch
allreduce (C_DISPATCH_AR) stays off. Interpolating the merged curve equals the sum of the two
lookups up to float rounding (~1e-16 relative), no kernel change.
"""

from __future__ import annotations

import numpy as np

from aisim.timing.tables import Tables


def tp_dp_dispatch_curves(
    tables: Tables, backend: str, t: int, adp: int, num_gpus: int, where: str,
    node: dict | None = None,
) -> dict[str, np.ndarray]:
    """The plan's allreduce and NCCL curves under tensor t x attention_data adp (both > 1)."""
    from aisim.timing.plan import _allreduce_curve
    from aisim.timing.plan_moe import _nccl_curve

    out = {}
    out["ar_x"], out["ar_y"], out["ar_en"] = _allreduce_curve(tables, t, node)
    ag_x, ag_y = _nccl_curve(tables, "all_gather", num_gpus, where, node)
    rs_x, rs_y = _nccl_curve(tables, "reduce_scatter", num_gpus, where, node)
    if backend == "vllm":
        mx, my, _en = _allreduce_curve(tables, num_gpus, node)
        ag_x, ag_y = summed_curve(ag_x, ag_y, mx * adp, my)
        rs_x, rs_y = summed_curve(rs_x, rs_y, mx * adp, my)
    out.update(ag_x=ag_x, ag_y=ag_y, rs_x=rs_x, rs_y=rs_y)
    return out


def summed_curve(
    ax: np.ndarray, ay: np.ndarray, bx: np.ndarray, by: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One curve equal to curve a + curve b, each read as `optime_comm.allreduce_latency_ms`
    reads a curve: raw linear inside, proportional hold (y_edge x e / x_edge) outside."""
    xs = np.union1d(ax, bx)
    return xs, np.array([_read(ax, ay, x) + _read(bx, by, x) for x in xs.tolist()], np.float64)


def _read(x: np.ndarray, y: np.ndarray, e: float) -> float:
    """`optime_comm.allreduce_latency_ms`'s lookup in plain Python (same float operations)."""
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

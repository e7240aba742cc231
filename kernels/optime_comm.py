"""Communication lookups: 1-D curves over message elements (docs/timing.md 4.5), latency and energy.

A curve (`Curve`) is sorted x (message elements) with latency y (ms) and leaf energy en (W*ms,
0 where the table has no power), read by optime_interp.curve_le. The custom allreduce carries
its table's energy; NCCL tables have no power (AISimulate reports the MoE dispatch / combine
without energy evidence), so `moe_dispatch_ms` returns latency only; in the EMPIRICAL mode
`moe_dispatch_empirical_ms` prices each collective as SOL / util.

Mirrors: AISimulate 0.13 perf_interp v2 1-D curve (custom allreduce, NCCL).
"""

from typing import NamedTuple

import numpy as np

from aisim.kernels._jit import helper, kernel
from aisim.kernels.optime_empirical import SLOT_ALLREDUCE, util_at
from aisim.kernels.optime_interp import curve_le


class Curve(NamedTuple):
    """A 1-D table curve (aisim.timing.leaf_comm)."""

    x: np.ndarray  # float64[n] message elements, ascending
    y: np.ndarray  # float64[n] ms
    en: np.ndarray  # float64[n] W*ms (0 = no power)


@helper
def allreduce_sol_ms(elements, num_gpus, elem_bytes, link_bw):
    """Ring allreduce roofline, ms: 2 (elements x bytes) (t - 1) / t / the group's link
    bandwidth (GpuSystem.group_bw)."""
    if num_gpus <= 1:
        return 0.0
    return 2.0 * (elements * elem_bytes) * (num_gpus - 1.0) / num_gpus / link_bw * 1000.0


@kernel
def allreduce_le(elements, curve, num_gpus, elem_bytes, link_bw):
    """(latency ms, energy W*ms) of a custom allreduce of `elements` on `curve`; 0 at one GPU."""
    if num_gpus <= 1:
        return 0.0, 0.0
    x = curve.x
    return curve_le(
        elements,
        x,
        curve.y,
        curve.en,
        allreduce_sol_ms(elements, num_gpus, elem_bytes, link_bw),
        allreduce_sol_ms(x[0], num_gpus, elem_bytes, link_bw),
        allreduce_sol_ms(x[x.shape[0] - 1], num_gpus, elem_bytes, link_bw),
    )


@kernel
def moe_dispatch_ms(elements, attention_dp, allreduce, nccl, num_gpus, link_bw, with_allreduce):
    """Latency of a vLLM MoE dispatch / combine of `elements` (tokens x hidden x attention-DP).

    A custom allreduce of elements / attention-DP over the MoE group when attention is
    tensor-parallel (`with_allreduce`), plus the NCCL all_gather / reduce_scatter (`nccl`) of
    `elements` under attention-DP. An NCCL curve's SOL (bytes (n - 1) / n / bw) is the
    allreduce SOL / 2 and only SOL ratios enter its hold, so the allreduce lookup serves both.
    """
    ms = 0.0
    if with_allreduce:
        ms += allreduce_le(elements / attention_dp, allreduce, num_gpus, 2.0, link_bw)[0]
    if attention_dp > 1.0:
        ms += allreduce_le(elements, nccl, num_gpus, 2.0, link_bw)[0]
    return ms


@helper
def nccl_sol_ms(elements, num_gpus, elem_bytes, link_bw):
    """All-gather / reduce-scatter roofline, ms: bytes (n - 1) / n / the group's link."""
    if num_gpus <= 1:
        return 0.0
    return elem_bytes * elements * (num_gpus - 1.0) / num_gpus / link_bw * 1000.0


@helper
def moe_dispatch_empirical_ms(
    elements, attention_dp, grids, nccl_slot, num_gpus, link_bw, dispatch_bw, with_allreduce
):
    """`moe_dispatch_ms` in the EMPIRICAL mode: each collective at SOL / util, the allreduce
    from the attention-TP group's lookup (the MoE group when attention is not data-parallel),
    the NCCL collective from lookup `nccl_slot` at the MoE group's link `dispatch_bw`."""
    ms = 0.0
    if with_allreduce:
        e = elements / attention_dp
        util = util_at(grids, grids.slot[SLOT_ALLREDUCE], e, 1.0, 1.0)
        ms += allreduce_sol_ms(e, num_gpus, 2.0, link_bw) / util
    if attention_dp > 1.0 and num_gpus > 1.0:
        util = util_at(grids, grids.slot[nccl_slot], elements, 1.0, 1.0)
        ms += nccl_sol_ms(elements, num_gpus, 2.0, dispatch_bw) / util
    return ms

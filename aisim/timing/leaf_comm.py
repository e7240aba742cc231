"""Leaf builders: communication curves (docs/timing.md 4.5, 4.6) as `optime_comm.Curve`.

The custom allreduce at a group size (the lane the compiled table kept for it), with its
energy; an NCCL collective at a group size (no power in the table: energy 0). A group larger
than every measured one reads the largest measured curve, scaled (aisim.timing.multinode).
"""

from __future__ import annotations

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels.optime_comm import Curve
from aisim.timing.multinode import group_scale, measured_groups, scaled
from aisim.timing.system import GpuSystem
from aisim.timing.tables import Tables, first_row_points, ordered_rows, row_power


def absent_curve() -> Curve:
    """The stand-in for a curve the plan does not read."""
    return Curve(np.ones(1), np.ones(1), np.zeros(1))


def allreduce_curve(tables: Tables, tp: int, system: GpuSystem | None = None) -> Curve:
    """The custom-allreduce curve at `tp` GPUs; with `system`, a group larger than every
    measured one is the largest measured curve scaled."""
    if "custom_allreduce" not in tables:
        raise OpTableError("ar_1", "table", "the op-time table has no custom_allreduce family")
    c = ordered_rows(tables["custom_allreduce"])
    # which lane each group size reads (CUDA-graph rows; eager ones only where AISimulate keeps
    # them, b60) is settled when the table is compiled: one row per key (docs/timing.md 2.3)
    mask = c["allreduce_dtype"] == "bfloat16"
    if system is not None:
        groups = measured_groups(c["num_gpus"], mask)
        if groups and tp > groups[-1]:
            factor = group_scale(tp, groups[-1], system)
            if factor != 1.0:
                return Curve(*scaled(allreduce_curve(tables, groups[-1]), factor))
            tp = groups[-1]
    mask &= c["num_gpus"] == tp
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError(
            "ar_1", f"allreduce_dtype=bfloat16 num_gpus={tp}", "custom allreduce perf data missing"
        )
    y = c["latency"][idx].tolist()
    energy = [pw * lat for pw, lat in zip(row_power(c, idx), y, strict=True)]
    return Curve(*first_row_points(c["message_size"][idx].tolist(), y, energy))


def nccl_curve(
    tables: Tables, collective: str, num_gpus: int, where: str, system: GpuSystem | None = None
) -> Curve:
    """The NCCL `collective` curve at `num_gpus`; with `system`, a group larger than every
    measured one is the largest measured curve scaled."""
    slice_text = f"nccl op_name={collective} nccl_dtype=half num_gpus={num_gpus}"
    if "nccl" not in tables:
        raise OpTableError(
            "moe_pre_dispatch", slice_text, f"the op-time table has no nccl family ({where})"
        )
    c = ordered_rows(tables["nccl"])
    mask = (c["op_name"] == collective) & (c["nccl_dtype"] == "half")
    if system is not None:
        groups = measured_groups(c["num_gpus"], mask)
        if groups and num_gpus > groups[-1]:
            return Curve(
                *scaled(
                    nccl_curve(tables, collective, groups[-1], where),
                    group_scale(num_gpus, groups[-1], system),
                )
            )
    mask &= c["num_gpus"] == num_gpus
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError("moe_pre_dispatch", slice_text, f"NCCL perf data missing for {where}")
    y = c["latency"][idx].tolist()
    return Curve(*first_row_points(c["message_size"][idx].tolist(), y, [0.0] * len(y)))

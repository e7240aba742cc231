"""Communication curves for groups larger than the measured ones (MoE groups beyond one node).

The silicon data measures the custom allreduce and the NCCL collectives on 2, 4 and 8 GPUs (one
B200 node). AISimulate 0.13 prices a larger group (found with its per-op evaluation,
`static_phase_diagnostics`, on DeepSeek-V3 / Qwen3 MoE TP8 x DP2, DP16 and friends; NOTES.md,
"groups beyond one node") by reading the largest measured curve at the query's message size and
scaling the result:

    latency(n) = latency(n_max) x (n - 1) / (n_max - 1) x n_max / n x bw_factor

the ring's (n - 1) / n traffic growth, and bw_factor = intra_node_bw / inter_node_bw (18 with
the B200 node constants) once the group spans nodes (n > num_gpus_per_node while n_max fits in
one node); 1 otherwise. The same rule serves the custom allreduce (n_max = 8) and every NCCL
collective (n_max = the largest num_gpus of that op's rows).

The factor depends on n only, so the scaled curve is the measured one with every latency (and
energy) multiplied by it: inside the curve that is exact; beyond it the kernels' utilisation
hold (SOL(e) / SOL(x_edge) x y_edge, SOL linear in e) scales the same way.
"""

from __future__ import annotations

import numpy as np

from aisim.errors import NotAvailableError
from aisim.timing.system import GpuSystem


def group_scale(num_gpus: int, measured_max: int, system: GpuSystem) -> float:
    """Latency multiplier from the largest measured group to `num_gpus` GPUs (1 when measured);
    the same rule for the custom allreduce and the collective library (NCCL, b60's oneCCL)."""
    if num_gpus <= measured_max:
        return 1.0
    per_node = system.gpus_per_node
    if per_node is None:
        raise NotAvailableError(
            f"a {num_gpus}-GPU communication group is larger than every measured one "
            f"({measured_max}) and the system block does not give num_gpus_per_node"
        )
    bw = 1.0
    if measured_max <= per_node < num_gpus:
        bw = system.intra_node_bw / system.inter_node_bw
    return (num_gpus - 1.0) / (measured_max - 1.0) * measured_max / num_gpus * bw


def measured_groups(column: np.ndarray, mask: np.ndarray) -> list[int]:
    """The group sizes with rows among `mask`, ascending."""
    return sorted({int(v) for v in column[mask].tolist()})


def scaled(curve: tuple[np.ndarray, ...], factor: float) -> tuple[np.ndarray, ...]:
    """x unchanged, every other array (latency, energy) times `factor`."""
    if factor == 1.0:
        return curve
    return (curve[0], *(np.asarray(a, np.float64) * factor for a in curve[1:]))

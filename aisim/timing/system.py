"""The GPU system constants the plan builders read, from the op-time table's system block.

`GpuSystem.from_dict` takes the system dict shipped with the compiled table (`optable.system`:
the `gpu` and `node` blocks of the silicon system yaml, docs/timing.md 0), so no builder repeats
key names or float conversions, and the hardware is whatever the table was compiled for.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisim.errors import UnratedDtypeError

# bytes per element, per table dtype name
DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "fp8": 1.0,
    "fp8_block": 1.0,
    "fp8_static": 1.0,
    "int8": 1.0,
    "nvfp4": 0.5625,
    "int4_wo": 0.5,  # 4-bit integer weights (w4a16 routed experts)
    "w4a16_mxfp4": 0.5,  # MXFP4 weights with bf16 activations (gpt-oss experts)
}
# the system's tensor-core FLOP/s key, per table dtype name
DTYPE_FLOPS_KEY = {
    "bfloat16": "bfloat16_tc_flops",
    "float16": "bfloat16_tc_flops",
    "fp8": "fp8_tc_flops",
    "fp8_block": "fp8_tc_flops",
    "fp8_static": "fp8_tc_flops",
    "int8": "int8_tc_flops",
    "nvfp4": "fp4_tc_flops",
    # weight-only int4 multiplies bf16 activations: the MoE SOL's math is at the bf16 rate
    # (oracle: Kimi-K2.5's int4 experts, 8192 tokens at EP8, SOL math 0.3207 ms per layer)
    "int4_wo": "bfloat16_tc_flops",
    "w4a16_mxfp4": "bfloat16_tc_flops",
}


@dataclass(frozen=True)
class GpuSystem:
    mem_bw: float  # bytes/s
    mem_eff: float  # empirical bandwidth scaling of memory ops
    mem_const_s: float  # empirical constant latency per memory op, s
    intra_node_bw: float  # bytes/s
    inter_node_bw: float  # bytes/s
    p2p_latency_s: float
    gpus_per_node: int | None  # None: the system block does not say (groups beyond are refused)
    flops: dict  # the gpu block's *_flops entries, FLOP/s
    gpus_per_rack: int | None = None  # None: no rack tier (every multi-node group is inter-node)
    inter_rack_bw: float | None = None  # bytes/s between racks; None: the inter-node bandwidth
    hardware: str = ""  # the system's name (for messages)
    sm_version: int | None = None  # the gpu block's compute capability x 10 (None: not given)
    collectives: str = "nccl"  # the collective library its multi-node curves come from

    @classmethod
    def from_dict(cls, system: dict) -> GpuSystem:
        gpu, node = system["gpu"], system["node"]
        per_node = node.get("num_gpus_per_node")
        per_rack, rack_bw = node.get("num_gpus_per_rack"), node.get("inter_rack_bw")
        return cls(
            mem_bw=float(gpu["mem_bw"]),
            mem_eff=float(gpu["mem_bw_empirical_scaling_factor"]),
            mem_const_s=float(gpu["mem_empirical_constant_latency"]),
            intra_node_bw=float(node["intra_node_bw"]),
            inter_node_bw=float(node["inter_node_bw"]),
            p2p_latency_s=float(node["p2p_latency"]),
            gpus_per_node=None if per_node is None else int(per_node),
            gpus_per_rack=None if per_rack is None else int(per_rack),
            inter_rack_bw=None if rack_bw is None else float(rack_bw),
            flops={k: float(v) for k, v in gpu.items() if k.endswith("_flops")},
            hardware=str(system.get("hardware", "")),
            sm_version=None if gpu.get("sm_version") is None else int(gpu["sm_version"]),
            collectives="oneccl" if "oneccl_version" in system.get("misc", {}) else "nccl",
        )

    def group_bw(self, num_gpus: int) -> float:
        """Per-GPU link bandwidth of a `num_gpus` group, bytes/s: NVLink within a node, the
        inter-node link within a rack, the inter-rack link beyond (the inter-node one when the
        system has no rack tier). A group of unknown node size is taken to fit in one node."""
        if self.gpus_per_node is None or num_gpus <= self.gpus_per_node:
            return self.intra_node_bw
        if self.gpus_per_rack is None or num_gpus <= self.gpus_per_rack:
            return self.inter_node_bw
        return self.inter_node_bw if self.inter_rack_bw is None else self.inter_rack_bw

    def tensor_flops(self, dtype: str) -> float:
        """Tensor-core FLOP/s of a table dtype; OpTableError when the GPU has no tensor-core
        rate for it (fp8 on an A100: AISimulate refuses such a run too)."""
        key = DTYPE_FLOPS_KEY[dtype]
        if key not in self.flops:
            rated = sorted(d for d, k in DTYPE_FLOPS_KEY.items() if k in self.flops)
            raise UnratedDtypeError(
                f"{self.hardware or 'this GPU'} has no {dtype} tensor-core compute (it rates "
                f"{', '.join(rated)}), so the {dtype} GEMMs / attention of this deployment "
                "cannot be priced; use bfloat16 weights and KV cache here, or a GPU that rates "
                f"{dtype} ({', '.join(gpus_rating(key))})"
            )
        return self.flops[key]


def gpus_rating(flops_key: str) -> list[str]:
    """The shipped GPUs whose system constants rate a tensor-core FLOP/s key."""
    from aisim.config.registry import KNOWN_HARDWARE
    from aisim.engine.spec import gpu_system

    return [hw for hw in KNOWN_HARDWARE if flops_key in gpu_system(hw)["gpu"]]

"""Compiled op-time tables: measured per-op latencies (and power) from the silicon data, one
zstd Arrow IPC table per op family, sorted on the lookup keys (docs/timing.md 2.3).

    from aisim.optable import load_optable
    ot = load_optable("b200_sxm", "vllm", "0.24.0")
    gemm = ot.columns("gemm")          # dict of numpy arrays (dictionary columns as int codes)

Building (`aisim optable build`) lives in aisim.optable.build; it needs only pyarrow and pyyaml.
"""

from aisim.optable.load import OpTable, load_optable

__all__ = ["OpTable", "load_optable"]

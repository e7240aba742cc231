"""The one adapter between op-time table storage and the op-plan builder.

The planner reads every family as a plain dict of numpy columns with the source parquet's
column names (gemm: gemm_dtype, m, n, k, latency; attention: batch_size, isl, num_heads,
num_key_value_heads, head_dim, window_size, attn_dtype, kv_cache_dtype, kernel_source, step,
beam_width, latency; custom_allreduce: allreduce_dtype, num_gpus, message_size, kernel_source,
latency), with the source-resolution rules of docs/timing.md 2.2 already applied. String columns are
numpy arrays of str (object or unicode). Row order is resolution order (primary source first,
file order within a source); a table that stores `src` / `src_row` columns is put back into
that order by `ordered_rows`.
"""

from __future__ import annotations

import numpy as np

from aisim.timing.system import GpuSystem

Tables = dict[str, dict[str, np.ndarray]]


def ordered_rows(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Columns in resolution order (by src then src_row when the table records them)."""
    if "src" in cols and "src_row" in cols:
        order = np.lexsort((np.asarray(cols["src_row"]), np.asarray(cols["src"])))
        return {k: np.asarray(v)[order] for k, v in cols.items()}
    return {k: np.asarray(v) for k, v in cols.items()}


def row_power(cols: dict[str, np.ndarray], idx: np.ndarray) -> list[float]:
    """The rows' `power` (W); 0 when the table has no power column or the row is unmeasured."""
    if "power" not in cols:
        return [0.0] * len(idx)
    pw = np.asarray(cols["power"], np.float64)[idx]
    return np.where(np.isfinite(pw) & (pw > 0.0), pw, 0.0).tolist()


def first_row_points(x: list, y: list, en: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """1-D points (x, latency, energy) sorted by x, the first row of each x kept (a duplicate
    key's first row wins, docs/timing.md 2.3)."""
    first: dict = {}
    for xi, yi, ei in zip(x, y, en, strict=True):
        first.setdefault(xi, (yi, ei))
    xs = sorted(first)
    return (
        np.asarray(xs, np.float64),
        np.asarray([first[v][0] for v in xs], np.float64),
        np.asarray([first[v][1] for v in xs], np.float64),
    )


FAMILIES = (
    "gemm",
    "context_attention",
    "generation_attention",
    "custom_allreduce",
    "computescale",  # the static fp8 GEMM deltas (docs/timing.md 4.1)
    "scale_matrix",
)
# what the MoE / DeepSeek families read (aisim.timing.families)
MOE_FAMILIES = (
    *FAMILIES,
    "dsa_context_module",
    "dsa_generation_module",
    "mla_context_module",
    "mla_generation_module",
    "moe",
    "nccl",
    "context_mla",
)


def from_optable(optable, families: tuple[str, ...] = FAMILIES) -> Tables:
    """The compiled op-time table (`aisim.optable.load.load_optable(...)`) in the dict form.

    Dictionary columns become arrays of str; per-table constants recorded in the table's
    metadata (e.g. step, beam_width, allreduce_dtype) become full columns; generation attention
    gets isl = kv_len and step = 0 (the planner keys on isl + step).
    """
    out: Tables = {}
    for family in families:
        if family not in optable.families:
            continue  # the planner names the missing family when it needs it
        cols = dict(optable.columns(family))
        cats = optable.categories(family)
        for name in list(cols):
            if name in cats:
                cols[name] = optable.decode(family, name, cols[name]).astype(str)
        n = len(cols["latency"])
        for name, value in (optable.meta(family).get("constants") or {}).items():
            if name not in cols:
                cols[name] = np.full(
                    n, value, dtype=object if isinstance(value, str) else np.asarray(value).dtype
                )
        if family == "generation_attention" and "kv_len" in cols:
            cols["isl"] = np.asarray(cols["kv_len"], np.int64)
            cols["step"] = np.zeros(n, np.int64)
        if family == "context_attention" and "step" not in cols:
            cols["step"] = np.zeros(n, np.int64)
        if family == "custom_allreduce" and "allreduce_dtype" not in cols:
            cols["allreduce_dtype"] = np.full(n, "bfloat16", dtype=object)
        out[family] = cols
    return out


def load_tables(
    hardware: str, backend: str, version: str, families: tuple[str, ...] = FAMILIES
) -> tuple[Tables, GpuSystem]:
    """(tables in dict form, system constants) from the shipped compiled op-time table."""
    from aisim.optable.load import load_optable

    optable = load_optable(hardware, backend, version)
    return from_optable(optable, families), GpuSystem.from_dict(optable.system)

"""Leaf builder: the EMPIRICAL database mode's util samples (docs/timing.md 4.9).

`empirical_leaves` refuses what the mode does not estimate yet and `empirical_grids` turns a
dense or GQA MoE plan's leaves into the `UtilGrids` record that aisim.kernels.optime_empirical
reads. Samples come from the requested version's own rows (no shared layer): every GEMM row of
the op's dtype (one grid over m, n, k for all GEMM ops, latencies SOL-clamped as loaded), the
attention slices the SILICON plan would read (their rows at every head count; generation
latencies SOL-clamped as loaded), the custom-allreduce curve of the group, capped at one node
(the query's SOL still runs on the whole group's link), the routed experts' curves and, under
attention-DP, the NCCL dispatch / combine curves capped at the largest measured group. A
GEMM dtype without rows of its own borrows those of the first same-profile dtype (same bytes
and tensor-core rate: fp8_block reads fp8) where the transfer policy allows `xquant`; any
other slice with no samples is refused as the table miss it is (AISimulate's cross-profile
and cross-shape transfers are not built).

Each GEMM op keeps only the samples that can be one of its two nearest: its n and k are fixed,
so among samples of one m only the two closest in (n, k) can be (ties kept).
"""

from __future__ import annotations

import math

import numpy as np

from aisim.errors import NotAvailableError, OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_comm as KC
from aisim.kernels import optime_empirical as KE
from aisim.kernels import optime_moe as KM
from aisim.kernels.optime_attention import GridSlice
from aisim.kernels.optime_comm import Curve
from aisim.kernels.optime_gemm import GemmSites, gemm_sol_ms
from aisim.kernels.optime_moe import MoeCurve
from aisim.timing.leaf_comm import allreduce_curve, nccl_curve
from aisim.timing.multinode import measured_groups
from aisim.timing.system import DTYPE_BYTES, DTYPE_FLOPS_KEY, GpuSystem
from aisim.timing.tables import Tables, ordered_rows

_AXES = 3
_TIE = 1e-9  # relative slack when pruning GEMM samples (rounding of the kernel's distance sum)


class _Lookup:
    """One lookup's samples: raw coordinates (rows x used axes) and their utils."""

    def __init__(self, coords: np.ndarray, utils: np.ndarray) -> None:
        logc = np.log(np.maximum(coords, KE.LOG_FLOOR))
        self.lo = np.zeros(_AXES)
        self.span = np.ones(_AXES)
        used = coords.shape[1]
        if len(utils):
            lo = logc.min(axis=0)
            span = logc.max(axis=0) - lo
            self.lo[:used] = lo
            self.span[:used] = np.where(span > 0.0, span, 1.0)
        self.coord = np.zeros((len(utils), _AXES))
        self.coord[:, :used] = (logc - self.lo[:used]) / self.span[:used]
        self.util = np.asarray(utils, np.float64)

    def subset(self, keep: np.ndarray) -> _Lookup:
        out = object.__new__(_Lookup)
        out.lo, out.span = self.lo, self.span
        out.coord, out.util = self.coord[keep], self.util[keep]
        return out

    def query(self, values: tuple[float, ...]) -> np.ndarray:
        """Normalised, clamped query coordinates (unused axes 0)."""
        q = np.zeros(_AXES)
        for a, v in enumerate(values):
            q[a] = min(1.0, max(0.0, (math.log(max(v, KE.LOG_FLOOR)) - self.lo[a]) / self.span[a]))
        return q


def _samples(coords: list[tuple], latency: list[float], sol, clamp: bool = False) -> _Lookup:
    """Samples of (coordinates, measured latency) with a positive latency and SOL; `clamp`:
    the table's latencies are raised to their SOL at load (GEMM), so no util exceeds 1."""
    kept, utils = [], []
    for c, lat in zip(coords, latency, strict=True):
        if lat > 0.0:
            s = sol(c)
            if s > 0.0:
                kept.append(c)
                utils.append(s / (s if clamp and lat < s else lat))
    width = len(coords[0]) if coords else 1
    return _Lookup(np.asarray(kept, np.float64).reshape(-1, width), np.asarray(utils))


def _gemm_lookups(
    tables: Tables, system: GpuSystem, gemm: GemmSites, dtypes: list[str], transfers: tuple
) -> list:
    """One lookup per GEMM op over its dtype's (m, n, k) rows, pruned for its (n, k)."""
    cols = ordered_rows(tables["gemm"])
    grids: dict[str, _Lookup] = {}
    out = []
    for g, dtype in enumerate(dtypes):
        if dtype not in grids:
            first = _gemm_rows(cols, _gemm_source(cols, system, dtype, transfers))
            keys = sorted(first)
            flops, bpe = float(gemm.op_flops[g]), float(gemm.op_bpe[g])

            def sol(c, flops=flops, bpe=bpe):
                return _gemm_sol(c, flops, bpe, system.mem_bw)

            grids[dtype] = _samples(keys, [first[c] for c in keys], sol, clamp=True)
        grid = grids[dtype]
        q = grid.query((1.0, float(gemm.op_n[g]), float(gemm.op_k[g])))
        fixed = (grid.coord[:, 1] - q[1]) ** 2 + (grid.coord[:, 2] - q[2]) ** 2
        keep = np.zeros(len(fixed), bool)
        for level in np.unique(grid.coord[:, 0]):
            rows = np.nonzero(grid.coord[:, 0] == level)[0]
            second = np.sort(fixed[rows])[min(1, len(rows) - 1)]
            keep[rows[fixed[rows] <= second * (1.0 + _TIE) + 1e-300]] = True
        out.append(grid.subset(keep))
    return out


def _gemm_source(cols: dict, system: GpuSystem, dtype: str, transfers: tuple) -> str:
    """The dtype whose rows calibrate `dtype`: its own, else (transfer kind xquant) the first
    dtype of the table (in file order) with the same bytes per element and tensor-core rate."""
    seen = list(dict.fromkeys(cols["gemm_dtype"].tolist()))
    if dtype in seen:
        return dtype
    want = _profile(system, dtype)
    if "xquant" in transfers and want is not None:
        for other in seen:
            if _profile(system, other) == want:
                return other
    if "xprofile" in transfers and any(_profile(system, d) is not None for d in seen):
        raise NotAvailableError(
            f"database_mode EMPIRICAL: the version's own tables have no {dtype} GEMM rows and "
            "no same-profile dtype; AISimulate would borrow another profile's utilisation "
            "(xprofile), which is not built yet; use database_mode: SILICON"
        )
    raise OpTableError(
        "gemm",
        f"gemm_dtype={dtype}",
        "no GEMM rows of this dtype in the version's own tables, and no same-profile dtype to "
        "borrow them from"
        + ("" if "xquant" in transfers else " (transfer_policy excludes xquant)")
        + "; EMPIRICAL estimates from the requested version's own rows only",
    )


def _profile(system: GpuSystem, dtype: str) -> tuple | None:
    if dtype not in DTYPE_BYTES or dtype not in DTYPE_FLOPS_KEY:
        return None
    return DTYPE_BYTES[dtype], system.flops.get(DTYPE_FLOPS_KEY[dtype])


def _gemm_rows(cols: dict, dtype: str) -> dict[tuple, float]:
    """(m, n, k) -> latency of the dtype's rows, the first row of a key kept."""
    idx = np.nonzero(cols["gemm_dtype"] == dtype)[0]
    first: dict[tuple, float] = {}
    for m, n, k, lat in zip(
        cols["m"][idx].tolist(),
        cols["n"][idx].tolist(),
        cols["k"][idx].tolist(),
        cols["latency"][idx].tolist(),
        strict=True,
    ):
        first.setdefault((m, n, k), lat)
    return first


def _gemm_sol(c, flops: float, bpe: float, mem_bw: float) -> float:
    m, n, k = (float(v) for v in c)
    return gemm_sol_ms.py_func(m, n, k, flops, bpe, mem_bw)


def _grid_lookup(grid: GridSlice, kind: int, what: str) -> _Lookup:
    """Every leaf of an attention slice, at its own SOL."""
    coords, lat = [], []
    for a0 in range(len(grid.v0)):
        for a1 in range(grid.o0[a0], grid.o0[a0 + 1]):
            for a2 in range(grid.o1[a1], grid.o1[a1 + 1]):
                coords.append((float(grid.v0[a0]), float(grid.v1[a1]), float(grid.v2[a2])))
                lat.append(float(grid.lat[a2]))
    if not coords:
        raise OpTableError(what, "slice", "no attention rows to estimate from (EMPIRICAL)")

    def sol(c):
        return KA.attention_sol_ms.py_func(kind, c[0], c[1], c[2], grid.par)

    return _samples(coords, lat, sol)


def _allreduce_lookup(curve: Curve, gpus: int, link_bw: float) -> _Lookup:
    coords = [(float(x),) for x in curve.x]

    def sol(c):
        return KC.allreduce_sol_ms.py_func(c[0], float(gpus), 2.0, link_bw)

    return _samples(coords, curve.y.tolist(), sol)


def _moe_lookup(x: np.ndarray, y: np.ndarray, par: np.ndarray) -> _Lookup:
    def sol(c):
        return KM.moe_sol_ms.py_func(c[0], par)

    return _samples([(float(v),) for v in x], y.tolist(), sol)


def empirical_grids(
    tables: Tables,
    system: GpuSystem,
    gemm: GemmSites,
    gemm_dtypes: list[str],
    context: GridSlice,
    generation: GridSlice,
    allreduce: Curve | None,
    allreduce_gpus: int,
    transfers: tuple[str, ...],
    moe: MoeCurve | None = None,
    nccl: tuple = (),
) -> KE.UtilGrids:
    """The record for GEMM ops 0..n-1, the two attention slices, the allreduce curve read
    at `allreduce_gpus` (None: no allreduce) and the routed experts' curves (None: a dense
    model) and the NCCL dispatch / combine lookups (`nccl`, () without attention-DP);
    `transfers`: the kinds of borrowing allowed."""
    lookups = _gemm_lookups(tables, system, gemm, gemm_dtypes, transfers)
    slot = np.full(KE.SLOT_SIZE, -1, np.int64)
    slot[KE.SLOT_CONTEXT] = len(lookups)
    lookups.append(_grid_lookup(context, KA.KIND_CONTEXT, "context_attention"))
    slot[KE.SLOT_GENERATION] = len(lookups)
    lookups.append(_grid_lookup(generation, KA.KIND_GENERATION, "generation_attention"))
    if allreduce is not None:
        slot[KE.SLOT_ALLREDUCE] = len(lookups)
        lookups.append(
            _allreduce_lookup(allreduce, allreduce_gpus, system.group_bw(allreduce_gpus))
        )
    if moe is not None:
        slot[KE.SLOT_MOE] = len(lookups)
        lookups.append(_moe_lookup(moe.x, moe.y, moe.par))
        if moe.par[KM.MOE_LL_TOKENS] >= 0.0:
            slot[KE.SLOT_MOE_LL] = len(lookups)
            lookups.append(_moe_lookup(moe.ll_x, moe.ll_y, moe.par))
    for name, lookup in zip((KE.SLOT_ALL_GATHER, KE.SLOT_REDUCE_SCATTER), nccl, strict=False):
        slot[name] = len(lookups)
        lookups.append(lookup)
    return _record(lookups, slot)


def empirical_leaves(
    model,
    tables: Tables,
    system: GpuSystem,
    deployment,
    gemm: GemmSites,
    gemm_ops: list,
    attention,
    moe: MoeCurve | None = None,
    moe_group: int = 1,
) -> dict:
    """The plan's `empirical` leaf ({} outside the EMPIRICAL mode), after refusing what it does
    not estimate yet: sliding-window layers, static fp8 GEMMs and the MoE dispatch of
    attention both tensor- and data-parallel (`moe`, `moe_group`: the routed experts' curves
    and their group of GPUs, for MoE models)."""
    if deployment.mode != "EMPIRICAL":
        return {}
    if model.banded_layers:
        raise NotAvailableError(
            "database_mode EMPIRICAL: sliding-window layers are not estimated yet; use "
            "database_mode: SILICON"
        )
    if any(op.scales for op in gemm_ops):
        raise NotAvailableError(
            "database_mode EMPIRICAL: per-tensor static fp8 GEMMs (their compute-scale and "
            "scale-matrix deltas) are not estimated yet; use database_mode: SILICON"
        )
    t, adp = int(deployment.tensor), int(deployment.attention_dp)
    if moe is not None and t > 1 and adp > 1:
        raise NotAvailableError(
            "database_mode EMPIRICAL: the MoE dispatch of attention both tensor- and "
            "data-parallel is not estimated yet; use attention_data 1 or tensor 1, or "
            "database_mode: SILICON"
        )
    # the allreduce samples are the group's curve capped at one node
    node = min(t, system.gpus_per_node or t)
    grids = empirical_grids(
        tables,
        system,
        gemm,
        [op.dtype for op in gemm_ops],
        attention.context,
        attention.generation,
        allreduce_curve(tables, node) if t > 1 else None,
        node,
        deployment.transfers,
        moe,
        _nccl_lookups(tables, system, moe_group) if moe is not None and adp > 1 else (),
    )
    return {"empirical": grids}


def _nccl_lookups(tables: Tables, system: GpuSystem, num_gpus: int) -> tuple[_Lookup, _Lookup]:
    """The all_gather and reduce_scatter lookups of a `num_gpus` group: the curve of the
    largest measured group up to it (the query's SOL runs on the whole group's link)."""
    out = []
    c = ordered_rows(tables["nccl"]) if "nccl" in tables else None
    for collective in ("all_gather", "reduce_scatter"):
        groups = []
        if c is not None:
            mask = (c["op_name"] == collective) & (c["nccl_dtype"] == "half")
            groups = measured_groups(c["num_gpus"], mask)
        gpus = min(num_gpus, groups[-1]) if groups else num_gpus
        curve = nccl_curve(tables, collective, gpus, "database_mode EMPIRICAL")
        bw = system.group_bw(gpus)

        def sol(c, gpus=gpus, bw=bw):
            return KC.nccl_sol_ms.py_func(c[0], float(gpus), 2.0, bw)

        out.append(_samples([(float(x),) for x in curve.x], curve.y.tolist(), sol))
    return tuple(out)


def borrowing_refusal(
    exc: OpTableError, kinds: tuple[str, ...], deployment, tables: Tables, family: str
) -> Exception:
    """The error for a table miss: AISimulate's EMPIRICAL mode would borrow another slice's
    utilisation where the transfer policy allows one of `kinds` (not built: refused) and the
    table `family` has rows to borrow from (without any, AISimulate refuses the miss too)."""
    allowed = [k for k in kinds if k in deployment.transfers]
    rows = family in tables and len(next(iter(tables[family].values()), ())) > 0
    if deployment.mode != "EMPIRICAL" or not allowed or not rows:
        return exc
    return NotAvailableError(
        f"database_mode EMPIRICAL: {exc}; AISimulate would borrow another slice's utilisation "
        f"({', '.join(allowed)}), which is not built yet; use database_mode: SILICON"
    )


def _record(lookups: list[_Lookup], slot: np.ndarray) -> KE.UtilGrids:
    sizes = [len(x.util) for x in lookups]
    return KE.UtilGrids(
        off=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        lo=np.asarray([x.lo for x in lookups], np.float64).reshape(-1, _AXES),
        span=np.asarray([x.span for x in lookups], np.float64).reshape(-1, _AXES),
        coord=np.concatenate([x.coord for x in lookups]).reshape(-1, _AXES),
        util=np.concatenate([x.util for x in lookups]).astype(np.float64),
        slot=slot,
    )


def absent_grids() -> KE.UtilGrids:
    """The stand-in of a plan priced without EMPIRICAL lookups."""
    return _record([_Lookup(np.ones((1, 1)), np.ones(1))], np.full(KE.SLOT_SIZE, -1, np.int64))

"""Leaf builder: a plan's GEMM ops resolved to collected sites (docs/timing.md 4.1).

`gemm_sites(ops, tables, system)` turns the family's GEMM ops (name, n, k, dtype) into the
`GemmSites` record `aisim.kernels.optime_gemm` reads: an exact site, or the IDW candidates
(within 2 octaves in log2 (n, k), or every site under the single-axis frontier waiver) with
their weights, plus the m-curves of every site used (latency raised to SOL at load, leaf
energy beside it). A shape with no usable site is raised here as `OpTableError`.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels.optime_gemm import GemmSites
from aisim.timing.system import DTYPE_BYTES, GpuSystem
from aisim.timing.tables import Tables, ordered_rows, row_power

GEMM_GATE_OCTAVES = 2.0
GEMM_IDW_SITES = 4  # sites averaged per query (optime_gemm.IDW_SITES)
GEMM_MAX_NEIGHBOURS = 16  # candidates stored per GEMM: the IDW sites of every m range


NO_SCALE, COMPUTE_SCALE, COMPUTE_AND_MATRIX_SCALE = 0, 1, 2
"""Static per-tensor fp8 deltas an op saves over the table's dynamic fp8 GEMM: none; the
activation scale computation; that and the scale-matrix kernel (ops fed a low-precision input:
the attention output and down projections)."""


class GemmOp(NamedTuple):
    name: str
    n: int
    k: int
    dtype: str
    scales: int = NO_SCALE


STATIC_FP8 = "fp8_static"  # per-tensor fp8 with static activation scales: the fp8 table rows


def quantized_gemm(name: str, n: int, k: int, dtype: str, low_precision_input: bool) -> GemmOp:
    """A weight GEMM at the checkpoint's dtype; static fp8 reads the fp8 rows less its deltas."""
    if dtype != STATIC_FP8:
        return GemmOp(name, n, k, dtype)
    return GemmOp(
        name, n, k, "fp8", COMPUTE_AND_MATRIX_SCALE if low_precision_input else COMPUTE_SCALE
    )


def gemm_sites(
    ops: list[GemmOp], tables: Tables | None, system: GpuSystem, miss_hint: str = ""
) -> tuple[GemmSites, tuple[str, ...]]:
    """The record and, per op, how its shape is resolved (for inspection).

    `tables` None: SOL mode, no sites read. `miss_hint`: appended to a miss's message.
    """
    num = np.zeros(len(ops), np.int64)
    sites = np.full((len(ops), GEMM_MAX_NEIGHBOURS), -1, np.int64)
    weights = np.zeros((len(ops), GEMM_MAX_NEIGHBOURS), np.float64)
    descr = []
    table = None if tables is None else SiteTable(tables, system)
    for gi, op in enumerate(ops):
        if table is None:
            descr.append(f"{op.name} ({op.dtype}, n={op.n}, k={op.k}): SOL")
            continue
        try:
            count, ids, ws, text = table.resolve(op.name, op.dtype, op.n, op.k)
        except OpTableError as exc:
            if not miss_hint:
                raise
            raise OpTableError(
                op.name, f"gemm dtype={op.dtype} n={op.n} k={op.k}", f"{exc.detail}; {miss_hint}"
            ) from None
        num[gi] = count
        sites[gi, : len(ids)] = ids
        weights[gi, : len(ws)] = ws
        descr.append(text)
    curves = SiteTable.no_sites() if table is None else table.curves()
    scale_fields = static_fp8_scales(ops, tables if table is not None else None)
    record = GemmSites(
        op_n=np.array([float(op.n) for op in ops]),
        op_k=np.array([float(op.k) for op in ops]),
        op_flops=np.array([system.tensor_flops(op.dtype) for op in ops]),
        op_bpe=np.array([DTYPE_BYTES[op.dtype] for op in ops]),
        op_num_sites=num,
        op_sites=sites,
        op_weights=weights,
        **curves,
        **scale_fields,
    )
    return record, tuple(descr)


SCALE_FAMILIES = ("computescale", "scale_matrix")


def static_fp8_scales(ops: list[GemmOp], tables: Tables | None) -> dict[str, np.ndarray]:
    """The `GemmSites` fields of the static fp8 deltas (docs/timing.md 4.1): per op, the curve
    over m of each delta at its k (the two bracketing k rows and the weight of the upper one
    when k is not collected); -1 where an op has none. A k outside the table is a miss."""
    op_scale = np.full((len(ops), 4), -1, np.int64)
    op_w = np.zeros((len(ops), 2), np.float64)
    off, xs, ys, pws = [0], [], [], []
    ids: dict[tuple[str, int], int] = {}
    rows_of: dict[str, dict] = {}  # each delta table in first-row order, read once
    for gi, op in enumerate(ops):
        # SOL mode (no tables): the deltas are floored away at the SOL the op is priced at
        for j, family in enumerate(SCALE_FAMILIES[: op.scales] if tables is not None else ()):
            if family not in tables or not len(tables[family]["latency"]):
                raise OpTableError(
                    op.name,
                    f"{family} quant_dtype=fp8",
                    f"no {family} rows to price static fp8 GEMMs",
                )
            if family not in rows_of:
                rows_of[family] = ordered_rows(tables[family])
            c = rows_of[family]
            rows = c["quant_dtype"] == "fp8"
            ks = np.unique(c["k"][rows])
            if not ks.size or not ks[0] <= op.k <= ks[-1]:
                raise OpTableError(
                    op.name,
                    f"{family} quant_dtype=fp8 k={op.k}",
                    f"k outside the {family} table's k range",
                )
            hi = int(np.searchsorted(ks, op.k))
            bracket = [int(ks[hi])] if ks[hi] == op.k else [int(ks[hi - 1]), int(ks[hi])]
            for slot, kk in enumerate(bracket):
                key = (family, kk)
                if key not in ids:
                    ids[key] = len(off) - 1
                    sel = np.nonzero(rows & (c["k"] == kk))[0]
                    first: dict[float, tuple[float, float]] = {}
                    lats = c["latency"][sel].tolist()
                    for m, lat, pw in zip(
                        c["m"][sel].tolist(), lats, row_power(c, sel), strict=True
                    ):
                        first.setdefault(float(m), (float(lat), float(pw)))  # first row wins
                    for m in sorted(first):
                        xs.append(m)
                        ys.append(first[m][0])
                        pws.append(first[m][1])
                    off.append(len(xs))
                op_scale[gi, 2 * j + slot] = ids[key]
            if len(bracket) == 2:
                op_w[gi, j] = (op.k - bracket[0]) / (bracket[1] - bracket[0])
    if not xs:
        xs, ys, pws, off = [1.0], [0.0], [0.0], [0, 1]
    return {
        "op_scale": op_scale,
        "op_scale_w": op_w,
        "scale_off": np.asarray(off, np.int64),
        "scale_m": np.asarray(xs, np.float64),
        "scale_lat": np.asarray(ys, np.float64),
        "scale_pw": np.asarray(pws, np.float64),
    }


class SiteTable:
    """The collected GEMM sites of a table, per dtype, in first-seen row order."""

    def __init__(self, tables: Tables, system: GpuSystem) -> None:
        if "gemm" not in tables:
            raise OpTableError("gemm", "table", "the op-time table has no gemm family")
        self.cols = ordered_rows(tables["gemm"])
        self.system = system
        self._by_dtype: dict[str, tuple[list[tuple[int, int]], dict]] = {}
        self._energy: dict[str, dict[tuple[int, int, int], float]] = {}
        self.used: list[tuple[str, int, int]] = []  # plan site id -> (dtype, n, k)
        self.used_id: dict[tuple[str, int, int], int] = {}

    def _sites(self, dtype: str):
        if dtype not in self._by_dtype:
            c = self.cols
            mask = c["gemm_dtype"] == dtype
            ns, ks, ms, lats = c["n"][mask], c["k"][mask], c["m"][mask], c["latency"][mask]
            pws = row_power(c, np.nonzero(mask)[0])
            order: list[tuple[int, int]] = []
            rows: dict[tuple[int, int], dict[int, float]] = {}
            energy = self._energy.setdefault(dtype, {})
            for n, k, m, lat, pw in zip(
                ns.tolist(), ks.tolist(), ms.tolist(), lats.tolist(), pws, strict=True
            ):
                curve = rows.get((n, k))
                if curve is None:
                    curve = rows[(n, k)] = {}
                    order.append((n, k))
                if m not in curve:  # first row wins
                    curve[m] = lat
                    energy[(n, k, m)] = pw * lat
            self._by_dtype[dtype] = (order, rows)
        return self._by_dtype[dtype]

    def _site_id(self, dtype: str, n: int, k: int) -> int:
        key = (dtype, n, k)
        if key not in self.used_id:
            self.used_id[key] = len(self.used)
            self.used.append(key)
        return self.used_id[key]

    def resolve(self, op: str, dtype: str, n: int, k: int):
        """(candidate count (0 = exact site), site ids, weights, description) of one shape."""
        order, rows = self._sites(dtype)
        if not order:
            raise OpTableError(
                f"{op}", f"gemm dtype={dtype}", f"GEMM perf data missing for quant {dtype!r}"
            )
        if (n, k) in rows:
            return 0, [self._site_id(dtype, n, k)], [1.0], f"{op} ({dtype}, n={n}, k={k}): site"
        ln, lk = math.log2(n), math.log2(k)
        dist = [
            (math.hypot(math.log2(sn) - ln, math.log2(sk) - lk), i, (sn, sk))
            for i, (sn, sk) in enumerate(order)
        ]
        near = sorted((x for x in dist if x[0] <= GEMM_GATE_OCTAVES), key=lambda x: x[:2])
        how = "IDW"
        if not near:
            max_n = max(s[0] for s in order)
            max_k = max(s[1] for s in order)
            min_n = min(s[0] for s in order)
            min_k = min(s[1] for s in order)
            over = [n > max_n, k > max_k]
            inside = [min_n <= n <= max_n, min_k <= k <= max_k]
            if sum(over) == 1 and inside[over.index(False)]:
                near = sorted(dist, key=lambda x: x[:2])  # frontier waiver: no gate
                how = "IDW (frontier waiver)"
            else:
                raise OpTableError(
                    op,
                    f"gemm dtype={dtype} n={n} k={k}",
                    f"no GEMM site within {GEMM_GATE_OCTAVES} octaves and no single-axis frontier",
                )
        text = f"{op} ({dtype}, n={n}, k={k}): {how} from " + ", ".join(
            f"({sn},{sk})" for _, _, (sn, sk) in near[:GEMM_IDW_SITES]
        )
        near = m_range_candidates(near, rows)
        if len(near) > GEMM_IDW_SITES:
            text += f" (+{len(near) - GEMM_IDW_SITES} where their m-curves end)"
        ids = [self._site_id(dtype, sn, sk) for _, _, (sn, sk) in near]
        ws = [1.0 / (dd * dd + 1e-12) for dd, _, _ in near]
        return len(ids), ids, ws, text

    def curves(self) -> dict[str, np.ndarray]:
        """The site fields of `GemmSites` for every site resolved so far, in id order."""
        off = [0]
        cm: list[float] = []
        cl: list[float] = []
        ce: list[float] = []
        sn, sk, sf, sb = [], [], [], []
        mem_bw = self.system.mem_bw
        for dtype, n, k in self.used:
            _, rows = self._sites(dtype)
            flops = self.system.tensor_flops(dtype)
            bpe = DTYPE_BYTES[dtype]
            for m in sorted(rows[(n, k)]):
                lat = rows[(n, k)][m]
                sol = max(2.0 * m * n * k / flops, bpe * (m * n + m * k + n * k) / mem_bw)
                sol *= 1000.0
                cm.append(float(m))
                cl.append(lat if lat >= sol else sol)  # load-time SOL clamp
                ce.append(self._energy[dtype][(n, k, m)])  # E of the measured latency
            off.append(len(cm))
            sn.append(float(n))
            sk.append(float(k))
            sf.append(flops)
            sb.append(bpe)
        return {
            "site_off": np.asarray(off, np.int64),
            "site_n": np.asarray(sn),
            "site_k": np.asarray(sk),
            "site_flops": np.asarray(sf),
            "site_bpe": np.asarray(sb),
            "curve_m": np.asarray(cm, np.float64),
            "curve_lat": np.asarray(cl, np.float64),
            "curve_en": np.asarray(ce, np.float64),
        }

    @staticmethod
    def no_sites() -> dict[str, np.ndarray]:
        """The site fields of a plan that reads no GEMM table (SOL mode)."""
        return {
            "site_off": np.zeros(1, np.int64),
            "site_n": np.ones(1),
            "site_k": np.ones(1),
            "site_flops": np.ones(1),
            "site_bpe": np.ones(1),
            "curve_m": np.ones(1),
            "curve_lat": np.ones(1),
            "curve_en": np.zeros(1),
        }


def m_range_candidates(near: list, rows: dict) -> list:
    """The neighbour sites a GEMM query may average, in distance order (docs/timing.md 4.1).

    The resolver keeps only sites whose m-curve covers the query m, then the 4 nearest; when no
    site covers m (above every curve), the 4 nearest overall. Sites' m ranges differ (e.g. an
    fp8_block curve ending at 16384 next to ones ending at 32768), so the chosen 4 depend on m:
    every range between curve ends is sampled here and the union of its picks is stored; the
    kernel (optime_gemm.gemm_le) repeats the pick at the query m.
    """
    ranges = [(min(rows[x[2]]), max(rows[x[2]])) for x in near]
    ends = sorted({e for r in ranges for e in r})
    probes = [ends[0] - 0.5, ends[-1] + 0.5, *ends]
    probes += [(a + b) / 2.0 for a, b in itertools.pairwise(ends)]
    keep = set(range(min(GEMM_IDW_SITES, len(near))))  # the no-cover fall-back
    for m in probes:
        cover = [i for i, (lo, hi) in enumerate(ranges) if lo <= m <= hi]
        keep.update(cover[:GEMM_IDW_SITES])
    if len(keep) > GEMM_MAX_NEIGHBOURS:
        raise OpTableError(
            "gemm",
            f"{len(near)} neighbour sites",
            f"more than {GEMM_MAX_NEIGHBOURS} IDW candidates needed",
        )
    return [near[i] for i in sorted(keep)]

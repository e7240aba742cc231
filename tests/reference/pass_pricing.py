"""A slow plain-Python reading of a dense op plan: per-op latency and energy of one pass.

Written from the lookup rules of docs/timing.md (4.1 GEMM sites and IDW, 4.2 / 4.3 attention
grids and the multi-axis hold, 4.4 memory ops and extras, 4.5 curves, 6.1 / 6.2 energy), not from
the kernels: the plan's leaves are turned into dicts and sorted lists once, and every lookup is
a bisect or a sort. It reads the plan the dense family built (resolved sites, weights, slices),
so it checks the pass kernels, not the plan builder (the goldens check both).

Energy: a leaf's blend power is E / L (0 unless both are positive), blended with the latency's
weights; energy = blend power x latency, except an exact hit of an attention / allreduce leaf,
which carries the leaf's energy as is. Memory ops, p2p and the attention extras carry none.
"""

from __future__ import annotations

import bisect
import math

from aisim.timing.plan_record import scalars_of

SILICON, SOL = 0, 1
MEM, GEMM_TOKENS, GEMM_REQUESTS, CONTEXT, GENERATION, ALLREDUCE, P2P = range(7)


def _power(lat: float, energy: float) -> float:
    return energy / lat if energy > 0.0 and lat > 0.0 else 0.0


def _lerp(a: float, b: float, w: float) -> float:
    return a + (b - a) * w


def gemm_sol(m, n, k, flops, bpe, bw):
    return max(2.0 * m * n * k / flops, bpe * (m * n + m * k + n * k) / bw) * 1000.0


def attention_sol(context: bool, heads, x1, x2, par):
    """par: [n_kv, head_dim, kv_bytes, flops, window, mem_bw, mha]; context (seq, batch),
    generation (batch, kv)."""
    n_kv = heads if par[6] else par[0]
    d, kvb = par[1], par[2]
    window = par[4]
    if context:
        s, b = x1, x2
        if 0.0 < window < s:  # each query attends to the window's keys
            flops = 2.0 * b * s * window * heads * d * 2.0
        else:
            flops = 2.0 * b * s * s * heads * d * 2.0 / 2.0
        nbytes = 2.0 * b * (2.0 * heads * s * d) + kvb * b * 2.0 * n_kv * s * d
    else:
        b, s = x1, x2
        keys = min(s - 1.0, window) if window > 0.0 else s - 1.0
        flops = 2.0 * b * heads * d * 2.0 * keys
        nbytes = b * (heads * d * 2.0 + 2.0 * n_kv * keys * d * kvb + heads * d * 2.0)
    return max(flops / par[3], nbytes / par[5]) * 1000.0


def context_sol_with_prefix(heads, seq, prefix, batch, par):
    """SOL-mode context attention over seq = new + prefix tokens: the prefix's share of the
    causal FLOPs is not redone and Q / output move only the new tokens; the KV write spans seq."""
    n_kv = heads if par[6] else par[0]
    d, kvb, w = par[1], par[2], par[4]
    b, new = batch, seq - prefix
    if 0.0 < w < seq:
        flops = 2.0 * b * new * w * heads * d * 2.0
    else:
        flops = 2.0 * b * (seq * seq - prefix * prefix) * heads * d * 2.0 / 2.0
    nbytes = 2.0 * b * (2.0 * heads * new * d) + kvb * b * 2.0 * n_kv * seq * d
    return max(flops / par[3], nbytes / par[5]) * 1000.0


class DensePlanReading:
    """The plan (an OpPlan of a dense model) as Python structures, priced op by op."""

    def __init__(self, arrays) -> None:
        self.s = scalars_of(arrays)
        self.ops = list(zip(*(a.tolist() for a in arrays.ops), strict=True))
        g = arrays.gemm
        off = g.site_off.tolist()
        self.sites = []  # per site: (sorted m, {m: (lat, en)}, n, k, flops, bpe)
        for i in range(len(off) - 1):
            ms = g.curve_m[off[i] : off[i + 1]].tolist()
            rows = dict(
                zip(
                    ms,
                    zip(
                        g.curve_lat[off[i] : off[i + 1]].tolist(),
                        g.curve_en[off[i] : off[i + 1]].tolist(),
                        strict=True,
                    ),
                    strict=True,
                )
            )
            self.sites.append((ms, rows, g.site_n[i], g.site_k[i], g.site_flops[i], g.site_bpe[i]))
        self.gemm_ops = [
            (
                g.op_n[i],
                g.op_k[i],
                g.op_flops[i],
                g.op_bpe[i],
                int(g.op_num_sites[i]),
                g.op_sites[i].tolist(),
                g.op_weights[i].tolist(),
            )
            for i in range(len(g.op_n))
        ]
        self.context = _Grid(arrays.context_attention)
        self.generation = _Grid(arrays.generation_attention)
        c = arrays.allreduce
        self.allreduce = (c.x.tolist(), c.y.tolist(), c.en.tolist())

    # ---------------------------------------------------------------------------- GEMM

    def _site(self, site: int, m: float) -> tuple[float, float]:
        ms, rows, n, k, flops, bpe = self.sites[site]
        bw = self.s.mem_bw
        if m in rows:
            lat, en = rows[m]
            return lat, _power(lat, en)
        i = bisect.bisect_left(ms, m)
        if 0 < i < len(ms):
            (l0, e0), (l1, e1) = rows[ms[i - 1]], rows[ms[i]]
            w = (m - ms[i - 1]) / (ms[i] - ms[i - 1])
            return _lerp(l0, l1, w), _lerp(_power(l0, e0), _power(l1, e1), w)
        # utilisation hold: the median of the three boundary points (the edge point if fewer)
        edge = ms[:3] if i == 0 else ms[-3:]
        if len(ms) < 3:
            edge = ms[:1] if i == 0 else ms[-1:]
        utils = sorted(gemm_sol(e, n, k, flops, bpe, bw) / rows[e][0] for e in edge)
        powers = sorted(_power(*rows[e]) for e in edge)
        return gemm_sol(m, n, k, flops, bpe, bw) / utils[len(utils) // 2], powers[len(powers) // 2]

    def gemm(self, g: int, m: float) -> tuple[float, float]:
        n, k, flops, bpe, count, sites, weights = self.gemm_ops[g]
        bw = self.s.mem_bw
        if count == 0:
            lat, power = self._site(sites[0], m)
            return lat, power * lat
        cands = list(zip(sites[:count], weights[:count], strict=True))
        covering = [(s, w) for s, w in cands if self.sites[s][0][0] <= m <= self.sites[s][0][-1]]
        chosen = (covering or cands)[:4]
        terms = []
        for s, w in chosen:
            lat, power = self._site(s, m)
            _, _, sn, sk, sf, sb = self.sites[s]
            terms.append((w, gemm_sol(m, sn, sk, sf, sb, bw) / lat, power))
        den = sum(w for w, _, _ in terms)
        util = sum(w * u for w, u, _ in terms) / den
        lat = gemm_sol(m, n, k, flops, bpe, bw) / util
        return lat, sum(w * p for w, _, p in terms) / den * lat

    # ----------------------------------------------------------------------- the ops

    def op(self, i: int, tokens, requests, batch, seq, prefix) -> tuple[float, float]:
        """(latency, energy) of op i for one layer, before its scale."""
        kind, index, param, scale = self.ops[i]
        s = self.s
        sol = s.mode == SOL
        if kind == MEM:
            nbytes = tokens * param
            if sol:
                return nbytes / s.mem_bw * 1000.0, 0.0
            return (nbytes / (s.mem_bw * s.mem_eff) + s.mem_const_s) * 1000.0, 0.0
        if kind in (GEMM_TOKENS, GEMM_REQUESTS):
            m = tokens if kind == GEMM_TOKENS else requests
            if sol:
                n, k, flops, bpe = self.gemm_ops[index][:4]
                return gemm_sol(m, n, k, flops, bpe, s.mem_bw), 0.0
            return self.gemm(index, m)
        if kind == ALLREDUCE:
            return self._allreduce(tokens * param)
        if kind == CONTEXT:
            if sol:
                return (
                    context_sol_with_prefix(s.heads, seq, prefix, batch, self.context.par)
                    + s.ctx_extra_sol_ms,
                    0.0,
                )
            corr = (seq * seq - prefix * prefix) / (seq * seq)
            lat, en = self.context.lookup(True, (s.heads, seq, batch))
            return lat * corr + s.ctx_extra_ms, en * corr
        if kind == GENERATION:
            if sol:
                return (
                    attention_sol(False, s.heads, batch, seq, self.generation.par)
                    + s.gen_extra_sol_ms,
                    0.0,
                )
            lo = max(1, math.floor(0.9 * seq))
            hi = max(lo, math.floor(1.1 * seq))
            samples = [
                self.generation.lookup(False, (s.heads, batch, float(lo + (hi - lo) * j // 4)))
                for j in range(5)
            ]
            lat = sum(x for x, _ in samples) / 5.0
            return lat + s.gen_extra_ms, sum(e for _, e in samples) / 5.0
        if kind == P2P:
            if scale == 0.0:
                return 0.0, 0.0
            latency_s = 0.0 if sol else s.p2p_latency_s
            return (tokens * param / s.inter_bw + latency_s) * 1000.0, 0.0
        raise ValueError(f"op kind {kind} is not a dense op")

    def _allreduce(self, elements: float) -> tuple[float, float]:
        s = self.s
        gpus = s.allreduce_gpus
        if gpus <= 1:
            return 0.0, 0.0

        def sol(e):
            return 2.0 * (e * s.allreduce_elem_bytes) * (gpus - 1.0) / gpus / s.link_bw * 1000.0

        if s.mode == SOL:
            return sol(elements), 0.0
        x, y, en = self.allreduce
        i = bisect.bisect_left(x, elements)
        if i < len(x) and x[i] == elements:
            return y[i], en[i]
        if 0 < i < len(x):
            w = (elements - x[i - 1]) / (x[i] - x[i - 1])
            lat = _lerp(y[i - 1], y[i], w)
            return lat, _lerp(_power(y[i - 1], en[i - 1]), _power(y[i], en[i]), w) * lat
        j = 0 if i == 0 else len(x) - 1
        lat = sol(elements) / (sol(x[j]) / y[j])
        return lat, _power(y[j], en[j]) * lat

    def prefill(self, batch: int, isl: int, prefix: int) -> list[tuple[float, float]]:
        """Per context op (latency, energy), scale applied."""
        tokens = float(batch * (isl - prefix))
        return [
            self._scaled(i, tokens, float(batch), float(batch), float(isl), float(prefix))
            for i in range(self.s.num_ctx_ops)
        ]

    def decode(self, batch: int, ctx: int) -> list[tuple[float, float]]:
        eff = float(batch * (1 + self.s.nextn))
        return [
            self._scaled(i, eff, eff, eff, float(ctx), 0.0)
            for i in range(self.s.num_ctx_ops, self.s.num_ops)
        ]

    def _scaled(self, i, *shape) -> tuple[float, float]:
        lat, en = self.op(i, *shape)
        scale = self.ops[i][3]
        return lat * scale, en * scale


class _Grid:
    """An attention slice as nested sorted lists: [(x0, [(x1, [(x2, leaf id)])])]."""

    def __init__(self, grid) -> None:
        self.par = grid.par.tolist()
        self.lat = grid.lat.tolist()
        self.en = grid.en.tolist()
        v0, o0, v1, o1, v2 = (a.tolist() for a in grid[:5])
        self.tree = [
            (
                v0[a],
                [
                    (v1[b], [(v2[c], c) for c in range(o1[b], o1[b + 1])])
                    for b in range(o0[a], o0[a + 1])
                ],
            )
            for a in range(len(v0))
        ]
        self.leaves = [
            ((x0, x1, x2), leaf)
            for x0, level1 in self.tree
            for x1, level2 in level1
            for x2, leaf in level2
        ]

    def lookup(self, context: bool, q: tuple) -> tuple[float, float]:
        found = self._level(context, q, 0, self.tree)
        if found is None:
            return self._hold(context, q)
        lat, power, leaf = found
        if leaf is not None:
            return lat, self.en[leaf]
        return lat, power * lat

    def _level(self, context: bool, q: tuple, axis: int, nodes: list):
        """(latency, blend power, exact leaf or None), or None where the axis has no data."""
        coords = [c for c, _ in nodes]
        i = bisect.bisect_left(coords, q[axis])
        if i < len(coords) and coords[i] == q[axis]:
            child = nodes[i][1]
            if axis == 2:
                return self.lat[child], _power(self.lat[child], self.en[child]), child
            return self._level(context, q, axis + 1, child)
        if not 0 < i < len(coords):
            return None
        if axis == 2:
            (c0, a), (c1, b) = nodes[i - 1], nodes[i]
            w = (q[2] - c0) / (c1 - c0)
            return (
                _lerp(self.lat[a], self.lat[b], w),
                _lerp(_power(self.lat[a], self.en[a]), _power(self.lat[b], self.en[b]), w),
                None,
            )
        lo = self._level(context, q, axis + 1, nodes[i - 1][1])
        hi = self._level(context, q, axis + 1, nodes[i][1])
        if lo is not None and hi is not None:
            w = (q[axis] - coords[i - 1]) / (coords[i] - coords[i - 1])
            if context and axis == 1:  # sqrt(latency) blended along the sequence axis
                lat = _lerp(math.sqrt(lo[0]), math.sqrt(hi[0]), w) ** 2
            else:
                lat = _lerp(lo[0], hi[0], w)
            return lat, _lerp(lo[1], hi[1], w), None
        for got, at in ((lo, coords[i - 1]), (hi, coords[i])):
            if got is not None:  # the survivor, rescaled by the SOL along this axis only
                moved = tuple(at if a == axis else x for a, x in enumerate(q))
                ratio = self._sol(context, q) / self._sol(context, moved)
                return got[0] * ratio, got[1], None
        return None

    def _sol(self, context: bool, q: tuple) -> float:
        return attention_sol(context, q[0], q[1], q[2], self.par)

    def _hold(self, context: bool, q: tuple) -> tuple[float, float]:
        lq = [math.log2(x) for x in q]
        dist = [
            math.sqrt(sum((math.log2(c) - v) ** 2 for c, v in zip(key, lq, strict=True)))
            for key, _ in self.leaves
        ]
        order = sorted(range(len(dist)), key=dist.__getitem__)[:5]  # stable: earlier first
        if dist[order[0]] == 0.0:
            leaf = self.leaves[order[0]][1]
            return self.lat[leaf], self.en[leaf]
        anchors = order[:4]
        radius = dist[order[4]] if len(order) == 5 else dist[order[-1]] * (1.0 + 1e-9)
        weights = [((radius - dist[j]) / (radius * dist[j])) ** 2 for j in anchors]
        if sum(weights) <= 0.0:
            weights = [1.0] * len(anchors)
        num = num_p = 0.0
        for w, j in zip(weights, anchors, strict=True):
            key, leaf = self.leaves[j]
            num += w * self._sol(context, key) / self.lat[leaf]
            num_p += w * _power(self.lat[leaf], self.en[leaf])
        den = sum(weights)
        lat = self._sol(context, q) / (num / den)
        return lat, num_p / den * lat

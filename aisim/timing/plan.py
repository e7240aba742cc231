"""The op plan of one forward pass for the dense Qwen3 / Llama family (timing.md 2.1, 3).

Resolved once in Python per (model, parallelism, backend, version, database mode): which ops,
which table slice each reads, the GEMM sites (exact, or up to 4 neighbours with their IDW
weights), the attention slices as CSR nests, the allreduce curve and every constant. The result
is `DensePlan`, a NamedTuple of flat arrays that the numba kernels in `aisim.kernels.optime_*`
evaluate per PREFILL / DECODE call. Every discrete-key miss is raised here, as `OpTableError`,
so kernels never meet one.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from aisim.errors import NotAvailableError, OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_pass as KP
from aisim.models import ModelArch
from aisim.timing.tables import Tables, ordered_rows

# tensor-core FLOP/s key in the system yaml and bytes per element, per GEMM dtype
_DTYPE_FLOPS = {"bfloat16": "bfloat16_tc_flops", "float16": "bfloat16_tc_flops",
                "fp8": "fp8_tc_flops", "fp8_block": "fp8_tc_flops", "int8": "int8_tc_flops",
                "nvfp4": "fp4_tc_flops"}
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_block": 1.0, "int8": 1.0,
                "nvfp4": 0.5}

# attention kernel_source priority ("lane order", timing.md 1.3); lanes not listed rank after
# them. A key slice is priced from its first lane alone (see _attention_nest).
LANE_ORDER = {
    "vllm": ("vllm_flashinfer_trtllmprefill", "vllm_flashinfer_trtllmdecode",
             "vllm_triton_attn"),
    "trtllm": ("torch_flow", "default"),
}

GEMM_GATE_OCTAVES = 2.0
GEMM_IDW_SITES = 4          # sites averaged per query (optime_gemm.IDW_SITES)
GEMM_MAX_NEIGHBOURS = 16    # candidates stored per GEMM: the IDW sites of every m range
EXTRA_FACTOR = 1.1  # fused attention extras (timing.md 3.5)

OP_NAMES = ("embedding", "add_norm_1", "qkv_gemm", "attention", "proj_gemm", "add_norm_2",
            "gate_ffn1_gemm", "act_gate", "ffn2_gemm", "logits_gemm", "embedding_ar", "ar_1",
            "ar_2", "p2p")
MODES = {"SILICON": KP.MODE_SILICON, "SOL": KP.MODE_SOL}


class DensePlan(NamedTuple):
    """Flat arrays evaluated by aisim.kernels.optime_pass (all float64 / int64)."""

    consts: np.ndarray        # float64[NUM_CONSTS], see optime_pass.C_*
    op_kind: np.ndarray       # int64[num_ops] OP_* code; context ops first, then generation
    op_index: np.ndarray      # int64[num_ops] GEMM op index (or -1)
    op_param: np.ndarray      # float64[num_ops] bytes or elements per token
    op_scale: np.ndarray      # float64[num_ops] layers (or 1) multiplier
    gemm_n: np.ndarray        # float64[num_gemm]
    gemm_k: np.ndarray
    gemm_flops: np.ndarray    # FLOP/s of the GEMM dtype
    gemm_bpe: np.ndarray      # bytes per element
    gemm_num_sites: np.ndarray  # int64[num_gemm]: 0 = exact site, else IDW neighbours
    gemm_sites: np.ndarray    # int64[num_gemm, 4] site ids
    gemm_weights: np.ndarray  # float64[num_gemm, 4] 1/(d^2 + 1e-12)
    site_off: np.ndarray      # int64[num_sites + 1] into curve_m / curve_lat
    site_n: np.ndarray        # float64[num_sites]
    site_k: np.ndarray
    site_flops: np.ndarray
    site_bpe: np.ndarray
    curve_m: np.ndarray       # float64[rows] sorted per site
    curve_lat: np.ndarray     # float64[rows] ms, raised to >= SOL
    ctx_v0: np.ndarray        # context attention nest: heads -> seq -> batch
    ctx_o0: np.ndarray
    ctx_v1: np.ndarray
    ctx_o1: np.ndarray
    ctx_v2: np.ndarray
    ctx_lat: np.ndarray
    ctx_par: np.ndarray       # float64[PAR_SIZE]
    gen_v0: np.ndarray        # generation attention nest: heads -> batch -> kv
    gen_o0: np.ndarray
    gen_v1: np.ndarray
    gen_o1: np.ndarray
    gen_v2: np.ndarray
    gen_lat: np.ndarray       # raised to >= SOL
    gen_par: np.ndarray
    ar_x: np.ndarray          # float64 message elements (custom allreduce, CUDA graph, tp)
    ar_y: np.ndarray          # float64 ms
    scratch_d: np.ndarray     # float64[8] scratch for the attention hold
    scratch_i: np.ndarray     # int64[8]
    # energy evidence (timing.md 8.1), parallel to the latency leaves above: leaf energy
    # E = power x measured latency (W*ms, before the SOL clamp; 0 where the table has no power)
    curve_en: np.ndarray      # float64[rows], parallel to curve_lat
    ctx_en: np.ndarray        # parallel to ctx_lat
    gen_en: np.ndarray        # parallel to gen_lat
    ar_en: np.ndarray         # parallel to ar_y
    # MoE / DeepSeek family (aisim.timing.plan_moe); one-element placeholders in dense plans
    dsa_ctx_v0: np.ndarray    # DSA context module nest: prefix + 1 -> new tokens -> batch
    dsa_ctx_o0: np.ndarray
    dsa_ctx_v1: np.ndarray
    dsa_ctx_o1: np.ndarray
    dsa_ctx_v2: np.ndarray
    dsa_ctx_lat: np.ndarray
    dsa_ctx_par: np.ndarray
    dsa_gen_v0: np.ndarray    # DSA generation module nest: heads -> batch -> kv
    dsa_gen_o0: np.ndarray
    dsa_gen_v1: np.ndarray
    dsa_gen_o1: np.ndarray
    dsa_gen_v2: np.ndarray
    dsa_gen_lat: np.ndarray
    dsa_gen_par: np.ndarray
    moe_x: np.ndarray         # float64 global tokens
    moe_y: np.ndarray         # float64 ms per layer
    moe_en: np.ndarray        # parallel to moe_y
    moe_par: np.ndarray       # float64[optime_moe.MOE_PAR_SIZE]
    ag_x: np.ndarray          # NCCL all_gather curve over message elements
    ag_y: np.ndarray
    rs_x: np.ndarray          # NCCL reduce_scatter curve
    rs_y: np.ndarray
    dsa_ctx_en: np.ndarray    # parallel to dsa_ctx_lat (TRT-LLM module tables carry power)
    dsa_gen_en: np.ndarray    # parallel to dsa_gen_lat


def no_moe_arrays() -> dict[str, np.ndarray]:
    """Placeholders for the MoE / DSA fields of a plan whose model has none."""
    from aisim.kernels import optime_moe as KM

    nest = _empty_nest()
    out = {}
    for prefix in ("dsa_ctx", "dsa_gen"):
        out.update({f"{prefix}_{k}": v.copy() for k, v in nest.items()})
        out[f"{prefix}_par"] = np.zeros(KA.PAR_SIZE, np.float64)
    out.update(moe_x=np.ones(1), moe_y=np.ones(1), moe_en=np.zeros(1),
               moe_par=np.ones(KM.MOE_PAR_SIZE), ag_x=np.ones(1), ag_y=np.ones(1),
               rs_x=np.ones(1), rs_y=np.ones(1))
    return out


@dataclass(frozen=True)
class PassPlan:
    """A resolved plan plus the names the breakdown reports."""

    arrays: DensePlan
    op_names: tuple[str, ...]   # "context_<op>" then "generation_<op>"
    num_ctx_ops: int
    model_id: str
    backend: str
    version: str
    mode: str
    tensor_parallel: int
    gemm_descr: tuple[str, ...]  # per GEMM op: how its shape is resolved (for inspection)


def build_dense_plan(model: ModelArch, tables: Tables, system: dict, *, backend: str,
                     version: str, tensor_parallel: int = 1, pipeline_parallel: int = 1,
                     mode: str = "SILICON", nextn: int = 0,
                     kv_cache_dtype: str = "bfloat16", fmha_dtype: str = "bfloat16",
                     gemm_dtype: str | None = None) -> PassPlan:
    """Resolve the op plan of the dense LLAMA-family forward pass (timing.md 2.1)."""
    if mode not in MODES:
        raise NotAvailableError(
            f"database_mode {mode}: only SILICON and SOL are available (HYBRID and EMPIRICAL "
            "are not built yet)")
    if pipeline_parallel < 1:
        raise NotAvailableError(f"pipeline parallelism {pipeline_parallel} is not valid")
    t = int(tensor_parallel)
    h = model.hidden_size
    inter = model.intermediate_size
    d = model.head_dim
    n_heads = model.num_attention_heads // t
    n_kv = max(1, model.num_kv_heads // t)
    L = model.num_layers
    # an unquantized checkpoint's GEMMs are priced in bf16 whatever its torch_dtype (oracle:
    # float16 / float32 Qwen3-32B give the bf16 figures); quantized ones are refused upstream
    gemm_dtype = gemm_dtype or "bfloat16"
    gpu = system["gpu"]
    node = system["node"]
    mem_bw = float(gpu["mem_bw"])
    mem_eff = float(gpu["mem_bw_empirical_scaling_factor"])
    mem_const_s = float(gpu["mem_empirical_constant_latency"])

    def flops_of(dtype: str) -> float:
        return float(gpu[_DTYPE_FLOPS[dtype]])

    # ---- GEMM ops: (name, n, k, dtype)
    gemm_ops = [
        ("qkv_gemm", n_heads * d + 2 * n_kv * d, h, gemm_dtype),
        ("proj_gemm", h, n_heads * d, gemm_dtype),
        ("gate_ffn1_gemm", 2 * inter // t, h, gemm_dtype),
        ("ffn2_gemm", h, inter // t, gemm_dtype),
        ("logits_gemm", model.vocab_size // t, h, "bfloat16"),  # lm_head is always bf16
    ]
    gemm = _GemmSites(tables, mem_bw, flops_of) if mode == "SILICON" else None
    g_num = np.zeros(len(gemm_ops), np.int64)
    g_sites = np.full((len(gemm_ops), GEMM_MAX_NEIGHBOURS), -1, np.int64)
    g_w = np.zeros((len(gemm_ops), GEMM_MAX_NEIGHBOURS), np.float64)
    descr = []
    for gi, (name, n, k, dtype) in enumerate(gemm_ops):
        if gemm is None:
            descr.append(f"{name} ({dtype}, n={n}, k={k}): SOL")
            continue
        num, ids, ws, text = gemm.resolve(name, dtype, n, k)
        g_num[gi] = num
        g_sites[gi, :len(ids)] = ids
        g_w[gi, :len(ws)] = ws
        descr.append(text)
    gemm_index = {name: gi for gi, (name, *_r) in enumerate(gemm_ops)}

    # ---- attention slices
    kv_bytes = _DTYPE_BYTES[kv_cache_dtype]
    par_common = {"n_kv": n_kv, "d": d, "kv_bytes": kv_bytes, "mem_bw": mem_bw,
                  "mha": n_heads == n_kv}
    ctx_par = _par(par_common, flops_of(fmha_dtype))
    gen_par = _par(par_common, flops_of(fmha_dtype))
    if mode == "SILICON":
        ctx_nest = _attention_nest(tables, "context_attention", backend, fmha_dtype,
                                   kv_cache_dtype, n_heads, n_kv, d, ctx_par)
        gen_nest = _attention_nest(tables, "generation_attention", backend, fmha_dtype,
                                   kv_cache_dtype, n_heads, n_kv, d, gen_par)
        ar_x, ar_y, ar_en = (_allreduce_curve(tables, t, system["node"]) if t > 1
                             else (np.ones(1), np.ones(1), np.zeros(1)))
    else:
        ctx_nest = gen_nest = _empty_nest()
        ar_x, ar_y, ar_en = np.ones(1), np.ones(1), np.zeros(1)

    # ---- fused attention extras (per layer, timing.md 3.5): memory-op units and their bytes
    # kv_write: K and V of the new token (2 units); rope: q and k read + write (2 units);
    # qk_norm: 8 units over q and k (Qwen3 only). Byte split inferred from the golden totals.
    kv_write_b = 2.0 * n_kv * d * kv_bytes
    rope_b = 2.0 * (n_heads + n_kv) * d * 2.0
    qk_b = 4.0 * (n_heads + n_kv) * d * 2.0 if model.use_qk_norm else 0.0
    qk_units = 8 if model.use_qk_norm else 0
    ctx_units = 4 + qk_units
    ctx_bytes = kv_write_b + rope_b + qk_b

    def extra_ms(units: int, nbytes: float) -> float:
        if units == 0:
            return 0.0
        return EXTRA_FACTOR * (units * mem_const_s * 1e3 + nbytes / (mem_bw * mem_eff) * 1e3)

    def extra_sol_ms(units: int, nbytes: float) -> float:
        return EXTRA_FACTOR * nbytes / mem_bw * 1e3 if units else 0.0

    consts = np.zeros(KP.NUM_CONSTS, np.float64)
    consts[KP.C_MODE] = MODES[mode]
    consts[KP.C_MEM_BW] = mem_bw
    consts[KP.C_MEM_EFF] = mem_eff
    consts[KP.C_MEM_CONST_S] = mem_const_s
    consts[KP.C_LINK_BW] = float(node["intra_node_bw"])
    consts[KP.C_INTER_BW] = float(node["inter_node_bw"])
    consts[KP.C_P2P_LAT_S] = float(node["p2p_latency"])
    consts[KP.C_TP] = t
    consts[KP.C_AR_ELEM_BYTES] = 2.0
    consts[KP.C_NEXTN] = nextn
    consts[KP.C_HEADS] = n_heads
    consts[KP.C_CTX_EXTRA_MS] = extra_ms(ctx_units, ctx_bytes)
    consts[KP.C_CTX_EXTRA_SOL_MS] = extra_sol_ms(ctx_units, ctx_bytes)
    consts[KP.C_GEN_EXTRA_MS] = extra_ms(qk_units, qk_b)
    consts[KP.C_GEN_EXTRA_SOL_MS] = extra_sol_ms(qk_units, qk_b)

    # ---- op list, in the engine's order (golden per_op_breakdown)
    kinds, index, param, scale, names = [], [], [], [], []
    for phase, prefix_name in ((0, "context"), (1, "generation")):
        layer_scale = float(L + (nextn if phase == 1 else 0))
        once_scale = layer_scale / L
        rows = [
            ("embedding", KP.OP_MEM_TOKENS, -1, 2.0 * h, once_scale),
            ("add_norm_1", KP.OP_MEM_TOKENS, -1, 8.0 * h, layer_scale),
            ("qkv_gemm", KP.OP_GEMM_TOKENS, gemm_index["qkv_gemm"], 0.0, layer_scale),
            ("attention", KP.OP_ATTN_CONTEXT if phase == 0 else KP.OP_ATTN_GENERATION, -1,
             0.0, layer_scale),
            ("proj_gemm", KP.OP_GEMM_TOKENS, gemm_index["proj_gemm"], 0.0, layer_scale),
            ("add_norm_2", KP.OP_MEM_TOKENS, -1, 8.0 * h, layer_scale),
            ("gate_ffn1_gemm", KP.OP_GEMM_TOKENS, gemm_index["gate_ffn1_gemm"], 0.0,
             layer_scale),
            ("act_gate", KP.OP_MEM_TOKENS, -1, (2 * inter // t + inter // t) * 2.0,
             layer_scale),
            ("ffn2_gemm", KP.OP_GEMM_TOKENS, gemm_index["ffn2_gemm"], 0.0, layer_scale),
            ("logits_gemm", KP.OP_GEMM_REQUESTS, gemm_index["logits_gemm"], 0.0, once_scale),
            ("embedding_ar", KP.OP_ALLREDUCE, -1, float(h), once_scale),
            ("ar_1", KP.OP_ALLREDUCE, -1, float(h), layer_scale),
            ("ar_2", KP.OP_ALLREDUCE, -1, float(h), layer_scale),
            ("p2p", KP.OP_P2P, -1, 2.0 * h, float(pipeline_parallel - 1)),
        ]
        assert tuple(r[0] for r in rows) == OP_NAMES
        for name, kind, gi, p, sc in rows:
            names.append(f"{prefix_name}_{name}")
            kinds.append(kind)
            index.append(gi)
            param.append(p)
            scale.append(sc)
    num_ctx = len(OP_NAMES)
    consts[KP.C_NUM_CTX_OPS] = num_ctx
    consts[KP.C_NUM_OPS] = len(names)

    if gemm is None:
        site_arrays = _GemmSites.empty_arrays()
    else:
        site_arrays = gemm.arrays()
    arrays = DensePlan(
        consts=consts,
        op_kind=np.asarray(kinds, np.int64), op_index=np.asarray(index, np.int64),
        op_param=np.asarray(param, np.float64), op_scale=np.asarray(scale, np.float64),
        gemm_n=np.array([float(g[1]) for g in gemm_ops]),
        gemm_k=np.array([float(g[2]) for g in gemm_ops]),
        gemm_flops=np.array([flops_of(g[3]) for g in gemm_ops]),
        gemm_bpe=np.array([_DTYPE_BYTES[g[3]] for g in gemm_ops]),
        gemm_num_sites=g_num, gemm_sites=g_sites, gemm_weights=g_w,
        **site_arrays,
        **{f"ctx_{k}": v for k, v in ctx_nest.items() if k != "en"}, ctx_par=ctx_par,
        **{f"gen_{k}": v for k, v in gen_nest.items() if k != "en"}, gen_par=gen_par,
        ar_x=np.ascontiguousarray(ar_x, np.float64), ar_y=np.ascontiguousarray(ar_y, np.float64),
        scratch_d=np.zeros(8, np.float64), scratch_i=np.zeros(8, np.int64),
        ctx_en=ctx_nest["en"], gen_en=gen_nest["en"],
        ar_en=np.ascontiguousarray(ar_en, np.float64),
        **no_moe_arrays(),
    )
    return PassPlan(arrays=arrays, op_names=tuple(names), num_ctx_ops=num_ctx,
                    model_id=model.model_id, backend=backend, version=version, mode=mode,
                    tensor_parallel=t, gemm_descr=tuple(descr))


def _par(common: dict, flops: float) -> np.ndarray:
    par = np.zeros(KA.PAR_SIZE, np.float64)
    par[KA.PAR_NUM_KV_HEADS] = common["n_kv"]
    par[KA.PAR_HEAD_DIM] = common["d"]
    par[KA.PAR_KV_BYTES] = common["kv_bytes"]
    par[KA.PAR_FLOPS] = flops
    par[KA.PAR_WINDOW] = 0.0
    par[KA.PAR_MEM_BW] = common["mem_bw"]
    par[KA.PAR_MHA] = 1.0 if common["mha"] else 0.0
    return par


# ------------------------------------------------------------------------------------ GEMM


class _GemmSites:
    """The collected GEMM sites of a table, per dtype, in first-seen row order."""

    def __init__(self, tables: Tables, mem_bw: float, flops_of) -> None:
        if "gemm" not in tables:
            raise OpTableError("gemm", "table", "the op-time table has no gemm family")
        self.cols = ordered_rows(tables["gemm"])
        self.mem_bw = mem_bw
        self.flops_of = flops_of
        self._by_dtype: dict[str, tuple[list[tuple[int, int]], dict]] = {}
        self._energy: dict[str, dict[tuple[int, int, int], float]] = {}
        self.used: list[tuple[str, int, int]] = []   # plan site id -> (dtype, n, k)
        self.used_id: dict[tuple[str, int, int], int] = {}

    def _sites(self, dtype: str):
        if dtype not in self._by_dtype:
            c = self.cols
            mask = c["gemm_dtype"] == dtype
            ns, ks, ms, lats = c["n"][mask], c["k"][mask], c["m"][mask], c["latency"][mask]
            pws = _power(c, np.nonzero(mask)[0])
            order: list[tuple[int, int]] = []
            rows: dict[tuple[int, int], dict[int, float]] = {}
            energy = self._energy.setdefault(dtype, {})
            for n, k, m, lat, pw in zip(ns.tolist(), ks.tolist(), ms.tolist(), lats.tolist(),
                                        pws, strict=True):
                curve = rows.get((n, k))
                if curve is None:
                    curve = rows[(n, k)] = {}
                    order.append((n, k))
                if m not in curve:   # first row wins
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
        order, rows = self._sites(dtype)
        if not order:
            raise OpTableError(f"{op}", f"gemm dtype={dtype}",
                               f"GEMM perf data missing for quant {dtype!r}")
        if (n, k) in rows:
            return 0, [self._site_id(dtype, n, k)], [1.0], f"{op} ({dtype}, n={n}, k={k}): site"
        ln, lk = math.log2(n), math.log2(k)
        dist = [(math.hypot(math.log2(sn) - ln, math.log2(sk) - lk), i, (sn, sk))
                for i, (sn, sk) in enumerate(order)]
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
                near = sorted(dist, key=lambda x: x[:2])   # frontier waiver: no gate
                how = "IDW (frontier waiver)"
            else:
                raise OpTableError(
                    op, f"gemm dtype={dtype} n={n} k={k}",
                    f"no GEMM site within {GEMM_GATE_OCTAVES} octaves and no single-axis "
                    "frontier")
        text = f"{op} ({dtype}, n={n}, k={k}): {how} from " + ", ".join(
            f"({sn},{sk})" for _, _, (sn, sk) in near[:GEMM_IDW_SITES])
        near = _m_range_candidates(near, rows)
        if len(near) > GEMM_IDW_SITES:
            text += f" (+{len(near) - GEMM_IDW_SITES} where their m-curves end)"
        ids = [self._site_id(dtype, sn, sk) for _, _, (sn, sk) in near]
        ws = [1.0 / (dd * dd + 1e-12) for dd, _, _ in near]
        return len(ids), ids, ws, text

    def arrays(self) -> dict[str, np.ndarray]:
        off = [0]
        cm: list[float] = []
        cl: list[float] = []
        ce: list[float] = []
        sn, sk, sf, sb = [], [], [], []
        for dtype, n, k in self.used:
            _, rows = self._sites(dtype)
            flops = self.flops_of(dtype)
            bpe = _DTYPE_BYTES[dtype]
            for m in sorted(rows[(n, k)]):
                lat = rows[(n, k)][m]
                sol = max(2.0 * m * n * k / flops, bpe * (m * n + m * k + n * k) / self.mem_bw)
                sol *= 1000.0
                cm.append(float(m))
                cl.append(lat if lat >= sol else sol)   # load-time SOL clamp
                ce.append(self._energy[dtype][(n, k, m)])   # E of the measured latency
            off.append(len(cm))
            sn.append(float(n))
            sk.append(float(k))
            sf.append(flops)
            sb.append(bpe)
        return {"site_off": np.asarray(off, np.int64), "site_n": np.asarray(sn),
                "site_k": np.asarray(sk), "site_flops": np.asarray(sf),
                "site_bpe": np.asarray(sb), "curve_m": np.asarray(cm, np.float64),
                "curve_lat": np.asarray(cl, np.float64), "curve_en": np.asarray(ce, np.float64)}

    @staticmethod
    def empty_arrays() -> dict[str, np.ndarray]:
        return {"site_off": np.zeros(1, np.int64), "site_n": np.ones(1), "site_k": np.ones(1),
                "site_flops": np.ones(1), "site_bpe": np.ones(1), "curve_m": np.ones(1),
                "curve_lat": np.ones(1), "curve_en": np.zeros(1)}


def _m_range_candidates(near: list, rows: dict) -> list:
    """The neighbour sites a GEMM query may average, in distance order (timing.md 3.1).

    The resolver keeps only sites whose m-curve covers the query m, then the 4 nearest; when no
    site covers m (above every curve), the 4 nearest overall. Sites' m ranges differ (e.g. an
    fp8_block curve ending at 16384 next to ones ending at 32768), so the chosen 4 depend on m:
    every range between curve ends is sampled here and the union of its picks is stored; the
    kernel (optime_gemm.gemm_latency_ms) repeats the pick at the query m.
    """
    ranges = [(min(rows[x[2]]), max(rows[x[2]])) for x in near]
    ends = sorted({e for r in ranges for e in r})
    probes = [ends[0] - 0.5, ends[-1] + 0.5, *ends]
    probes += [(a + b) / 2.0 for a, b in itertools.pairwise(ends)]
    keep = set(range(min(GEMM_IDW_SITES, len(near))))   # the no-cover fall-back
    for m in probes:
        cover = [i for i, (lo, hi) in enumerate(ranges) if lo <= m <= hi]
        keep.update(cover[:GEMM_IDW_SITES])
    if len(keep) > GEMM_MAX_NEIGHBOURS:
        raise OpTableError("gemm", f"{len(near)} neighbour sites",
                           f"more than {GEMM_MAX_NEIGHBOURS} IDW candidates needed")
    return [near[i] for i in sorted(keep)]


# ------------------------------------------------------------------------------- attention


def _empty_nest() -> dict[str, np.ndarray]:
    return {"v0": np.ones(1), "o0": np.zeros(2, np.int64), "v1": np.ones(1),
            "o1": np.zeros(2, np.int64), "v2": np.ones(1), "lat": np.ones(1),
            "en": np.zeros(1)}


def _attention_nest(tables: Tables, family: str, backend: str, fmha_dtype: str,
                    kv_dtype: str, n_heads: int, n_kv: int, d: int,
                    par: np.ndarray) -> dict[str, np.ndarray]:
    """The key slice as a CSR nest; context (heads, seq, batch), generation (heads, batch, kv)."""
    op = "context_attention" if family == "context_attention" else "generation_attention"
    if family not in tables:
        raise OpTableError(op, "table", f"the op-time table has no {family} family")
    c = ordered_rows(tables[family])
    n_kv_lookup = 0 if n_heads == n_kv else n_kv
    table_nkv = np.where(c["num_heads"] == c["num_key_value_heads"], 0,
                         c["num_key_value_heads"])
    mask = ((c["kv_cache_dtype"] == kv_dtype) & (table_nkv == n_kv_lookup)
            & (c["head_dim"] == d) & (c["window_size"] == 0))
    if family == "context_attention":
        mask &= c["attn_dtype"] == fmha_dtype
        mask &= c["step"] == 0
    if "beam_width" in c:
        mask &= c["beam_width"] == 1
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        key = (f"attn_dtype={fmha_dtype} " if family == "context_attention" else "")
        key += f"kv_cache_dtype={kv_dtype} n_kv={n_kv_lookup} head_dim={d} window=0"
        raise OpTableError(op, key, f"{family} perf data missing for this key slice")
    lanes = LANE_ORDER.get(backend, ())
    rank = {lane: i for i, lane in enumerate(lanes)}
    ks = c["kernel_source"][idx]
    lane_rank = np.array([rank.get(str(s) or "default", len(lanes)) for s in ks], np.int64)
    # One lane per key: the first lane of the order that has rows for it, alone. The others
    # never fill its gaps, so in vLLM the trtllmdecode isl = 1 context rows stay unused and a
    # prefill below isl 16 falls to the utilisation hold over the trtllmprefill leaves (pinned
    # in tests/golden_optable/attention_corners.json).
    idx = idx[lane_rank == lane_rank.min()]
    gen = family == "generation_attention"
    leaves: dict[tuple[int, int, int], float] = {}
    heads_a = c["num_heads"][idx].tolist()
    b_a = c["batch_size"][idx].tolist()
    s_a = (c["isl"][idx] + c["step"][idx]).tolist() if gen else c["isl"][idx].tolist()
    lat_a = c["latency"][idx].tolist()
    pow_a = _power(c, idx)
    energy: dict[tuple[int, int, int], float] = {}
    for hh, b, s, lat, pw in zip(heads_a, b_a, s_a, lat_a, pow_a, strict=True):
        key = (hh, b, s) if gen else (hh, s, b)
        if key not in leaves:
            energy[key] = pw * lat
            if gen:
                sol = KA.attention_sol_ms.py_func(KA.KIND_GENERATION, float(hh), float(b),
                                                  float(s), par)
                lat = lat if lat >= sol else sol   # load-time SOL clamp
            leaves[key] = lat
    return csr_nest(leaves, energy)


def _power(c: dict[str, np.ndarray], idx: np.ndarray) -> list[float]:
    """The rows' `power` (W); 0 when the table has no power column or the row is unmeasured."""
    if "power" not in c:
        return [0.0] * len(idx)
    pw = np.asarray(c["power"], np.float64)[idx]
    return np.where(np.isfinite(pw) & (pw > 0.0), pw, 0.0).tolist()


# ------------------------------------------------------------------------------- allreduce


def _allreduce_curve(tables: Tables, tp: int, node: dict | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The custom-allreduce curve at `tp` GPUs; with `node`, a group larger than every
    measured one is the largest measured curve scaled (aisim.timing.multinode)."""
    if "custom_allreduce" not in tables:
        raise OpTableError("ar_1", "table", "the op-time table has no custom_allreduce family")
    c = ordered_rows(tables["custom_allreduce"])
    mask = c["allreduce_dtype"] == "bfloat16"
    ks = c["kernel_source"]
    mask &= np.array(["eager" not in str(s).lower() for s in ks], bool)
    factor = 1.0
    if node is not None:
        from aisim.timing.multinode import group_scale, measured_groups

        groups = measured_groups(c["num_gpus"], mask)
        if groups and tp > groups[-1]:
            factor = group_scale(tp, groups[-1], node)
            tp = groups[-1]
    if factor != 1.0:
        from aisim.timing.multinode import scaled

        return scaled(_allreduce_curve(tables, tp), factor)
    mask &= c["num_gpus"] == tp
    idx = np.nonzero(mask)[0]
    if idx.size == 0:
        raise OpTableError("ar_1", f"allreduce_dtype=bfloat16 num_gpus={tp}",
                           "custom allreduce perf data missing")
    first: dict[int, tuple[float, float]] = {}
    for x, y, pw in zip(c["message_size"][idx].tolist(), c["latency"][idx].tolist(),
                        _power(c, idx), strict=True):
        first.setdefault(x, (y, pw * y))
    xs = sorted(first)
    return (np.asarray(xs, np.float64), np.asarray([first[x][0] for x in xs], np.float64),
            np.asarray([first[x][1] for x in xs], np.float64))


def csr_nest(leaves: dict[tuple, float], energy: dict[tuple, float] | None = None
             ) -> dict[str, np.ndarray]:
    """Three-level (axis0, axis1, axis2) -> latency leaves as the CSR arrays the attention
    kernels walk (values and offsets per level); `energy` adds the matching "en" column."""
    keys = sorted(leaves)
    v0, o0, v1, o1, v2, lat = [], [0], [], [0], [], []
    for key in keys:
        if not v0 or v0[-1] != key[0]:
            if v0:
                o0.append(len(v1))
            v0.append(key[0])
            new1 = True
        else:
            new1 = v1[-1] != key[1]
        if new1:
            if v1:
                o1.append(len(v2))
            v1.append(key[1])
        v2.append(key[2])
        lat.append(leaves[key])
    o0.append(len(v1))
    o1.append(len(v2))
    nest = {"v0": np.asarray(v0, np.float64), "o0": np.asarray(o0, np.int64),
            "v1": np.asarray(v1, np.float64), "o1": np.asarray(o1, np.int64),
            "v2": np.asarray(v2, np.float64), "lat": np.asarray(lat, np.float64)}
    if energy is not None:
        nest["en"] = np.asarray([energy[key] for key in keys], np.float64)
    return nest

"""Op-level pass pricing of the dense Qwen3 / Llama family (docs/timing.md 3.1, 3.2, 3.8, 4, 5).

Golden figures: AISimulate 0.13.0 via shared/reference/optable_golden.json, pinned in
tests/golden_optable/. The resolver rules are pinned one by one against small hand-made tables.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from aisim.errors import NotAvailableError, OpTableError
from aisim.kernels import optime_attention as KA
from aisim.kernels import optime_comm as KC
from aisim.kernels import optime_gemm as KG
from aisim.kernels import optime_pass as KP
from aisim.kernels.optime_attention import GridSlice
from aisim.kernels.optime_comm import Curve
from aisim.kernels.optime_gemm import GemmSites
from aisim.models import ModelArch, load_model
from aisim.timing.family_dense import build_dense_plan
from aisim.timing.leaf_attention import csr_nest
from aisim.timing.leaf_gemm import GemmOp, SiteTable, static_fp8_scales
from aisim.timing.plan_record import Deployment, scalars_of
from aisim.timing.pricer import PassPricer
from aisim.timing.system import GpuSystem

GOLDEN = json.loads((Path(__file__).parent / "golden_optable" / "qwen3_32b_tp4.json").read_text())
REL = 1e-9


def _compiled_tables(backend: str, version: str):
    try:
        from aisim.timing.tables import load_tables

        return load_tables("b200_sxm", backend, version)
    except (ImportError, OpTableError) as exc:  # pragma: no cover - table not shipped
        pytest.skip(f"compiled op-time table not present ({exc})")


_PLANS: dict = {}


def pricer(key: str, mode: str = "SILICON") -> PassPricer:
    if (key, mode) not in _PLANS:
        cfg = GOLDEN["configs"][key]
        tables, system = _compiled_tables(cfg["backend"], cfg["version"])
        plan = build_dense_plan(
            load_model(cfg["model"]),
            tables,
            system,
            Deployment(cfg["backend"], cfg["version"], tensor=cfg["tp"], mode=mode),
        )
        _PLANS[(key, mode)] = PassPricer(plan)
    return _PLANS[(key, mode)]


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * abs(ref)


CASE_IDS = [(k, c) for k, cfg in GOLDEN["configs"].items() for c in cfg["cases"]]
PER_OP_IDS = [(k, c) for k, cfg in GOLDEN["configs"].items() for c in cfg["per_op_breakdown"]]


# ------------------------------------------------------------------------ goldens (compiled)


@pytest.mark.golden
@pytest.mark.parametrize(("key", "case"), CASE_IDS, ids=[f"{k}-{c}" for k, c in CASE_IDS])
def test_golden_pass_total(key: str, case: str) -> None:
    c = GOLDEN["configs"][key]["cases"][case]
    pr = pricer(key)
    got = 0.0
    if "prefill" in c:
        got += pr.prefill(*c["prefill"])
    if "decode" in c:
        got += pr.decode(*c["decode"])
    assert _close(got, c["latency_ms"]), (got, c["latency_ms"])


@pytest.mark.golden
@pytest.mark.parametrize("mode", ["SILICON", "SOL"])
@pytest.mark.parametrize(("key", "case"), PER_OP_IDS, ids=[f"{k}-{c}" for k, c in PER_OP_IDS])
def test_golden_per_op(key: str, case: str, mode: str) -> None:
    c = GOLDEN["configs"][key]["per_op_breakdown"][case]
    pr = pricer(key, mode)
    bd = (
        pr.prefill_breakdown(*c["prefill"]) if "prefill" in c else pr.decode_breakdown(*c["decode"])
    )
    field = "latency_ms" if mode == "SILICON" else "sol_ms"
    assert [name for name, _ in bd] == [o["op"] for o in c["ops"]]
    for (name, got), o in zip(bd, c["ops"], strict=True):
        assert _close(got, o[field]), (name, got, o[field])
    total = sum(o[field] for o in c["ops"])
    got_total = pr.prefill(*c["prefill"]) if "prefill" in c else pr.decode(*c["decode"])
    assert _close(got_total, total)


@pytest.mark.golden
def test_sol_mode_totals_of_timing_md() -> None:
    for key, figs in GOLDEN["sol_mode_timing_md_3_6"].items():
        pr = pricer(key, "SOL")
        assert round(pr.prefill(1, 1024, 0), 3) == figs["prefill_1x1024"]
        assert round(pr.decode(64, 1100), 3) == figs["decode_b64_kv1100"]


def test_miss_names_op_and_key() -> None:
    tables, system = _compiled_tables("vllm", "0.24.0")
    model = load_model("Qwen/Qwen3-32B")
    tp4 = Deployment("vllm", "0.24.0", tensor=4)
    with pytest.raises(OpTableError) as err:
        build_dense_plan(model, tables, system, tp4, fmha_dtype="fp8")
    assert err.value.op == "context_attention"
    assert "attn_dtype=fp8" in err.value.key
    with pytest.raises(OpTableError) as err:
        build_dense_plan(model, tables, system, tp4, gemm_dtype="int4_awq")
    assert err.value.op == "qkv_gemm" and "int4_awq" in err.value.key
    # SOL needs no table slice (docs/timing.md 5: fmha fp8 works in SOL)
    build_dense_plan(
        model, tables, system, Deployment("vllm", "0.24.0", tensor=4, mode="SOL"), fmha_dtype="fp8"
    )
    with pytest.raises(NotAvailableError):
        build_dense_plan(
            model, tables, system, Deployment("vllm", "0.24.0", tensor=4, mode="HYBRID")
        )


def test_kernels_have_one_specialization() -> None:
    """Python callers never compile a second copy (the event loop's own call sites may add
    their specialization when it compiles in the same process, which is fine)."""
    pr = pricer("qwen3_32b_tp4_vllm_0.24.0")
    pr.prefill(3, 1500, 200)
    pr.decode(7, 333)
    seen = {fn: len(fn.signatures) for fn in (KP.price_prefill, KP.price_decode)}
    pr.prefill(1, 17, 0)
    pr.decode(250, 90000)
    pricer("qwen3_32b_tp4_vllm_0.24.0", "SOL").decode(7, 333)
    for fn, count in seen.items():
        assert len(fn.signatures) == count, fn.signatures


# -------------------------------------------------------------- resolver rules, hand tables

BW = 7.7e12
BF16 = 2.25e15
SYSTEM = {
    "gpu": {
        "mem_bw": BW,
        "mem_bw_empirical_scaling_factor": 0.8,
        "mem_empirical_constant_latency": 3e-6,
        "bfloat16_tc_flops": BF16,
        "fp8_tc_flops": 4.5e15,
        "int8_tc_flops": 4.5e15,
        "fp4_tc_flops": 9e15,
    },
    "node": {"intra_node_bw": 900e9, "inter_node_bw": 50e9, "p2p_latency": 1e-5},
}


def gsol(m, n, k):
    return max(2.0 * m * n * k / BF16, 2.0 * (m * n + m * k + n * k) / BW) * 1000.0


def _one_site(m_lat: list[tuple[int, float, float]], n: int, k: int) -> GemmSites:
    """One GEMM op on one site of (m, latency, energy) rows, bf16."""
    one = np.array([1.0])
    return GemmSites(
        op_n=np.array([float(n)]),
        op_k=np.array([float(k)]),
        op_flops=np.array([BF16]),
        op_bpe=np.array([2.0]),
        op_num_sites=np.zeros(1, np.int64),
        op_sites=np.zeros((1, 4), np.int64),
        op_weights=np.zeros((1, 4)),
        site_off=np.array([0, len(m_lat)], np.int64),
        site_n=one * n,
        site_k=one * k,
        site_flops=one * BF16,
        site_bpe=one * 2.0,
        curve_m=np.array([float(r[0]) for r in m_lat]),
        curve_lat=np.array([r[1] for r in m_lat]),
        curve_en=np.array([r[2] if len(r) > 2 else 0.0 for r in m_lat]),
        **static_fp8_scales([GemmOp("g", n, k, "bfloat16")], None),
    )


def site_at(m_lat, n, k, m):
    return KG.site_lp(_one_site(m_lat, n, k), 0, float(m), BW)[0]


def gemm_le_at(m_lat, n, k, m):
    return KG.gemm_le(_one_site(m_lat, n, k), 0, float(m), BW)


def test_gemm_exact_hit_and_linear_m() -> None:
    n, k = 4096, 4096
    pts = [(16, 0.010), (32, 0.014), (64, 0.020), (128, 0.031)]
    assert site_at(pts, n, k, 32) == 0.014
    assert site_at(pts, n, k, 48) == pytest.approx(0.014 + (0.020 - 0.014) * 0.5, rel=1e-15)


def test_gemm_util_hold_is_median_of_3() -> None:
    n, k = 4096, 4096
    pts = [(16, 0.010), (32, 0.014), (64, 0.020), (128, 0.031), (256, 0.060)]
    for m, tail in ((4, pts[:3]), (1024, pts[-3:])):
        utils = sorted(gsol(mm, n, k) / lat for mm, lat in tail)
        want = gsol(m, n, k) / utils[1]
        assert site_at(pts, n, k, m) == pytest.approx(want, rel=1e-14)


def test_gemm_energy_blends_like_latency() -> None:
    """Blend power E / L per leaf (0 when unmeasured), weighted like the latency; energy =
    blend power x latency (an exact hit included)."""
    n, k = 4096, 4096
    pts = [
        (16, 0.010, 10.0),
        (32, 0.014, 0.0),
        (64, 0.020, 30.0),
        (128, 0.031, 31.0),
        (256, 0.060, 66.0),
    ]  # 1000 W, unmeasured, 1500 W, 1000 W, 1100 W
    for m, watts in ((64, 1500.0), (48, 750.0), (4, 1000.0), (1024, 1100.0)):
        lat, energy = gemm_le_at(pts, n, k, m)
        assert lat == site_at(pts, n, k, m)
        assert energy == pytest.approx(watts * lat, rel=1e-14), m


def _gemm_tables(sites: dict[tuple[int, int], float]):
    """A gemm family whose sites have constant utilisation u at every m (lat = SOL / u)."""
    ms = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    cols: dict[str, list] = {"gemm_dtype": [], "m": [], "n": [], "k": [], "latency": []}
    for (n, k), u in sites.items():
        for m in ms:
            cols["gemm_dtype"].append("bfloat16")
            cols["m"].append(m)
            cols["n"].append(n)
            cols["k"].append(k)
            cols["latency"].append(gsol(m, n, k) / u)
    return {k: np.array(v) for k, v in cols.items()}


def _tiny_model(h=1024, inter=2048, heads=8, kv=8, d=128, vocab=4096) -> ModelArch:
    return ModelArch(
        model_id="tiny",
        num_layers=2,
        num_attention_heads=heads,
        num_kv_heads=kv,
        head_dim=d,
        max_position_embeddings=4096,
        dtype_bytes=2,
        hidden_size=h,
        intermediate_size=inter,
        vocab_size=vocab,
        use_qk_norm=False,
    )


def _plan_gemm(gemm_cols):
    return SiteTable({"gemm": gemm_cols}, GpuSystem.from_dict(SYSTEM))


def test_gemm_idw_from_sites_within_two_octaves() -> None:
    # query (3000, 1024): sites at log2 distances; the far one (beyond 2 octaves) is ignored
    sites = {
        (2048, 1024): 0.5,
        (4096, 1024): 0.7,
        (2048, 2048): 0.6,
        (4096, 2048): 0.8,
        (1024, 512): 0.9,
        (65536, 1024): 0.1,
    }
    g = _plan_gemm(_gemm_tables(sites))
    num, ids, ws, _ = g.resolve("op", "bfloat16", 3000, 1024)
    near = sorted(
        ((math.hypot(math.log2(sn / 3000), math.log2(sk / 1024)), (sn, sk)) for sn, sk in sites),
        key=lambda x: x[0],
    )
    near = [x for x in near if x[0] <= 2.0][:4]
    assert [g.used[i][1:] for i in ids] == [s for _, s in near]
    want_u = sum(sites[s] / (d * d + 1e-12) for d, s in near) / sum(
        1 / (d * d + 1e-12) for d, _ in near
    )
    gw = np.zeros((1, 4))
    gw[0, :num] = ws
    gs = np.full((1, 4), -1, np.int64)
    gs[0, :num] = ids
    gemm = GemmSites(
        op_n=np.array([3000.0]),
        op_k=np.array([1024.0]),
        op_flops=np.array([BF16]),
        op_bpe=np.array([2.0]),
        op_num_sites=np.array([num], np.int64),
        op_sites=gs,
        op_weights=gw,
        **g.curves(),
        **static_fp8_scales([GemmOp("g", 3000, 1024, "bfloat16")], None),
    )
    got, energy = KG.gemm_le(gemm, 0, 100.0, BW)
    assert got == pytest.approx(gsol(100, 3000, 1024) / want_u, rel=1e-12)
    assert energy == 0.0  # the table has no power


def test_gemm_frontier_waiver_and_miss() -> None:
    sites = {(16384, 1024): 0.5, (65536, 1024): 0.7, (65536, 2048): 0.6}
    g = _plan_gemm(_gemm_tables(sites))
    # n = 400000 overflows n only (scale-up), k inside: gate lifted, 4 (here 3) nearest
    num, ids, _, text = g.resolve("logits_gemm", "bfloat16", 400000, 1024)
    assert "frontier" in text and num == 3
    assert g.used[ids[0]][1:] == (65536, 1024)
    with pytest.raises(OpTableError) as err:  # both axes overflow: a miss
        g.resolve("logits_gemm", "bfloat16", 400000, 16384)
    assert err.value.op == "logits_gemm" and "n=400000" in err.value.key
    with pytest.raises(OpTableError):  # scale-down beyond the gate: a miss
        g.resolve("x", "bfloat16", 64, 1024)
    num, ids, _, text = g.resolve("x", "bfloat16", 65536, 1024)
    assert num == 0 and text.endswith("site")


def _grid(leaves, energy=None, par=None) -> GridSlice:
    """A hand slice; `energy` maps a leaf key to its W*ms (default none)."""
    energy = {key: (energy or {}).get(key, 0.0) for key in leaves}
    return GridSlice(**csr_nest(leaves, energy), par=_par() if par is None else par)


def _par(n_kv=2.0, d=128.0):
    par = np.zeros(KA.PAR_SIZE)
    par[KA.PAR_NUM_KV_HEADS] = n_kv
    par[KA.PAR_HEAD_DIM] = d
    par[KA.PAR_KV_BYTES] = 2.0
    par[KA.PAR_FLOPS] = BF16
    par[KA.PAR_MEM_BW] = BW
    return par


def ctx_le(leaves, h, s, b, energy=None):
    return KA.grid_le(
        KA.KIND_CONTEXT,
        float(h),
        float(s),
        float(b),
        _grid(leaves, energy),
        np.zeros(8),
        np.zeros(8, np.int64),
    )


def ctx_lookup(leaves, h, s, b):
    return ctx_le(leaves, h, s, b)[0]


def csol(h, s, b):
    return KA.attention_sol_ms(KA.KIND_CONTEXT, float(h), float(s), float(b), _par())


CTX = {
    (16, 512, 1): 0.010,
    (16, 512, 2): 0.016,
    (16, 512, 4): 0.030,
    (16, 1024, 1): 0.025,
    (16, 1024, 2): 0.045,
    (32, 512, 1): 0.018,
    (32, 512, 2): 0.030,
    (32, 1024, 1): 0.050,
    (32, 1024, 2): 0.090,
}


def test_context_exact_hit_and_raw_batch_blend() -> None:
    assert ctx_lookup(CTX, 16, 1024, 2) == 0.045
    assert ctx_lookup(CTX, 16, 512, 3) == pytest.approx(0.016 + (0.030 - 0.016) * 0.5, rel=1e-15)


def test_context_sqrt_blend_along_seq_and_raw_along_heads() -> None:
    w = (768 - 512) / 512
    want16 = (math.sqrt(0.010) + (math.sqrt(0.025) - math.sqrt(0.010)) * w) ** 2
    assert ctx_lookup(CTX, 16, 768, 1) == pytest.approx(want16, rel=1e-14)
    want32 = (math.sqrt(0.018) + (math.sqrt(0.050) - math.sqrt(0.018)) * w) ** 2
    assert ctx_lookup(CTX, 24, 768, 1) == pytest.approx(want16 + (want32 - want16) * 0.5, rel=1e-14)


def test_context_ragged_bracket_rescales_the_survivor() -> None:
    # batch 3 exists between 2 and 4 at seq 512 only (staircase): seq 768 keeps the 512 branch
    want = (0.016 + (0.030 - 0.016) * 0.5) * csol(16, 768, 3) / csol(16, 512, 3)
    assert ctx_lookup(CTX, 16, 768, 3) == pytest.approx(want, rel=1e-14)


def test_context_energy_exact_verbatim_else_blended() -> None:
    energy = {k: 400.0 * lat for k, lat in CTX.items()}  # 400 W everywhere
    energy[(16, 512, 4)] = 0.0  # but one unmeasured leaf
    assert ctx_le(CTX, 16, 1024, 2, energy) == (0.045, energy[(16, 1024, 2)])
    lat, e = ctx_le(CTX, 16, 512, 3, energy)  # halfway between 400 W and 0 W
    assert e == pytest.approx(200.0 * lat, rel=1e-14)
    lat, e = ctx_le(CTX, 16, 768, 1, energy)  # both seq branches at 400 W
    assert e == pytest.approx(400.0 * lat, rel=1e-14)
    lat, e = ctx_le(CTX, 16, 768, 3, energy)  # ragged: the surviving branch's power
    assert e == pytest.approx(200.0 * lat, rel=1e-14)


def test_context_multi_axis_hold_tapered_shepard() -> None:
    h, s, b = 16, 4096, 8  # far beyond every axis: hold over the 4 nearest leaves
    q = np.log2([h, s, b])
    dist = sorted((float(np.sqrt(((np.log2(k) - q) ** 2).sum())), k) for k in CTX)
    radius = dist[4][0]
    num = den = 0.0
    for d, k in dist[:4]:
        w = ((radius - d) / (radius * d)) ** 2
        num += w * csol(*k) / CTX[k]
        den += w
    assert ctx_lookup(CTX, h, s, b) == pytest.approx(csol(h, s, b) / (num / den), rel=1e-13)


def test_generation_five_sample_average() -> None:
    leaves = {(16, 1, kv): 0.01 + 1e-5 * kv**0.5 for kv in (512, 1024, 2048)}
    leaves.update({(16, 2, kv): 0.012 + 2e-5 * kv**0.5 for kv in (512, 1024, 2048)})
    grid = _grid(leaves)
    scratch = (np.zeros(8), np.zeros(8, np.int64))

    def one(b, kv):
        return KA.grid_le(KA.KIND_GENERATION, 16.0, float(b), float(kv), grid, *scratch)[0]

    s = 1100
    samples = [990 + ((1210 - 990) * i) // 4 for i in range(5)]
    assert samples == [990, 1045, 1100, 1155, 1210]
    want = sum(one(1, kv) for kv in samples) / 5
    got = KA.generation_5sample_le(16.0, 1.0, float(s), grid, *scratch)[0]
    assert got == pytest.approx(want, rel=1e-15)
    # measured points do not come back exactly
    assert KA.generation_5sample_le(16.0, 1.0, 1024.0, grid, *scratch)[0] != leaves[(16, 1, 1024)]
    # raw linear between kv brackets
    assert one(2, 768) == pytest.approx(
        (leaves[(16, 2, 512)] + leaves[(16, 2, 1024)]) / 2, rel=1e-15
    )


def test_allreduce_curve_and_edge_hold() -> None:
    x = np.array([128.0, 256.0, 512.0])
    y = np.array([0.005, 0.006, 0.008])
    en = np.array([5.0, 4.8, 0.0])  # W*ms: 1000 W, 800 W, unmeasured
    curve = Curve(x, y, en)

    def at(e, gpus=4.0):
        return KC.allreduce_le(e, curve, gpus, 2.0, 900e9)

    assert at(256.0) == (0.006, 4.8)  # an exact hit carries the leaf's energy
    lat, energy = at(192.0)
    assert lat == pytest.approx(0.0055) and energy == pytest.approx(900.0 * lat)
    # an unmeasured neighbour blends as 0 W
    lat, energy = at(384.0)
    assert lat == pytest.approx(0.007) and energy == pytest.approx(400.0 * lat)
    sol = lambda e: 2 * e * 2 * 0.75 / 900e9 * 1e3  # noqa: E731
    assert at(4096.0)[0] == pytest.approx(sol(4096) / (sol(512) / 0.008), rel=1e-14)
    assert at(4096.0)[1] == 0.0  # held on the unmeasured edge
    lat, energy = at(16.0)
    assert lat == pytest.approx(sol(16) / (sol(128) / 0.005), rel=1e-14)
    assert energy == pytest.approx(1000.0 * lat, rel=1e-14)
    assert at(4096.0, gpus=1.0) == (0.0, 0.0)


def test_memory_op_and_extras_constants() -> None:
    """add_norm at 1024 tokens, h 5120 is 9.809 us/layer; Qwen3 decode extra 26.403 us."""
    tables, system = _compiled_tables("vllm", "0.24.0")
    plan = build_dense_plan(
        load_model("Qwen/Qwen3-32B"), tables, system, Deployment("vllm", "0.24.0", tensor=4)
    )
    c = scalars_of(plan.arrays)
    assert c.gen_extra_ms == pytest.approx(0.026403, abs=5e-7)
    assert c.ctx_extra_ms == pytest.approx(0.039605, abs=5e-7)
    bd = dict(PassPricer(plan).prefill_breakdown(1, 1024, 0))
    assert bd["context_add_norm_1"] / 64 == pytest.approx(0.009809, abs=5e-7)

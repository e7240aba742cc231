"""database_mode EMPIRICAL (docs/timing.md 4.9): the util lookup against its plain-Python
reference, the plan's GEMM pruning against the full table, AISimulate's pass totals, refusals."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from aisim.errors import AisimError
from aisim.estimate import estimate
from aisim.kernels import optime_empirical as KE
from aisim.kernels import optime_moe as KM
from aisim.timing.leaf_empirical import _record, _samples
from aisim.timing.tables import load_tables
from tests.reference import util_empirical as ref

CONFIG = """\
traffic:
  source: {{type: synthetic, input_tokens: 1000, output_tokens: 2}}
  load: {{type: concurrency, concurrency: 1}}
  stop: {{requests: 1}}
engine:
  mode: aggregated
  model: {model}
  hardware: {hardware}
  backend: {backend}
  database_mode: EMPIRICAL
  {extra}
  workers:
    aggregated:
      parallelism: {parallelism}
      scheduler: {{max_batched_tokens: 8192, max_sequences: 256}}
      kv_cache: {{block_size: 64, prefix_caching: true, capacity: {{type: fixed, blocks: 16384}}}}
      timing: {{type: default}}
"""


def _config(tmp_path: Path, **kw) -> str:
    values = {
        "model": "Qwen/Qwen3-32B",
        "hardware": "b200_sxm",
        "backend": "vllm",
        "parallelism": "{tensor: 4}",
        "extra": "",
    } | kw
    path = tmp_path / "cfg.yaml"
    path.write_text(CONFIG.format(**values))
    return str(path)


def _totals(path: str, prefill: str = "1x1000", decode: str = "1x1001") -> list[float]:
    result = estimate(path, (), (prefill,), (decode,))
    return [p["total_ms"] for p in result["passes"]]


# AISimulate 0.13, `predict --detail time` of the one-request config above: phase latencies
ORACLE = {
    "b200 vLLM TP4": ({}, [23.319966137755536, 7.417134876749383]),
    # fp8_block has no rows of its own in vLLM 0.24.0: the fp8 rows calibrate it (xquant)
    "b200 vLLM TP4 FP8": ({"model": "Qwen/Qwen3-32B-FP8"}, [23.390812423709654, 9.487963403056337]),
    # rtx_pro measures a GEMM below its SOL: the table's SOL clamp caps that util at 1
    "rtx_pro vLLM TP4": (
        {"hardware": "rtx_pro_6000_server"},
        [128.03047977545856, 15.867812597650973],
    ),
    # enable_shared_layer: true by name: the samples are the merged tables SILICON reads
    "b200 vLLM TP4 shared layer": (
        {"extra": "enable_shared_layer: true"},
        [23.31864815350015, 7.427746049718314],
    ),
    # vLLM 0.31.0 has no GEMM rows of its own on b200: priced from the shared layer only
    "b200 vLLM 0.31.0 TP4 shared layer": (
        {"extra": 'enable_shared_layer: true\n  backend_version: "0.31.0"'},
        [23.261907677418947, 7.419177578831315],
    ),
    # MoE: the routed experts at SOL / util, the dispatch's custom allreduce from the TP lookup
    "b200 vLLM Qwen3-30B-A3B TP4 EP4": (
        {"model": "Qwen/Qwen3-30B-A3B", "parallelism": "{tensor: 4, moe_expert: 4}"},
        [10.912873040898493, 4.2563585582682855],
    ),
    "b200 TRT-LLM Qwen3-30B-A3B TP4 EP4": (
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "backend": "trtllm",
            "parallelism": "{tensor: 4, moe_expert: 4}",
        },
        [12.609853731894926, 4.748966563231762],
    ),
    # NVFP4 experts: a decode of at most 128 tokens reads the min-latency kernel's samples
    "b200 TRT-LLM Qwen3-235B-A22B-NVFP4 TP8 EP8": (
        {
            "model": "nvidia/Qwen3-235B-A22B-NVFP4",
            "backend": "trtllm",
            "parallelism": "{tensor: 8, moe_expert: 8}",
        },
        [31.622673532340205, 9.588883198692361],
    ),
    # attention-DP: the NCCL dispatch and combine at SOL / util over their own curves
    "b200 vLLM Qwen3-30B-A3B DP4 EP4": (
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "parallelism": "{tensor: 1, attention_data: 4, moe_expert: 4}",
        },
        [18.75053640203744, 5.280823252131331],
    ),
}


@pytest.mark.parametrize("case", sorted(ORACLE))
def test_pass_totals_match_aisimulate(tmp_path: Path, case: str) -> None:
    kw, want = ORACLE[case]
    got = _totals(_config(tmp_path, **kw))
    assert got == pytest.approx(want, rel=1e-12, abs=0.0)


def _random_samples(rng: random.Random, dims: int, n: int) -> list:
    grid = [sorted(rng.sample([1, 2, 3, 4, 8, 16, 64, 100, 512, 4096], 5)) for _ in range(dims)]
    samples = []
    for _ in range(n):
        c = tuple(float(rng.choice(axis)) for axis in grid)
        samples.append((c, rng.uniform(0.01, 5.0)))
    return samples


def _sol(c) -> float:
    out = 1e-3
    for v in c:
        out *= v
    return out


def test_util_lookup_matches_reference_on_random_grids() -> None:
    """Duplicate coordinates (the first wins a tie), exact hits, queries inside and beyond
    the samples on every axis, 1 to 3 axes."""
    rng = random.Random(5)
    for trial in range(60):
        dims = 1 + trial % 3
        samples = _random_samples(rng, dims, rng.randint(1, 25))
        lookup = _samples([c for c, _ in samples], [lat for _, lat in samples], _sol)
        grids = _record([lookup], np.full(KE.SLOT_SIZE, -1, np.int64))
        for _ in range(20):
            if rng.random() < 0.3:
                q = samples[rng.randrange(len(samples))][0]
            else:
                values = [0.5, 1.0, 3.0, 7.0, 50.0, 900.0, 10000.0]
                q = tuple(rng.choice(values) for _ in range(dims))
            padded = list(q) + [1.0] * (3 - dims)
            got = KE.util_at(grids, 0, *padded)
            assert got == pytest.approx(ref.util(samples, _sol, q), rel=1e-12), (samples, q)


def test_gemm_lookups_keep_every_possible_neighbour(tmp_path: Path) -> None:
    """The plan prunes each GEMM op's samples to those its fixed (n, k) allows; its latencies
    equal the reference over every bf16 row of the table (SOL-clamped as loaded)."""
    from aisim.config import load_config
    from aisim.estimate import _role_spec
    from aisim.timing.pricer import PassPricer
    from aisim.timing.provider import plan_for

    cfg = load_config(_config(tmp_path), ())
    plan = plan_for(_role_spec(cfg, None), "test")
    tables, system = load_tables("b200_sxm", "vllm", "0.24.0")
    g = tables["gemm"]
    own = (g["gemm_dtype"] == "bfloat16") & (g["src"] == 0)
    rows: dict[tuple, float] = {}
    for m, n, k, lat in zip(g["m"][own], g["n"][own], g["k"][own], g["latency"][own], strict=True):
        rows.setdefault((float(m), float(n), float(k)), float(lat))
    flops, bw = system.flops["bfloat16_tc_flops"], system.mem_bw

    def sol(c):
        m, n, k = c
        return max(2.0 * m * n * k / flops, 2.0 * (m * n + m * k + n * k) / bw) * 1000.0

    samples = [(c, max(lat, sol(c))) for c, lat in sorted(rows.items())]
    qkv = plan.op_names.index("context_qkv_gemm")
    pricer = PassPricer(plan)
    for tokens in (1, 7, 100, 333, 1000, 2500, 9000, 70000):
        pricer.prefill(1, tokens)
        want = ref.latency(samples, sol, (float(tokens), 2560.0, 5120.0)) * 64
        assert pricer.ms[qkv] == pytest.approx(want, rel=1e-12), tokens


REFUSED = {
    "mla": ({"model": "deepseek-ai/DeepSeek-V3", "parallelism": "{tensor: 8}"}, "EMPIRICAL"),
    "moe tp x dp": (
        {
            "model": "Qwen/Qwen3-30B-A3B",
            "parallelism": "{tensor: 2, attention_data: 2, moe_expert: 4}",
        },
        "both tensor- and data-parallel",
    ),
    "static fp8": (
        {"model": "nvidia/Llama-3.1-70B-Instruct-FP8"},
        "per-tensor static fp8 GEMMs",
    ),
    "no xquant": (
        {"model": "Qwen/Qwen3-32B-FP8", "extra": "transfer_policy: conservative"},
        "transfer_policy excludes xquant",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unestimated_deployments_are_refused(tmp_path: Path, case: str) -> None:
    kw, text = REFUSED[case]
    with pytest.raises(AisimError) as err:
        _totals(_config(tmp_path, **kw))
    assert text in str(err.value) and "\n" not in str(err.value)


def test_moe_roofline_floors_like_the_reference() -> None:
    """Integer floors in every division: a decode of fewer routed tokens than expert ranks
    reads no activations and no weights."""
    rng = random.Random(7)
    for _ in range(400):
        case = dict(
            tokens=rng.choice([1, 2, 3, 5, 7, 63, 129, 1000, 16385, 70001]),
            topk=rng.choice([1, 2, 8]),
            hidden=rng.choice([2048, 4096, 7168]),
            inter=rng.choice([768, 1536, 14336]),
            experts=rng.choice([8, 128, 256]),
            moe_tp=rng.choice([1, 2, 4]),
            moe_ep=rng.choice([1, 3, 8, 16]),
            gemms=rng.choice([2, 3]),
            bytes_per_elem=rng.choice([2.0, 1.0, 0.5625]),
            flops=2.25e15,
            mem_bw=8e12,
        )
        par = np.zeros(KM.MOE_PAR_SIZE)
        par[KM.MOE_TOPK] = case["topk"]
        par[KM.MOE_HIDDEN] = case["hidden"]
        par[KM.MOE_INTER] = case["inter"]
        par[KM.MOE_EXPERTS] = case["experts"]
        par[KM.MOE_TP] = case["moe_tp"]
        par[KM.MOE_EP] = case["moe_ep"]
        par[KM.MOE_GATED] = case["gemms"]
        par[KM.MOE_BPE] = case["bytes_per_elem"]
        par[KM.MOE_FLOPS] = case["flops"]
        par[KM.MOE_MEM_BW] = case["mem_bw"]
        got = KM.moe_sol_ms(float(case["tokens"]), par)
        assert got == pytest.approx(ref.moe_sol_ms(**case), rel=1e-15), case

"""Op-level pricing of DeepSeek-V3.2 (MLA + DSA + MoE) per attention-DP rank (docs/timing.md 3.5).

Golden figures: AISimulate 0.13.0 via shared/reference/optable_golden.json, pinned in
tests/golden_optable/deepseek_v32_adp8_ep8.json; every case is priced through `aisim estimate`
(the CLI the user runs), per op and in total, within 1e-9 relative.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from aisim.cli import main

HERE = Path(__file__).parent
GOLDEN = json.loads((HERE / "golden_optable" / "deepseek_v32_adp8_ep8.json").read_text())
REL = 1e-9

CONFIG = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 128}
  stop: {requests: 256}
engine:
  mode: aggregated
  model: deepseek-ai/DeepSeek-V3.2
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 1, pipeline: 1, attention_data: 8, moe_tensor: 1,
                    moe_expert: 8}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""


@cache
def _config_path() -> str:
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="aisim-dsv32-"))
    path = folder / "dsv32.yaml"
    path.write_text(CONFIG)
    return str(path)


def _estimate(*args: str) -> dict:
    res = CliRunner().invoke(main, ["estimate", "-c", _config_path(), *args, "--format", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _close(got: float, ref: float) -> bool:
    return abs(got - ref) <= REL * abs(ref)


def _rank_ms(rank: list[int]) -> float:
    """One rank's FPM: prefill, decode, or the FPM API's 3-pass mixed composition."""
    n_p, new_sum, kv_sum, n_d, ctx_sum = rank
    args = []
    if n_p:
        new, prefix = new_sum // n_p, kv_sum // n_p
        args += ["--prefill", f"{n_p}x{new}" + (f"+{prefix}" if prefix else "")]
    if n_d:
        args += ["--decode", f"{n_d}x{ctx_sum // n_d}"]
    if not args:
        return 0.0
    out = _estimate(*args)
    if n_p and n_d:
        return out["mixed"][0]["fpm_3pass_ms"]
    return out["passes"][0]["total_ms"]


CASES = sorted(GOLDEN["cases"])


@pytest.mark.golden
@pytest.mark.parametrize("case", CASES)
def test_golden_group_pass(case: str) -> None:
    c = GOLDEN["cases"][case]
    got = max(_rank_ms(r) for r in c["ranks"])  # the group pass ends at the slowest rank
    assert _close(got, c["latency_ms"]), (got, c["latency_ms"])


@pytest.mark.golden
@pytest.mark.parametrize("case", sorted(GOLDEN["per_op_breakdown"]))
def test_golden_per_op(case: str) -> None:
    c = GOLDEN["per_op_breakdown"][case]
    if "prefill" in c:
        b, isl, prefix = c["prefill"]
        out = _estimate("--prefill", f"{b}x{isl - prefix}")
    else:
        b, ctx = c["decode"]
        out = _estimate("--decode", f"{b}x{ctx}")
    (ps,) = out["passes"]
    got = {o["op"]: o["ms"] for o in ps["ops"]}
    assert sorted(got) == sorted(c["ops"])
    for name, ref in c["ops"].items():
        assert _close(got[name], ref) or abs(got[name] - ref) < 1e-15, (name, got[name], ref)
    assert _close(ps["total_ms"], sum(c["ops"].values()))


def test_decode_overlap_groups() -> None:
    """generation_moe_overlap = max(routed branch, shared expert), each a per-layer sum x 61."""
    groups = GOLDEN["decode16_moe_overlap_groups_ms"]
    out = _estimate("--decode", "16x1100")
    (ps,) = out["passes"]
    got = {o["op"]: o["ms"] for o in ps["ops"]}["generation_moe_overlap"]
    a = groups["group_a_router+pre_dispatch+moe+post_dispatch"]["sum"]
    b = groups["group_b_shared_expert"]["sum"]
    assert abs(got - max(a, b)) < 1e-5 * max(a, b)  # the pinned group sums carry 5 decimals


def test_missing_slice_is_named(tmp_path: Path) -> None:
    """enable_shared_layer: false drops the 0.25.0 donor rows: no fp8_block GEMM slice, one
    clear line naming it (AISimulate fails the same way, docs/timing.md 2.2)."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(CONFIG.replace("enable_shared_layer: true", "enable_shared_layer: false"))
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), "--decode", "8x1100"])
    assert res.exit_code == 2
    text = res.output.strip()
    assert "fp8_block" in text and "shared_gate_up_gemm" in text, text
    assert "Traceback" not in text and len(text.splitlines()) == 1


def test_validate_refuses_the_missing_slice_predict_refuses(tmp_path: Path) -> None:
    """validate builds the op plan predict would build: a table miss is not an "ok"."""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(CONFIG.replace("enable_shared_layer: true", "enable_shared_layer: false"))
    lines = []
    for command in (["validate"], ["predict", "-o", str(tmp_path / "out")]):
        res = CliRunner().invoke(main, [*command, "-c", str(cfg)])
        assert res.exit_code == 2, res.output
        lines.append(res.output.strip())
    assert lines[0] == lines[1] and "fp8_block" in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_unsupported_combination_is_named(tmp_path: Path) -> None:
    """A MoE group of 12 GPUs (attention_data 12 x moe_expert 12, across two nodes): the data
    has no moe_ep 12 slice (AISimulate fails on the same MoeKey); aisim names it in one line.
    (16-GPU groups are priced: tests/test_moe_multinode.py.)"""
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(
        CONFIG.replace("backend: vllm", "backend: trtllm")
        .replace('backend_version: "0.24.0"', 'backend_version: "1.3.0rc20"')
        .replace("deepseek-ai/DeepSeek-V3.2", "deepseek-ai/DeepSeek-R1")
        .replace(
            "tensor: 1, pipeline: 1, attention_data: 8",
            "tensor: 1, pipeline: 1, attention_data: 12",
        )
        .replace("moe_expert: 8", "moe_expert: 12")
    )
    res = CliRunner().invoke(main, ["estimate", "-c", str(cfg), "--decode", "8x1100"])
    assert res.exit_code == 2
    text = res.output.strip()
    assert "moe_ep=12" in text and "MoE perf data missing" in text, text
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert len(text.splitlines()) == 1


# Single-request AISimulate runs (1 x 1024 prompt, 3 output tokens, replicas 1): TTFT =
# PREFILL(1, 1024, 0) and the first inter-token gap = DECODE(1, 1025), both rounded to whole ns
# by the pass clock. (backend, model, tensor, attention_data, moe_tensor, moe_expert) ->
# (ttft, ttst).
ANCHORS = {
    ("vllm", "Qwen/Qwen3-30B-A3B", 1, 1, 1, 1): (17.775728, 4.01788),
    ("vllm", "Qwen/Qwen3-30B-A3B", 1, 2, 1, 2): (16.535754, 4.949464),
    ("vllm", "Qwen/Qwen3-30B-A3B", 2, 1, 1, 2): (14.148274, 4.38646),
    ("vllm", "deepseek-ai/DeepSeek-V3", 1, 8, 1, 8): (201.299273, 15.766182),
    ("vllm", "deepseek-ai/DeepSeek-V3.2", 1, 8, 1, 8): (241.766673, 18.401382),
    ("trtllm", "Qwen/Qwen3-30B-A3B", 1, 1, 1, 1): (19.527742, 4.580884),
    ("trtllm", "Qwen/Qwen3-30B-A3B", 1, 2, 1, 2): (19.10031, 5.691873),
    ("trtllm", "Qwen/Qwen3-30B-A3B", 2, 1, 1, 2): (14.408254, 4.735238),
    ("trtllm", "deepseek-ai/DeepSeek-V3.2", 1, 8, 1, 8): (100.313445, 17.999537),
    ("trtllm", "deepseek-ai/DeepSeek-V3", 1, 8, 1, 8): (89.835297, 15.779137),
    ("trtllm", "deepseek-ai/DeepSeek-R1", 1, 8, 1, 8): (89.835297, 15.779137),
    ("trtllm", "deepseek-ai/DeepSeek-V3", 8, 1, 1, 8): (36.746069, 6.939619),
    ("trtllm", "deepseek-ai/DeepSeek-R1", 4, 1, 1, 4): (51.756966, 8.391883),
    ("vllm", "Qwen/Qwen3-235B-A22B", 1, 8, 1, 8): (111.707902, 17.002452),
    ("vllm", "Qwen/Qwen3-235B-A22B", 8, 1, 1, 8): (31.943534, 9.052808),
}
VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}


@pytest.mark.golden
@pytest.mark.parametrize("key", sorted(ANCHORS), ids=lambda k: "-".join(map(str, k)))
def test_single_request_anchors(key: tuple, tmp_path: Path) -> None:
    backend, model, tp, dp, mtp, mep = key
    cfg = tmp_path / "anchor.yaml"
    text = CONFIG.replace("backend: vllm", f"backend: {backend}").replace(
        '"0.24.0"', f'"{VERSIONS[backend]}"'
    )
    cfg.write_text(
        text.replace("deepseek-ai/DeepSeek-V3.2", model).replace(
            "tensor: 1, pipeline: 1, attention_data: 8, moe_tensor: 1,\n                    "
            "moe_expert: 8",
            f"tensor: {tp}, pipeline: 1, attention_data: {dp}, moe_tensor: {mtp}, "
            f"moe_expert: {mep}",
        )
    )
    res = CliRunner().invoke(
        main,
        [
            "estimate",
            "-c",
            str(cfg),
            "--prefill",
            "1x1024",
            "--decode",
            "1x1025",
            "--format",
            "json",
        ],
    )
    assert res.exit_code == 0, res.output
    (mixed,) = json.loads(res.stdout)["mixed"]
    ttft, ttst = ANCHORS[key]
    assert mixed["prefill_ns"] == round(ttft * 1e6)
    assert mixed["decode_ns"] == round(ttst * 1e6)


@pytest.mark.parametrize(
    ("model_type", "extra", "name"),
    [
        # Phi-3.5-MoE: its own expert graph, not one AISimulate's tables were checked for
        ("phimoe", {"num_local_experts": 16}, "phimoe"),
        # Qwen2-MoE: a shared expert beside the routed ones
        ("qwen2_moe", {"num_experts": 60, "shared_expert_intermediate_size": 5632}, "qwen2_moe"),
    ],
)
def test_moe_architectures_outside_the_priced_graph_are_refused(
    tmp_path: Path, model_type: str, extra: dict, name: str
) -> None:
    raw = json.loads(
        (Path(__file__).parents[1] / "data/models/Qwen--Qwen3-30B-A3B_config.json").read_text()
    )
    raw.pop("num_experts")
    raw.update(model_type=model_type, **extra)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    from tests.analysis_configs import OP_LEVEL

    cfg = tmp_path / "c.yaml"
    cfg.write_text(OP_LEVEL.replace("Qwen/Qwen3-32B", str(tmp_path / "config.json")))
    res = CliRunner().invoke(main, ["predict", "-c", str(cfg)])
    assert res.exit_code == 2, res.output
    assert f"({name} MoE architecture) is not available yet" in res.output
    assert "Mixtral" in res.output and len(res.output.strip().splitlines()) == 1


def test_kimi_k2_trtllm_context_mla_block_reads_deepseeks_kernel_rows() -> None:
    """Kimi-K2 (64 heads) on TRT-LLM at attention-DP 8: AISimulate reads the context MLA kernel
    at DeepSeek-V3's 128 heads and the block's GEMMs at 64; its one-request run of 1,024 new
    tokens reports context_mla_block 13.612451633245318 ms (reading the 64-head kernel rows
    would give 10.90 ms)."""
    cfg = Path(__file__).parent / "golden" / "mla-kimi-k2-trtllm-dp8-ep8" / "config.yaml"
    res = CliRunner().invoke(
        main, ["estimate", "-c", str(cfg), "--prefill", "1x1024", "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    ops = {op["op"]: op["ms"] for op in json.loads(res.stdout)["passes"][0]["ops"]}
    assert ops["context_mla_block"] == pytest.approx(13.612451633245318, rel=1e-12)


def test_glm5_with_bf16_weights_is_priced(tmp_path: Path) -> None:
    """bf16 GLM-5 (the FP8 config without its quantization_config) passes validation; its
    figures are pinned by the dsa-glm5-bf16-* goldens. A precision outside block-fp8 and bf16
    (here NVFP4 experts declared in the config) is refused in one line."""
    golden = Path(__file__).parent / "golden" / "dsa-glm5-fp8-vllm-dp8-ep8" / "config.yaml"
    raw = json.loads(
        (Path(__file__).parents[1] / "data/models/zai-org--GLM-5-FP8_config.json").read_text()
    )
    quant = raw.pop("quantization_config")
    for name, config in (("bf16", raw), ("nvfp4", {**raw, "quantization_config": quant})):
        folder = tmp_path / name
        folder.mkdir()
        if name == "nvfp4":
            config["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4"}
        (folder / "config.json").write_text(json.dumps(config))
        cfg = tmp_path / f"{name}.yaml"
        cfg.write_text(golden.read_text().replace("zai-org/GLM-5-FP8", str(folder)))
        res = CliRunner().invoke(main, ["validate", "-c", str(cfg)])
        if name == "bf16":
            assert res.exit_code == 0, res.output
        else:
            assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output

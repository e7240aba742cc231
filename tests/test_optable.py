"""The compiled op-time tables: source resolution, first-row-wins, sorting, determinism, loading.

Self-contained: a tiny silicon tree with the real schemas is written to a tmp dir (the committed
data/optables is checked in tests/test_optable_committed.py).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.errors import OpTableError
from aisim.optable import load_optable
from aisim.optable.build import build_optables
from aisim.optable.resolve import resolve_sources, version_key

HW = "b200_sxm"
PROV = {"framework": "X", "device": "NVIDIA B200", "op_name": "op"}


def _pq(path: Path, version: str, rows: list[dict]) -> None:
    """Write rows with provenance columns; ints as int64, floats as double, str as string."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(PROV) + ["version"] + [k for k in rows[0] if k not in PROV]
    cols = {}
    for n in names:
        vals = [r.get(n, PROV.get(n, version if n == "version" else None)) for r in rows]
        typ = (
            pa.string()
            if isinstance(vals[0], str)
            else pa.float64()
            if isinstance(vals[0], float)
            else pa.int64()
        )
        cols[n] = pa.array(vals, typ)
    pq.write_table(pa.table(cols), path)


def _yaml(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _reuse(table: str, donor: str) -> str:
    return (
        f"schema_version: 1\nreuse:\n- table: {table}\n  from_version: '{donor}'\n"
        "  reason: test\n  approved_by: test\n"
    )


def _gemm(dtype, m, n, k, lat, ks="torch.nn.functional.linear"):
    return {"kernel_source": ks, "gemm_dtype": dtype, "m": m, "n": n, "k": k, "latency": lat}


def _attn(ks, b, isl, nh, nkv, hd, lat, step=0, kv="bfloat16"):
    return {
        "kernel_source": ks,
        "batch_size": b,
        "isl": isl,
        "num_heads": nh,
        "num_key_value_heads": nkv,
        "head_dim": hd,
        "beam_width": 1,
        "attn_dtype": "bfloat16",
        "kv_cache_dtype": kv,
        "step": step,
        "window_size": 0,
        "latency": lat,
    }


def _ar(ks, gpus, size, lat):
    return {
        "kernel_source": ks,
        "allreduce_dtype": "bfloat16",
        "num_gpus": gpus,
        "message_size": size,
        "latency": lat,
        "backend": ks.replace("vLLM_custom", "vllm"),
    }


def _moe(ks, tokens, lat, dtype="nvfp4"):
    return {
        "kernel_source": ks,
        "moe_dtype": dtype,
        "num_tokens": tokens,
        "hidden_size": 4096,
        "inter_size": 1024,
        "topk": 8,
        "num_experts": 64,
        "moe_tp_size": 1,
        "moe_ep_size": 1,
        "distribution": "balanced",
        "latency": lat,
        "power": 500.0,
        "power_limit": 1000.0,
    }


def make_tree(root: Path) -> Path:
    """A miniature silicon tree: a reuse.yaml donor, earlier siblings, a later version, a
    cross-backend kernel, eager allreduce rows, duplicate keys and an INCOMPLETE sibling."""
    d = root / HW
    _yaml(
        root / f"{HW}.yaml",
        "data_dir: data/b200_sxm\ngpu:\n  mem_bw: 7700000000000\n"
        "  bfloat16_tc_flops: 2250000000000000\nnode:\n  num_gpus_per_node: 8\n"
        "misc:\n  nccl_mem:\n    1: 0\n    8: 411041792\n  nccl_version: '2.27.3'\n",
    )
    _yaml(
        root / "perf_data_reuse_manifest.yaml",
        "groups:\n- op_file: gemm_perf.parquet\n  kernel_source: shared_k\n  tier: shared\n"
        "  frameworks: [trtllm, vllm]\n- op_file: gemm_perf.parquet\n  kernel_source: only_trt\n"
        "  tier: shared\n  frameworks: [trtllm]\n",
    )
    _yaml(root / "LICENSE-test.txt", "Apache License 2.0 (test copy)\n")
    g = d / "gemm" / "vllm"
    _pq(
        g / "0.24.0/gemm_perf.parquet",
        "0.24.0",
        [
            _gemm("bfloat16", 2, 64, 64, 2.0),
            _gemm("bfloat16", 1, 64, 64, 1.0),
            _gemm("bfloat16", 1, 64, 64, 9.0),  # duplicate key in the same file: first row wins
            _gemm("awq", 1, 64, 64, 5.0),
        ],
    )  # quant AISimulate does not model: dropped
    _yaml(g / "0.24.0/reuse.yaml", _reuse("gemm_perf", "0.25.0"))
    _yaml(g / "0.24.0/collection_meta.yaml", "schema_version: 1\ntables: {gemm_perf: {}}\n")
    _pq(
        g / "0.25.0/gemm_perf.parquet",
        "0.25.0",
        [
            _gemm("bfloat16", 1, 64, 64, 7.0),  # loses to the primary
            _gemm("fp8_block", 1, 128, 64, 3.0, "DeepGemm"),
        ],
    )  # only the donor has it
    _pq(
        g / "0.22.0/gemm_perf.parquet",
        "0.22.0",
        [_gemm("bfloat16", 4, 64, 64, 4.0), _gemm("fp8_block", 1, 128, 64, 8.0)],
    )
    _pq(g / "0.19.0/gemm_perf.parquet", "0.19.0", [_gemm("bfloat16", 8, 64, 64, 6.0)])
    _yaml(g / "0.19.0/INCOMPLETE.txt", "partial\n")  # vetoed: never a source
    _pq(g / "0.27.1/gemm_perf.parquet", "0.27.1", [_gemm("bfloat16", 16, 64, 64, 0.5)])
    _pq(
        d / "gemm/trtllm/1.3.0rc20/gemm_perf.parquet",
        "1.3.0rc20",
        [
            _gemm("bfloat16", 32, 64, 64, 0.25, "shared_k"),
            _gemm("bfloat16", 64, 64, 64, 0.5, "only_trt"),
        ],
    )
    a = d / "attention" / "vllm"
    _pq(
        a / "0.24.0/context_attention_perf.parquet",
        "0.24.0",
        [
            _attn("lane_b", 1, 16, 16, 2, 128, 0.3),
            _attn("lane_a", 1, 16, 16, 2, 128, 0.2),
            _attn("lane_a", 2, 16, 8, 8, 128, 0.4),
            _attn("", 1, 32, 16, 2, 128, 0.5),
        ],
    )
    _pq(
        a / "0.22.0/context_attention_perf.parquet",
        "0.22.0",
        [_attn("lane_a", 1, 16, 16, 2, 128, 9.9), _attn("lane_c", 1, 16, 16, 2, 128, 0.6)],
    )
    _pq(
        a / "0.24.0/generation_attention_perf.parquet",
        "0.24.0",
        [
            _attn("lane_a", 4, 1, 16, 2, 128, 0.01, step=1023),
            _attn("lane_a", 4, 1, 16, 2, 128, 0.02, step=3),
        ],
    )
    c = d / "comm" / "vllm"
    _pq(
        c / "0.24.0/custom_allreduce_perf.parquet",
        "0.24.0",
        [
            _ar("vLLM_custom_graph", 4, 8192, 0.007),
            _ar("vLLM_custom_eager", 4, 8192, 0.02),
            _ar("vLLM_custom_eager", 4, 4096, 0.03),
        ],
    )
    _pq(
        c / "0.19.0/custom_allreduce_perf.parquet",
        "0.19.0",
        [_ar("vLLM_custom_graph", 4, 8192, 0.9), _ar("vLLM_custom_graph", 4, 4096, 0.006)],
    )
    _pq(
        c / "0.25.0/custom_allreduce_perf.parquet",
        "0.25.0",
        [_ar("vLLM_custom_graph", 8, 1024, 0.1)],
    )
    _yaml(c / "0.24.0/reuse.yaml", _reuse("custom_allreduce_perf", "0.25.0"))  # comm: ignored
    nccl = [
        {
            "kernel_source": "NCCL",
            "nccl_dtype": "half",
            "num_gpus": 8,
            "message_size": 256,
            "latency": v,
        }
        for v in (0.02336, 0.02175, 0.02344)
    ]
    for r, op in zip(nccl, ("all_gather", "all_gather", "all_gather"), strict=True):
        r["op_name"] = op
    _pq(d / "comm/nccl/2.27.3/nccl_perf.parquet", "2.29.2", nccl)
    _pq(d / "comm/nccl/2.28.9/nccl_perf.parquet", "2.28.9", [dict(nccl[0], latency=1.0)])
    for v in ("1.3.0rc9", "1.3.0rc10", "1.2.0rc5"):
        _pq(
            d / f"comm/trtllm/{v}/custom_allreduce_perf.parquet",
            v,
            [
                {
                    "kernel_source": "TRTLLM",
                    "allreduce_dtype": "bfloat16",
                    "num_gpus": 2,
                    "message_size": 128,
                    "latency": 0.001,
                    "implementation": "trtllm",
                }
            ],
        )
    _pq(
        d / "comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet",
        "1.3.0rc20",
        [
            {
                "kernel_source": "TRTLLM",
                "allreduce_dtype": "bfloat16",
                "num_gpus": 4,
                "message_size": 128,
                "latency": 0.002,
                "implementation": "trtllm",
                "power": 300.0,
                "power_limit": 1000.0,
            }
        ],
    )
    _pq(
        d / "moe/trtllm/1.3.0rc20/moe_perf.parquet",
        "1.3.0rc20",
        [
            _moe("moe_torch_flow_min_latency", 16, 0.1),
            _moe("moe_torch_flow_cutlass", 16, 0.2),
            _moe("moe_torch_flow", 16, 0.3),
        ],
    )
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    return make_tree(tmp_path_factory.mktemp("silicon"))


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("optables")
    build_optables(tree, HW, out, (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20")))
    return out


def _rows(ot, family, primary_only=False):
    cols = ot.columns(family, primary_only)
    cats = ot.categories(family)
    names = list(cols)
    out = []
    for i in range(len(cols["src"])):
        out.append({n: cats[n][int(cols[n][i])] if n in cats else cols[n][i].item() for n in names})
    return out


# ----------------------------------------------------------------------------- resolution


def test_pep440_ordering():
    order = ["1.0.dev1", "1.0a1", "1.0rc9", "1.0rc10", "1.0", "1.0.post1", "1.0.1", "1.10"]
    keys = [version_key(v) for v in order]
    assert keys == sorted(keys)
    assert version_key("1.3.0rc20") > version_key("1.3.0rc11") > version_key("1.2.0rc5")
    assert version_key("0.24.0") == version_key("0.24")
    assert version_key("nightly-build") is None


def test_resolution_channels(tree):
    data = tree / HW
    srcs = resolve_sources(data, tree, "vllm", "0.24.0", "gemm_perf.parquet")
    assert [(s.channel, s.backend, s.version) for s in srcs] == [
        ("primary", "vllm", "0.24.0"),
        ("declared_reuse", "vllm", "0.25.0"),
        ("fallback", "vllm", "0.22.0"),
        ("cross_backend", "trtllm", "1.3.0rc20"),
    ]
    assert srcs[-1].ks_filter == ("shared_k",)  # only kernels the manifest lets vllm consume
    assert [
        s.channel
        for s in resolve_sources(
            data, tree, "vllm", "0.24.0", "gemm_perf.parquet", shared_layer=False
        )
    ] == ["primary"]
    # comm tables: primary + earlier comm/<backend> versions only (no reuse.yaml donor)
    ar = resolve_sources(data, tree, "vllm", "0.24.0", "custom_allreduce_perf.parquet")
    assert [(s.channel, s.version) for s in ar] == [("primary", "0.24.0"), ("fallback", "0.19.0")]
    trt = resolve_sources(data, tree, "trtllm", "1.3.0rc20", "custom_allreduce_perf.parquet")
    assert [s.version for s in trt] == ["1.3.0rc20", "1.3.0rc10", "1.3.0rc9", "1.2.0rc5"]
    nccl = resolve_sources(data, tree, "nccl", "2.27.3", "nccl_perf.parquet")
    assert [s.channel for s in nccl] == ["primary"]
    missing = resolve_sources(data, tree, "vllm", "0.24.0", "moe_perf.parquet")
    assert [(s.channel, s.exists) for s in missing] == [("primary", False)]


# ----------------------------------------------------------------------------- compiled tables


def test_gemm_first_row_wins_and_sources(built):
    ot = load_optable(HW, "vllm", "0.24.0", root=built)
    rows = _rows(ot, "gemm")
    got = [
        (r["gemm_dtype"], r["n"], r["k"], r["m"], r["latency"], r["src"], r["src_row"])
        for r in rows
    ]
    assert got == [
        ("bfloat16", 64, 64, 1, 1.0, 0, 1),  # primary beats its own later duplicate and donors
        ("bfloat16", 64, 64, 2, 2.0, 0, 0),
        ("bfloat16", 64, 64, 4, 4.0, 2, 0),  # earlier sibling fills a missing key
        ("bfloat16", 64, 64, 32, 0.25, 3, 0),  # cross-backend row with an allowed kernel
        ("fp8_block", 128, 64, 1, 3.0, 1, 1),  # the declared donor beats the sibling
    ]
    meta = ot.meta("gemm")
    assert [s["channel"] for s in meta["sources"]] == [
        "primary",
        "declared_reuse",
        "fallback",
        "cross_backend",
    ]
    src0 = meta["sources"][0]
    assert src0["rows_read"] == 4 and src0["rows_duplicate"] == 1
    assert src0["rows_dropped"] == {"gemm_dtype awq/gptq not modelled": 1}
    assert meta["sources"][3]["rows_dropped"] == {
        "kernel_source not consumable by this backend (manifest)": 1
    }
    assert "framework" not in ot.table("gemm").column_names
    assert meta["sources"][0]["provenance"]["framework"] == {"X": 4}
    # enable_shared_layer false: the primary directory only
    prim = _rows(ot, "gemm", primary_only=True)
    assert [(r["m"], r["latency"]) for r in prim] == [(1, 1.0), (2, 2.0)]
    assert ot.first_seen("gemm", "gemm_dtype") == ["bfloat16", "fp8_block"]
    cols = ot.columns("gemm")
    assert cols["m"][ot.source_order("gemm")].tolist() == [2, 1, 1, 4, 32]
    assert ot.first_seen("gemm", "m", primary_only=True) == [2, 1]


def test_attention_lanes_and_derived_keys(built):
    ot = load_optable(HW, "vllm", "0.24.0", root=built)
    ctx = _rows(ot, "context_attention")
    key = [
        (
            r["kernel_source"],
            r["n_kv_lookup"],
            r["num_heads"],
            r["isl"],
            r["batch_size"],
            r["latency"],
            r["src"],
        )
        for r in ctx
    ]
    assert key == [  # sorted: n_kv_lookup before the lane
        ("lane_a", 0, 8, 16, 2, 0.4, 0),  # MHA (num_heads == kv heads) -> n_kv_lookup 0
        ("default", 2, 16, 32, 1, 0.5, 0),  # empty kernel_source -> lane "default"
        ("lane_a", 2, 16, 16, 1, 0.2, 0),  # the sibling's lane_a row loses
        ("lane_b", 2, 16, 16, 1, 0.3, 0),
        ("lane_c", 2, 16, 16, 1, 0.6, 1),  # the lane is part of the key
    ]
    assert ot.meta("context_attention")["constants"] == {"beam_width": 1, "step": 0}
    assert ot.first_seen("context_attention", "kernel_source") == [
        "lane_b",
        "lane_a",
        "default",
        "lane_c",
    ]
    gen = _rows(ot, "generation_attention")
    assert [(r["kv_len"], r["latency"]) for r in gen] == [(4, 0.02), (1024, 0.01)]
    assert "step" not in ot.table("generation_attention").column_names


def test_comm_tables(built):
    ot = load_optable(HW, "vllm", "0.24.0", root=built)
    ar = _rows(ot, "custom_allreduce")
    assert [(r["num_gpus"], r["message_size"], r["latency"], r["src"]) for r in ar] == [
        (4, 4096, 0.006, 1),
        (4, 8192, 0.007, 0),
    ]  # eager dropped; no 0.25.0 donor for comm
    assert ot.table("custom_allreduce").schema.field("message_size").type == pa.int64()
    nccl = _rows(ot, "nccl")
    assert [(r["op_name"], r["message_size"], r["latency"]) for r in nccl] == [
        ("all_gather", 256, 0.02336)
    ]  # triplicated key: first row wins; 2.28.9 not selected
    trt = load_optable(HW, "trtllm", "1.3.0rc20", root=built)
    assert [(r["num_gpus"], r["src"]) for r in _rows(trt, "custom_allreduce")] == [(2, 1), (4, 0)]
    assert _rows(trt, "custom_allreduce")[0]["power"] == 0.0  # not measured in rc10
    moe = _rows(trt, "moe")
    assert [(r["low_latency"], r["latency"], r["kernel_source"]) for r in moe] == [
        (0, 0.2, "moe_torch_flow_cutlass"),
        (1, 0.1, "moe_torch_flow_min_latency"),
    ]
    assert moe[0]["power"] == 500.0


def test_sorted_and_unique(built):
    for backend, version in (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20")):
        ot = load_optable(HW, backend, version, root=built)
        for fam in ot.families:
            _check_sorted_unique(ot, fam)


def _check_sorted_unique(ot, fam):
    cols = ot.columns(fam)
    keys = [cols[k].astype(np.int64) for k in ot.meta(fam)["key_columns"]]
    order = np.lexsort(keys[::-1])
    assert np.array_equal(order, np.arange(len(order))), f"{fam} not sorted on its keys"
    if len(order) > 1:
        stacked = np.stack(keys, axis=1)
        assert (np.diff(stacked, axis=0) != 0).any(axis=1).all(), f"{fam} has duplicate keys"


def test_build_is_deterministic(tree, built, tmp_path):
    build_optables(tree, HW, tmp_path, (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20")))
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    for rel in files:
        assert (built / rel).read_bytes() == (tmp_path / rel).read_bytes(), rel
    assert (built / "LICENSE-test.txt").is_file() and "Apache" in (built / "NOTICE").read_text()


def test_pypi_systems_layout(tree, built, tmp_path):
    """The systems/ folder of aisimulate (yaml + manifest beside data/<hw>/) builds the same."""
    systems = tmp_path / "systems"
    shutil.copytree(tree / HW, systems / "data" / HW)
    for name in (f"{HW}.yaml", "perf_data_reuse_manifest.yaml", "LICENSE-test.txt"):
        shutil.copyfile(tree / name, systems / name)
    out = tmp_path / "out"
    build_optables(systems / "data", HW, out, (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20")))
    arrows = sorted(built.rglob("*.arrow"))
    assert arrows
    for p in arrows:
        assert p.read_bytes() == (out / p.relative_to(built)).read_bytes(), p


def test_manifest_and_system(built):
    _check_manifest(built)
    ot = load_optable(HW, "vllm", "0.24.0", root=built)
    assert ot.system["misc"]["nccl_version"] == "2.27.3"
    assert ot.system["misc"]["nccl_mem"]["8"] == 411041792
    targets = {(t["backend"], t["version"]): t for t in ot.manifest["targets"]}
    assert "moe" in targets[("vllm", "0.24.0")]["absent"]


def _check_manifest(root: Path) -> None:
    man = json.loads((root / HW / "manifest.json").read_text())
    assert man["tables"], "empty manifest"
    for e in man["tables"]:
        path = root / HW / e["file"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == e["sha256"], e["file"]
        ot = (
            load_optable(HW, e["backend"], e["version"], root=root)
            if e["backend"] != "nccl"
            else None
        )
        if ot is not None:
            tbl = ot.table(e["family"])
            assert tbl.num_rows == e["rows"]
            assert int((ot.columns(e["family"])["src"] == 0).sum()) == e["rows_primary"]
            assert tbl.column_names == e["columns"]
    sys_path = root / HW / man["system"]["file"]
    assert hashlib.sha256(sys_path.read_bytes()).hexdigest() == man["system"]["sha256"]


def test_clear_errors(built):
    with pytest.raises(OpTableError, match="hardware 'h100_sxm'"):
        load_optable("h100_sxm", "vllm", "0.24.0", root=built)
    with pytest.raises(OpTableError, match=r"backend 'vllm' version '0\.99\.0'.*vllm 0\.24\.0"):
        load_optable(HW, "vllm", "0.99.0", root=built)
    ot = load_optable(HW, "vllm", "0.24.0", root=built)
    with pytest.raises(OpTableError, match=r"'moe' not available for b200_sxm vllm 0\.24\.0"):
        ot.table("moe")


def test_cli_build_and_inspect(tree, tmp_path):
    runner = CliRunner()
    res = runner.invoke(
        main,
        [
            "optable",
            "build",
            "--source",
            str(tree),
            "--hardware",
            HW,
            "--out",
            str(tmp_path),
            "--target",
            "vllm:0.24.0",
        ],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["optable", "inspect", "--root", str(tmp_path), "--backend", "vllm"])
    assert res.exit_code == 0, res.output
    assert "gemm" in res.output and "bfloat16: 1 (n,k) sites (1 primary)" in res.output
    assert "declared_reuse 0.25.0: 1" in res.output
    res = runner.invoke(
        main,
        ["optable", "build", "--source", str(tree), "--out", str(tmp_path), "--target", "vllm"],
    )
    assert res.exit_code == 2 and "BACKEND:VERSION" in res.output


# ----------------------------------------------------------------------------- committed data


def test_attention_tables_without_window_size_hold_full_attention(tree, built, tmp_path):
    """Older silicon tables (a100_sxm's) predate the sliding-window sweep and have no
    window_size column: their rows are full attention, window 0, and price as before."""
    import shutil

    old = tmp_path / "silicon"
    shutil.copytree(tree, old)
    for path in (old / HW / "attention").rglob("*_attention_perf.parquet"):
        table = pq.read_table(path)
        pq.write_table(table.drop(["window_size"]), path)
    out = tmp_path / "optables"
    build_optables(old, HW, out, (("vllm", "0.24.0"),))
    for fam in ("context_attention", "generation_attention"):
        without = _rows(load_optable(HW, "vllm", "0.24.0", root=out), fam)
        with_column = _rows(load_optable(HW, "vllm", "0.24.0", root=built), fam)
        assert without == with_column
        assert {r["window_size"] for r in without} == {0}

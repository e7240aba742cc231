"""The committed op-time tables (data/optables): their manifest, sorted unique keys, and rows
pinned from the real silicon source."""

from __future__ import annotations

import numpy as np
import pytest

from aisim.optable import load_optable
from aisim.optable.load import default_root
from tests.test_optable import HW, _check_manifest, _check_sorted_unique


def test_committed_tables_match_manifest():
    _check_manifest(default_root())
    for backend, version in (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20")):
        ot = load_optable(HW, backend, version)
        for fam in (
            "gemm",
            "context_attention",
            "generation_attention",
            "custom_allreduce",
            "nccl",
            "moe",
        ):
            _check_sorted_unique(ot, fam)


def _find(ot, family, **want):
    cols = ot.columns(family)
    mask = np.ones(len(cols["src"]), dtype=bool)
    for k, v in want.items():
        code = ot.code(family, k, v) if isinstance(v, str) else v
        mask &= cols[k] == code
    idx = np.nonzero(mask)[0]
    assert len(idx) == 1, (family, want, len(idx))
    return {k: cols[k][idx[0]].item() for k in cols}


@pytest.mark.parametrize(
    ("backend", "version", "family", "key", "latency", "src"),
    [
        (
            "vllm",
            "0.24.0",
            "gemm",
            {"gemm_dtype": "bfloat16", "m": 1024, "n": 5120, "k": 2048},
            0.015617777903874716,
            0,
        ),
        (
            "vllm",
            "0.24.0",
            "gemm",
            {"gemm_dtype": "fp8_block", "m": 64, "n": 4096, "k": 7168},
            0.016410666207472484,
            1,
        ),  # from the reuse.yaml donor 0.25.0
        (
            "vllm",
            "0.24.0",
            "context_attention",
            {
                "attn_dtype": "bfloat16",
                "kv_cache_dtype": "bfloat16",
                "num_heads": 16,
                "n_kv_lookup": 2,
                "head_dim": 128,
                "window_size": 0,
                "isl": 1024,
                "batch_size": 1,
                "kernel_source": "vllm_flashinfer_trtllmprefill",
            },
            0.025472000241279602,
            0,
        ),
        (
            "trtllm",
            "1.3.0rc20",
            "generation_attention",
            {
                "kv_cache_dtype": "bfloat16",
                "num_heads": 16,
                "n_kv_lookup": 2,
                "head_dim": 128,
                "window_size": 0,
                "kv_len": 1024,
                "batch_size": 64,
                "kernel_source": "torch_flow",
            },
            0.014805333067973455,
            0,
        ),
        (
            "vllm",
            "0.24.0",
            "custom_allreduce",
            {"num_gpus": 4, "message_size": 8192},
            0.007362560033798218,
            0,
        ),  # the CUDA-graph row, not eager, not 0.19.0
        (
            "vllm",
            "0.24.0",
            "nccl",
            {"nccl_dtype": "half", "op_name": "all_gather", "num_gpus": 8, "message_size": 1048576},
            0.02336,
            0,
        ),  # first of 3 duplicates
        (
            "vllm",
            "0.24.0",
            "moe",
            {
                "moe_dtype": "fp8_block",
                "distribution": "power_law_1.01",
                "topk": 8,
                "num_experts": 256,
                "hidden_size": 7168,
                "inter_size": 2048,
                "moe_tp_size": 1,
                "moe_ep_size": 8,
                "num_tokens": 8192,
                "low_latency": 0,
            },
            2.5444032669067385,
            0,
        ),
    ],
)
def test_committed_known_rows(backend, version, family, key, latency, src):
    row = _find(load_optable(HW, backend, version), family, **key)
    assert row["latency"] == latency
    assert row["src"] == src


def test_committed_trtllm_power():
    row = _find(
        load_optable(HW, "trtllm", "1.3.0rc20"),
        "gemm",
        gemm_dtype="bfloat16",
        m=1024,
        n=2560,
        k=5120,
    )
    assert (row["latency"], row["power"], row["power_limit"]) == (
        0.019768534104029338,
        980.087,
        1000.0,
    )

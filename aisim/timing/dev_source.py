"""Development-only loader: the silicon parquet tables -> plain dict-of-numpy-columns per family.

Used by `bench/check_dense_pricing.py` while the compiled op-time table (`aisim.optable`) is not
available; tests never call it (they must not read ../shared). It applies the source-resolution
rules of docs/timing.md 2.2 for the dense families: primary version first, then `reuse.yaml` donors,
then earlier sibling versions nearest first; first row wins on a duplicate key; eager
custom-allreduce rows dropped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# (family dir, backend, version) -> source versions in priority order (docs/timing.md 2.2)
_SOURCES = {
    ("gemm", "vllm", "0.24.0"): ["0.24.0", "0.25.0"],
    ("gemm", "trtllm", "1.3.0rc20"): ["1.3.0rc20"],
    ("attention", "vllm", "0.24.0"): ["0.24.0", "0.22.0"],
    ("attention", "trtllm", "1.3.0rc20"): ["1.3.0rc20"],
    ("comm", "vllm", "0.24.0"): ["0.24.0", "0.19.0"],
    ("comm", "trtllm", "1.3.0rc20"): ["1.3.0rc20", "1.3.0rc10", "1.2.0rc5"],
}

# family -> (directory, file, key columns for first-row-wins)
_FAMILIES = {
    "gemm": ("gemm", "gemm_perf.parquet", ("gemm_dtype", "m", "n", "k")),
    "context_attention": (
        "attention",
        "context_attention_perf.parquet",
        (
            "kernel_source",
            "attn_dtype",
            "kv_cache_dtype",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "window_size",
            "beam_width",
            "step",
            "isl",
            "batch_size",
        ),
    ),
    "generation_attention": (
        "attention",
        "generation_attention_perf.parquet",
        (
            "kernel_source",
            "attn_dtype",
            "kv_cache_dtype",
            "num_heads",
            "num_key_value_heads",
            "head_dim",
            "window_size",
            "beam_width",
            "step",
            "isl",
            "batch_size",
        ),
    ),
    "custom_allreduce": (
        "comm",
        "custom_allreduce_perf.parquet",
        ("allreduce_dtype", "num_gpus", "message_size"),
    ),
}

DEFAULT_SILICON = Path(__file__).resolve().parents[3] / "shared" / "data" / "silicon"


def load_dev_tables(
    backend: str, version: str, hardware: str, silicon_dir: Path | None = None
) -> dict[str, dict[str, np.ndarray]]:
    """Every dense family as {column: numpy array} (strings as object arrays)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(silicon_dir or DEFAULT_SILICON) / hardware
    out: dict[str, dict[str, np.ndarray]] = {}
    for family, (folder, fname, key_cols) in _FAMILIES.items():
        versions = _SOURCES[(folder, backend, version)]
        tables = []
        for ver in versions:
            path = root / folder / backend / ver / fname
            if not path.is_file():
                continue
            t = pq.read_table(path)
            if family == "custom_allreduce":
                ks = np.array(t["kernel_source"].to_pylist(), dtype=object)
                keep = np.array(["eager" not in s.lower() for s in ks])
                t = t.filter(pa.array(keep))
            tables.append(t)
        cols: dict[str, list] = {}
        names = set.intersection(*(set(t.schema.names) for t in tables))
        for t in tables:
            for name in names:
                cols.setdefault(name, []).append(t[name].to_numpy(zero_copy_only=False))
        merged = {n: np.concatenate(v) for n, v in cols.items()}
        keys = list(zip(*(merged[c].tolist() for c in key_cols), strict=True))
        seen: set = set()
        keep_idx = []
        for i, key in enumerate(keys):
            if key not in seen:
                seen.add(key)
                keep_idx.append(i)
        idx = np.asarray(keep_idx, dtype=np.int64)
        out[family] = {n: v[idx] for n, v in merged.items()}
    return out


def load_dev_system(hardware: str, silicon_dir: Path | None = None) -> dict:
    """The GPU's system yaml as a dict."""
    import yaml

    root = Path(silicon_dir or DEFAULT_SILICON)
    return yaml.safe_load((root / f"{hardware}.yaml").read_text())

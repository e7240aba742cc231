"""Compile one op family from its resolved sources into a sorted, compact Arrow table.

Rows are read source by source in priority order (then file order), filtered (manifest
kernel_source allow-list for cross-backend sources, the family's own drop rules), derived keys
are computed, and the first row of every key wins. The result is sorted on the family's keys.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from aisim.optable.resolve import Source
from aisim.optable.schema import (
    FLAG_COLUMNS,
    FORMAT_VERSION,
    INT64_COLUMNS,
    PROVENANCE_COLUMNS,
    VALUE_COLUMNS,
    Family,
)

META_KEY = b"aisim.optable"
_SHA_CACHE: dict[tuple, str] = {}


def sha256_file(path: Path) -> str:
    """sha256 of a file (memoized on path, size and mtime: sources are hashed once per build)."""
    path = Path(path).resolve()
    st = path.stat()
    key = (path, st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def read_source(path: Path) -> dict[str, np.ndarray]:
    """Every column of a parquet table as numpy: strings -> object arrays ('' for null),
    integers -> int64, floats -> float64."""
    t = pq.read_table(path)
    cols: dict[str, np.ndarray] = {}
    for name, col in zip(t.column_names, t.columns, strict=True):
        typ = col.type
        if pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_dictionary(typ):
            cols[name] = np.array(
                ["" if v is None else str(v) for v in col.to_pylist()], dtype=object
            )
        elif pa.types.is_integer(typ):
            cols[name] = col.to_numpy().astype(np.int64)
        elif pa.types.is_floating(typ):
            cols[name] = col.to_numpy(zero_copy_only=False).astype(np.float64)
        elif pa.types.is_boolean(typ):
            cols[name] = col.to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            cols[name] = np.array([str(v) for v in col.to_pylist()], dtype=object)
    return cols


def _value_counts(arr: np.ndarray) -> dict[str, int]:
    vals, counts = np.unique(arr.astype(str), return_counts=True)
    return {str(v): int(c) for v, c in zip(vals, counts, strict=True)}


def _is_str(arr: np.ndarray) -> bool:
    return arr.dtype == object


def _dictionary(arr: np.ndarray) -> tuple[pa.DictionaryArray, list[str]]:
    cats, idx = np.unique(arr.astype(str), return_inverse=True)
    itype = pa.int8() if len(cats) <= 127 else pa.int16() if len(cats) <= 32767 else pa.int32()
    darr = pa.DictionaryArray.from_arrays(
        pa.array(idx.astype(itype.to_pandas_dtype()), itype),
        pa.array([str(c) for c in cats], pa.string()),
    )
    return darr, [str(c) for c in cats]


def _int_array(name: str, arr: np.ndarray) -> pa.Array:
    if name in FLAG_COLUMNS:
        return pa.array(arr.astype(np.uint8), pa.uint8())
    lo, hi = (int(arr.min()), int(arr.max())) if len(arr) else (0, 0)
    if name in INT64_COLUMNS or lo < -(2**31) or hi >= 2**31:
        return pa.array(arr.astype(np.int64), pa.int64())
    return pa.array(arr.astype(np.int32), pa.int32())


def _source_label(src: Source, data_root: Path, hardware: str) -> str:
    try:
        return f"{hardware}/{src.path.relative_to(data_root).as_posix()}"
    except ValueError:
        return src.path.name


def compile_family(
    family: Family,
    sources: list[Source],
    data_root: Path,
    hardware: str,
    backend: str,
    version: str,
) -> tuple[pa.Table, dict]:
    """The compiled table (sorted, first row wins per key) and its metadata dict."""
    if len(sources) > 255:
        raise ValueError(f"{family.name}: {len(sources)} sources do not fit the uint8 src column")
    parts: list[dict[str, np.ndarray]] = []
    src_meta: list[dict] = []
    for i, src in enumerate(sources):
        entry = {
            "src": i,
            "channel": src.channel,
            "backend": src.backend,
            "version": src.version,
            "path": _source_label(src, data_root, hardware),
            "exists": src.exists,
            "kernel_source_filter": list(src.ks_filter) if src.ks_filter is not None else None,
        }
        src_meta.append(entry)
        if not src.exists:
            entry.update(rows_read=0, rows_dropped={}, rows_duplicate=0, rows_kept=0)
            continue
        cols = read_source(src.path)
        n = len(cols["latency"])
        if "window_size" in family.keys and "window_size" not in cols:
            # tables measured before sliding-window kernels were swept hold full attention only
            cols["window_size"] = np.zeros(n, dtype=np.int64)
        entry["sha256"] = sha256_file(src.path)
        entry["rows_read"] = n
        entry["provenance"] = {
            c: _value_counts(cols[c])
            for c in PROVENANCE_COLUMNS
            if c in cols and c not in family.keys
        }
        mask = np.ones(n, dtype=bool)
        dropped: dict[str, int] = {}
        if src.ks_filter is not None:
            ks = cols.get("kernel_source")
            ok = (
                np.isin(ks.astype(str), list(src.ks_filter))
                if ks is not None
                else np.zeros(n, dtype=bool)
            )
            dropped["kernel_source not consumable by this backend (manifest)"] = int((~ok).sum())
            mask &= ok
        if family.row_filter is not None:
            ok = family.row_filter(cols, hardware)
            dropped[family.filter_reason] = int((mask & ~ok).sum())
            mask &= ok
        entry["rows_dropped"] = {k: v for k, v in dropped.items() if v}
        cols = {k: v[mask] for k, v in cols.items()}
        cols["src"] = np.full(int(mask.sum()), i, dtype=np.int64)
        cols["src_row"] = np.nonzero(mask)[0].astype(np.int64)
        if "kernel_source" not in cols:
            cols["kernel_source"] = np.full(len(cols["src"]), "", dtype=object)
        for name, fn in family.derive.items():
            cols[name] = fn(cols)
        parts.append(cols)

    drop = set(family.consumed) | {c for c in PROVENANCE_COLUMNS if c not in family.keys}
    names = sorted({c for p in parts for c in p} - drop)
    missing_keys = [k for k in family.keys if k not in names]
    if not parts or missing_keys:
        raise ValueError(f"{family.name}: no usable rows (missing columns {missing_keys})")
    merged: dict[str, np.ndarray] = {}
    fills: dict[str, object] = {}
    for name in names:
        proto = next(p[name] for p in parts if name in p)
        fill = "" if _is_str(proto) else 0.0 if name in VALUE_COLUMNS else -1
        if any(name not in p for p in parts):
            fills[name] = fill
        chunks = [
            p[name] if name in p else np.full(len(p["src"]), fill, dtype=proto.dtype) for p in parts
        ]
        merged[name] = np.concatenate(chunks)
    total = len(merged["src"])

    # First row wins: stable sort on the keys with the merged position as the last tie-break.
    codes = []
    for k in family.keys:
        arr = merged[k]
        codes.append(
            np.unique(arr.astype(str), return_inverse=True)[1]
            if _is_str(arr)
            else arr.astype(np.int64)
        )
    order = np.lexsort([np.arange(total), *codes[::-1]])
    first = np.ones(total, dtype=bool)
    if total > 1:
        change = np.zeros(total - 1, dtype=bool)
        for c in codes:
            cs = c[order]
            change |= cs[1:] != cs[:-1]
        first[1:] = change
    keep = order[first]
    kept_src = merged["src"][keep]
    for entry in src_meta:
        if entry["exists"]:
            kept = int((kept_src == entry["src"]).sum())
            after_filter = entry["rows_read"] - sum(entry["rows_dropped"].values())
            entry["rows_kept"] = kept
            entry["rows_duplicate"] = after_filter - kept

    value_cols = [c for c in VALUE_COLUMNS if c in merged]
    fixed = set(family.keys) | set(value_cols) | {"src", "src_row", "kernel_source"}
    extras = [c for c in names if c not in fixed]
    arrays: dict[str, pa.Array] = {}
    categories: dict[str, list[str]] = {}
    constants: dict[str, object] = {}
    for k in family.keys:
        arr = merged[k][keep]
        if k in family.categorical:
            arrays[k], categories[k] = _dictionary(arr)
        else:
            arrays[k] = _int_array(k, arr)
    if "kernel_source" not in family.keys:
        arrays["kernel_source"], categories["kernel_source"] = _dictionary(
            merged["kernel_source"][keep]
        )
    for c in extras:
        arr = merged[c][keep]
        if len(np.unique(arr.astype(str) if _is_str(arr) else arr)) <= 1:
            constants[c] = (str(arr[0]) if _is_str(arr) else int(arr[0])) if len(arr) else None
        elif _is_str(arr):
            arrays[c], categories[c] = _dictionary(arr)
        else:
            arrays[c] = _int_array(c, arr)
    for c in value_cols:
        arrays[c] = pa.array(merged[c][keep].astype(np.float64), pa.float64())
    arrays["src"] = pa.array(kept_src.astype(np.uint8), pa.uint8())
    arrays["src_row"] = pa.array(merged["src_row"][keep].astype(np.uint32), pa.uint32())

    units = {
        "latency": family.unit,
        "transmit_us": "us",
        "notify_us": "us",
        "power": "W",
        "power_limit": "W",
    }
    fields = []
    for name, arr in arrays.items():
        md = {b"unit": units[name].encode()} if name in units else None
        fields.append(pa.field(name, arr.type, nullable=False, metadata=md))
    meta = {
        "format_version": FORMAT_VERSION,
        "hardware": hardware,
        "backend": backend,
        "version": version,
        "family": family.name,
        "op_file": family.op_file,
        "description": family.description,
        "lookup": family.lookup,
        "unit": family.unit,
        "key_columns": list(family.keys),
        "categorical_columns": sorted(categories),
        "value_columns": value_cols,
        "categories": categories,
        "constants": constants,
        "consumed_columns": list(family.consumed),
        "missing_value_fill": {c: v for c, v in fills.items() if c in arrays},
        "rows": len(keep),
        "rows_primary": int((kept_src == 0).sum()),
        "sources": src_meta,
        "dedup": "rows read in source order, then file order; the first row of each key "
        "(key_columns) wins; sorted on key_columns",
        "shared_layer": {"true": "all rows", "false": "rows with src == 0 (primary only)"},
    }
    schema = pa.schema(fields, metadata={META_KEY: json.dumps(meta, sort_keys=True).encode()})
    table = pa.Table.from_arrays(list(arrays.values()), schema=schema)
    return table, meta


def write_ipc(table: pa.Table, path: Path, level: int = 19) -> None:
    """One record batch, zstd-compressed buffers; identical bytes for identical input."""
    path.parent.mkdir(parents=True, exist_ok=True)
    opts = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=level))
    tmp = path.with_suffix(path.suffix + ".tmp")
    table = table.combine_chunks()
    with (
        pa.OSFile(str(tmp), "wb") as sink,
        pa.ipc.new_file(sink, table.schema, options=opts) as writer,
    ):
        writer.write_table(table, max_chunksize=max(1, table.num_rows))
    tmp.replace(path)

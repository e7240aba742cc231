"""The on-disk op-plan cache: one file per resolved plan, keyed by everything it depends on.

Resolving a plan reads ~7 MB of tables and takes ~0.3 s; the result is a pure function of the
model, the deployment, the hardware's table contents and the code that builds it, so it is
cached under a hash of all of those: the model facts, the deployment, the hardware's table
manifest (which lists every table's sha256), and every source file the plan depends on (each
.py of aisim/timing, aisim/optable and the pass-pricing kernels, found by globbing, so a new
module is covered without being listed).

File layout: one JSON header line (the plan's names, its PassScalars, and each array's path in
the OpPlan record, dtype, shape and byte offset), then the arrays' raw bytes. One read and a view
per array: ~0.5 ms, where an .npz of the plan's arrays took ~7 ms inside every op-level run's
wall_time_ms.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import typing
from importlib import resources
from pathlib import Path

import numpy as np

from aisim.errors import OpTableError
from aisim.kernels._cache import cache_root
from aisim.kernels.optime_pass import OpPlan
from aisim.timing.plan_record import PassPlan, pass_scalars, scalars_of

_FORMAT = "aisim-plan-2"
_FIELD_TYPES = typing.get_type_hints(OpPlan)


def plan_sources() -> list[Path]:
    """Every source file a plan depends on: the plan builders, the table loader, and the pass
    kernels (whose records and constants the plan fills)."""
    import aisim.kernels

    here = Path(__file__).parent
    return sorted(
        [
            *here.glob("*.py"),
            *(here.parent / "optable").glob("*.py"),
            *Path(aisim.kernels.__file__).parent.glob("optime_*.py"),
        ]
    )


@functools.cache
def _source_digest() -> bytes:
    """sha256 over the plan sources (names and bytes), once per process."""
    digest = hashlib.sha256()
    for path in plan_sources():
        digest.update(f"{path.parent.name}/{path.name}".encode())
        digest.update(path.read_bytes())
    return digest.digest()


def manifest_bytes(hardware: str) -> bytes:
    """The hardware's compiled-table manifest (every table's sha256)."""
    path = resources.files("aisim.data") / "optables" / hardware / "manifest.json"
    try:
        return path.read_bytes()
    except OSError:
        raise OpTableError(f"no compiled op-time tables for hardware {hardware!r}") from None


def cache_path(model, hardware: str, args: dict) -> Path:
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(model), sort_keys=True).encode())
    digest.update(json.dumps({"hardware": hardware, **args}, sort_keys=True).encode())
    digest.update(manifest_bytes(hardware))
    digest.update(_source_digest())
    return cache_root() / "plans" / f"{digest.hexdigest()[:24]}.plan"


def flat_arrays(arrays: OpPlan) -> dict[str, np.ndarray]:
    """Every array of the record by its path ("gemm.curve_m", "scratch_d"), scalars aside."""
    out = {}
    for name, value in arrays._asdict().items():
        if name == "scalars":
            continue
        if isinstance(value, np.ndarray):
            out[name] = value
        else:
            out.update({f"{name}.{sub}": a for sub, a in value._asdict().items()})
    return out


def plan_digest(arrays: OpPlan) -> str:
    """sha256 of the record's values: equal digests, equal prices."""
    h = hashlib.sha256(arrays.scalars.tobytes())
    for a in flat_arrays(arrays).values():
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _record(scalars: dict, arrays: dict[str, np.ndarray]) -> OpPlan:
    fields = {}
    for name, kind in _FIELD_TYPES.items():
        if name == "scalars":
            fields[name] = pass_scalars(**scalars)
        elif kind is np.ndarray:
            fields[name] = arrays[name]
        else:
            fields[name] = kind(**{sub: arrays[f"{name}.{sub}"] for sub in kind._fields})
    return OpPlan(**fields)


def load(path: Path) -> PassPlan | None:
    try:
        blob = path.read_bytes()
        end = blob.index(b"\n")
        header = json.loads(blob[:end])
        if header.get("format") != _FORMAT:
            return None
        body = memoryview(blob)[end + 1 :]
        arrays = {}
        for name, (dtype, shape, offset) in header["arrays"].items():
            count = int(np.prod(shape, dtype=np.int64))
            a = np.frombuffer(body, dtype=np.dtype(dtype), count=count, offset=offset)
            arrays[name] = a.reshape(shape).copy()  # writable, owned: kernels take them as is
        record = _record(header["scalars"], arrays)
        meta = header["meta"]
    except (OSError, KeyError, ValueError, TypeError):
        return None
    return PassPlan(
        arrays=record, **{k: tuple(v) if isinstance(v, list) else v for k, v in meta.items()}
    )


def store(path: Path, plan: PassPlan) -> None:
    meta = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "arrays"}
    index = {}
    chunks = []
    offset = 0
    for name, a in flat_arrays(plan.arrays).items():
        raw = np.ascontiguousarray(a).tobytes()
        index[name] = (a.dtype.str, list(a.shape), offset)
        chunks.append(raw)
        offset += len(raw)
    header = json.dumps(
        {
            "format": _FORMAT,
            "meta": meta,
            "scalars": scalars_of(plan.arrays)._asdict(),
            "arrays": index,
        }
    )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(header.encode() + b"\n")
            for raw in chunks:
                fh.write(raw)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the rebuild

"""Op-level timing for a resolved EngineSpec: which op-time table, which plan, what provenance."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from importlib import resources
from pathlib import Path

import numpy as np

from aisim.errors import NotAvailableError
from aisim.kernels._cache import cache_root
from aisim.timing.plan_moe import is_moe_model  # at import: a run's wall_time_ms excludes it

DEFAULT_VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}
DENSE_MODEL_TYPES = ("qwen3", "qwen2", "llama", "mistral")


def data_version(backend: str, requested: str | None) -> str:
    """null backend_version = the newest database version for the backend (AISimulate)."""
    return requested or DEFAULT_VERSIONS[backend]


def plan_for(spec, where: str):
    """The resolved op plan for the spec's model, parallelism, backend and mode."""
    from aisim.timing.plan import build_dense_plan
    from aisim.timing.tables import load_tables

    model = spec.model
    if is_moe_model(model):
        return _moe_plan_for(spec, where)
    if model.model_type not in DENSE_MODEL_TYPES:
        raise NotAvailableError(
            f"{where}.timing: op-level timing for {model.model_id} ({model.model_type or 'MoE'} "
            "architecture) is not available yet in aisim; only dense Qwen3 / Llama models are "
            "priced so far (fixed or polynomial timing works for any model)")
    version = data_version(spec.backend, spec.backend_version)
    args = {"backend": spec.backend, "version": version, "tensor_parallel": spec.tensor,
            "pipeline_parallel": spec.pipeline, "mode": spec.database_mode,
            "nextn": spec.nextn}
    primary_only = spec.enable_shared_layer is False
    path = _cache_path(model, {**args, "primary_only": True} if primary_only else args)
    cached = _load(path)
    if cached is not None:
        return cached
    tables, system = load_tables("b200_sxm", spec.backend, version)
    if primary_only:
        # the dense tables hold donor rows too (small GEMMs, attention shapes of other models):
        # AISimulate's enable_shared_layer: false drops them for dense models as for MoE ones
        tables = _primary_rows(tables)
    plan = build_dense_plan(model, tables, system, **args)
    _store(path, plan)
    return plan


def _moe_plan_for(spec, where: str):
    from aisim.errors import AisimError
    from aisim.timing.plan_moe import build_moe_plan
    from aisim.timing.tables import MOE_FAMILIES, load_tables

    version = data_version(spec.backend, spec.backend_version)
    args = {"backend": spec.backend, "version": version, "tensor_parallel": spec.tensor,
            "pipeline_parallel": spec.pipeline, "attention_dp": spec.dp_size,
            "moe_tensor": spec.moe_tensor, "moe_expert": spec.moe_expert,
            "mode": spec.database_mode, "nextn": spec.nextn}
    primary_only = spec.enable_shared_layer is False
    path = _cache_path(spec.model, {**args, "primary_only": primary_only})
    cached = _load(path)
    if cached is not None:
        return cached
    tables, system = load_tables("b200_sxm", spec.backend, version, MOE_FAMILIES)
    if primary_only:
        # enable_shared_layer: false = the requested version's own rows only (timing.md 2.4):
        # no reuse.yaml donors, no sibling versions (DeepSeek then has no fp8_block GEMMs)
        tables = _primary_rows(tables)
    try:
        plan = build_moe_plan(spec.model, tables, system, **args)
    except NotAvailableError as exc:
        raise NotAvailableError(f"{where}.timing: {exc}") from None
    except AisimError as exc:
        raise type(exc)(f"{where}.timing: {exc}") from None
    _store(path, plan)
    return plan


def _primary_rows(tables: dict) -> dict:
    """Each table's rows from the requested version's own directory (src 0) only."""
    return {fam: ({k: np.asarray(v)[np.asarray(cols["src"]) == 0] for k, v in cols.items()}
                  if "src" in cols else cols)
            for fam, cols in tables.items()}


# Resolving a plan reads ~7 MB of tables and takes ~0.3 s; the result is a pure function of the
# model, parallelism, backend, version, mode, table contents and the plan code, so it is cached
# on disk under a hash of all of those (same arrays, same results).
#
# File layout: one JSON header line (the plan's scalar fields and each array's dtype, shape and
# byte offset), then the arrays' raw bytes. One read and a view per array: ~0.5 ms, where an
# .npz of the plan's 63 arrays took ~7 ms inside every op-level run's wall_time_ms.
_CACHE_FORMAT = "aisim-plan-1"


def _cache_path(model, args: dict) -> Path:
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(model), sort_keys=True).encode())
    digest.update(json.dumps(args, sort_keys=True).encode())
    manifest = resources.files("aisim.data") / "optables" / "b200_sxm" / "manifest.json"
    digest.update(manifest.read_bytes())
    here = Path(__file__).parent
    for name in ("plan.py", "plan_moe.py", "plan_mla.py", "dispatch_tpdp.py", "multinode.py",
                 "tables.py", "provider.py"):
        digest.update((here / name).read_bytes())
    return cache_root() / "plans" / f"{digest.hexdigest()[:24]}.plan"


def _load(path: Path):
    from aisim.timing.plan import DensePlan, PassPlan

    try:
        blob = path.read_bytes()
        end = blob.index(b"\n")
        header = json.loads(blob[:end])
        if header.get("format") != _CACHE_FORMAT:
            return None
        body = memoryview(blob)[end + 1:]
        arrays = []
        for field in DensePlan._fields:
            dtype, shape, offset = header["arrays"][field]
            count = int(np.prod(shape, dtype=np.int64))
            a = np.frombuffer(body, dtype=np.dtype(dtype), count=count, offset=offset)
            arrays.append(a.reshape(shape).copy())  # writable, owned: kernels take them as is
        meta = header["meta"]
    except (OSError, KeyError, ValueError, TypeError):
        return None
    return PassPlan(arrays=DensePlan(*arrays),
                    **{k: tuple(v) if isinstance(v, list) else v for k, v in meta.items()})


def _store(path: Path, plan) -> None:
    meta = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan) if f.name != "arrays"}
    index = {}
    chunks = []
    offset = 0
    for field, a in plan.arrays._asdict().items():
        raw = np.ascontiguousarray(a).tobytes()
        index[field] = (a.dtype.str, list(a.shape), offset)
        chunks.append(raw)
        offset += len(raw)
    header = json.dumps({"format": _CACHE_FORMAT, "meta": meta, "arrays": index})
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


def provenance(spec) -> dict:
    return {
        "data_identity": None,
        "data_version": data_version(spec.backend, spec.backend_version),
        "data_version_unavailable_reason": None,
        "estimator": "op_level",
        "timing_source": "aic",
    }

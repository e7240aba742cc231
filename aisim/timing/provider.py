"""Op-level timing for a resolved EngineSpec: which op-time table, which plan, what provenance."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from aisim.config.registry import current_version
from aisim.errors import (
    AisimError,
    EmptyTableError,
    HybridEstimateError,
    NotAvailableError,
    OpTableError,
    UpFrontTableError,
)

# at import: a run's wall_time_ms excludes loading the plan builders
from aisim.timing.families import build_plan, check_priced, is_moe_model, table_families
from aisim.timing.plan_cache import cache_path, load, store
from aisim.timing.plan_record import Deployment, unpriced_plan


def data_version(backend: str, requested: str | None, hardware: str | None = None) -> str:
    """null backend_version = the hardware's current version for the backend (AISimulate)."""
    return requested or current_version(hardware, backend)


def hardware_of(spec, where: str) -> str:
    """The system whose tables price the spec (engine.hardware, or the role's)."""
    if not spec.hardware:
        raise NotAvailableError(f"{where}.timing: op-level timing needs engine.hardware")
    return spec.hardware


def plan_mode(database_mode: str) -> str:
    """The database mode a plan is priced in: HYBRID is SILICON for every op the tables answer
    (AISimulate estimates an op from empirical utilisation only where its silicon lookup finds
    no data, which aisim refuses, see `HybridEstimateError`), so HYBRID shares SILICON's plans."""
    return "SILICON" if database_mode == "HYBRID" else database_mode


def deployment_of(spec) -> Deployment:
    """The plan-relevant part of the spec (a dense plan ignores the MoE parallelism)."""
    version = data_version(spec.backend, spec.backend_version, spec.hardware)
    mode = plan_mode(spec.database_mode)
    transfers = spec.transfers if mode == "EMPIRICAL" else ()  # only EMPIRICAL borrows
    if not is_moe_model(spec.model):
        return Deployment(
            spec.backend,
            version,
            tensor=spec.tensor,
            pipeline=spec.pipeline,
            mode=mode,
            nextn=spec.nextn,
            quant_modes=spec.quant_modes,
            transfers=transfers,
        )
    return Deployment(
        spec.backend,
        version,
        tensor=spec.tensor,
        pipeline=spec.pipeline,
        attention_dp=spec.dp_size,
        moe_tensor=spec.moe_tensor,
        moe_expert=spec.moe_expert,
        mode=mode,
        nextn=spec.nextn,
        quant_modes=spec.quant_modes,
        transfers=transfers,
    )


def plan_identity(spec, where: str) -> str:
    """Everything a spec's op plan depends on within one process (model, hardware, the
    plan-relevant deployment, the table sources): specs with equal identities share one plan,
    whatever their traffic. The on-disk cache key adds the plan code and the tables' manifest."""
    model, hardware, deployment, primary_only = _plan_inputs(spec, where)
    return json.dumps(
        [dataclasses.asdict(model), hardware, vars(deployment), primary_only],
        sort_keys=True,
        default=str,
    )


def _plan_inputs(spec, where: str):
    check_priced(spec.model, where)
    # enable_shared_layer: false = the requested version's own rows only (docs/timing.md 2.2): no
    # reuse.yaml donors (small GEMMs, other models' attention shapes), no sibling versions
    # (DeepSeek then has no fp8_block GEMMs); AISimulate drops them for dense models too
    deployment = deployment_of(spec)
    # EMPIRICAL estimates from the requested version's own rows unless the shared layer is
    # asked for by name (oracle: Qwen3-32B TP4 vLLM prefill 23.319966 ms unset, 23.318648 with
    # enable_shared_layer: true)
    shared = spec.enable_shared_layer
    own_rows = shared is False or (deployment.mode == "EMPIRICAL" and shared is not True)
    return spec.model, hardware_of(spec, where), deployment, own_rows


def plan_for(spec, where: str):
    """The resolved op plan for the spec's model, parallelism, backend and mode."""
    from aisim.timing.tables import load_tables

    model, hardware, deployment, primary_only = _plan_inputs(spec, where)
    path = cache_path(model, hardware, {**vars(deployment), "primary_only": primary_only})
    cached = load(path)
    if cached is not None:
        return cached
    tables, system = load_tables(
        hardware, deployment.backend, deployment.version, table_families(model)
    )
    if primary_only:
        tables = {
            fam: (
                {k: np.asarray(v)[np.asarray(cols["src"]) == 0] for k, v in cols.items()}
                if "src" in cols
                else cols
            )
            for fam, cols in tables.items()
        }
    gemm = tables.get("gemm")
    sol = deployment.mode == "SOL"  # SOL reads no table
    if gemm is not None and not sol and not any(len(v) for v in gemm.values()):
        # AISimulate loads its GEMM table before any pass and refuses the run when it is empty,
        # even if every request is then rejected without a pass (docs/timing.md 5)
        raise EmptyTableError(
            f"{where}.timing: the {deployment.backend} {deployment.version} tables of {hardware}"
            " hold no GEMM rows"
            + (
                " of their own, which database_mode EMPIRICAL estimates from; set "
                "enable_shared_layer: true, or use SILICON or a backend_version with its own "
                "tables"
                if deployment.mode == "EMPIRICAL" and primary_only
                else " of their own (enable_shared_layer: false); set it true"
                if primary_only
                else ""
            )
        )
    if not sol and deployment.mode != "EMPIRICAL" and model.kv_lora_rank == 0:
        # so does it the attention tables of a GQA model (a version whose own rows lack them,
        # read with enable_shared_layer: false; gb200 vLLM 0.31.0)
        for family in ("context_attention", "generation_attention"):
            cols = tables.get(family)
            if cols is not None and not any(len(v) for v in cols.values()):
                raise EmptyTableError(
                    f"{where}.timing: the {deployment.backend} {deployment.version} tables of "
                    f"{hardware} hold no {family} rows"
                    + (
                        " of their own (enable_shared_layer: false); set it true"
                        if primary_only
                        else ""
                    )
                )
    try:
        plan = build_plan(model, tables, system, deployment)
    except OpTableError as exc:
        if spec.database_mode == "HYBRID" and not isinstance(exc, UpFrontTableError):
            raise HybridEstimateError(
                f"{where}.timing: database_mode HYBRID would estimate an op the tables miss from "
                f"empirical utilisation ({exc}), which is not available yet in aisim; use a "
                "deployment the tables cover (it is then priced as SILICON)"
            ) from None
        raise type(exc)(f"{where}.timing: {exc}") from None
    except AisimError as exc:
        raise type(exc)(f"{where}.timing: {exc}") from None
    store(path, plan)
    return plan


def plan_unless_unpriced(spec, where: str, rejects_all):
    """plan_for, or, when the tables cannot price the deployment but every request is rejected
    before a pass is priced (`rejects_all()`), the op-less plan: AISimulate reads its tables
    only to price a pass, so such a run reports "no request completed" (exit 1) instead of a
    table miss (docs/timing.md 5)."""
    try:
        return plan_for(spec, where)
    except UpFrontTableError:
        raise
    except (OpTableError, HybridEstimateError):
        if not rejects_all():
            raise
        return unpriced_plan(spec.model.model_id, deployment_of(spec))


def provenance(spec) -> dict:
    return {
        "data_identity": None,
        "data_version": data_version(spec.backend, spec.backend_version, spec.hardware),
        "data_version_unavailable_reason": None,
        "estimator": "op_level",
        "timing_source": "aic",
    }

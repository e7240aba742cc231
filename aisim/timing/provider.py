"""Op-level timing for a resolved EngineSpec: which op-time table, which plan, what provenance."""

from __future__ import annotations

from aisim.errors import NotAvailableError

DEFAULT_VERSIONS = {"vllm": "0.24.0", "trtllm": "1.3.0rc20"}
DENSE_MODEL_TYPES = ("qwen3", "qwen2", "llama", "mistral")


def data_version(backend: str, requested: str | None) -> str:
    """null backend_version = the newest database version for the backend (AISimulate)."""
    return requested or DEFAULT_VERSIONS[backend]


def plan_for(spec, where: str):
    """The resolved dense op plan for the spec's model, parallelism, backend and mode."""
    from aisim.timing.plan import build_dense_plan
    from aisim.timing.tables import load_tables

    model = spec.model
    if model.model_type not in DENSE_MODEL_TYPES:
        raise NotAvailableError(
            f"{where}.timing: op-level timing for {model.model_id} ({model.model_type or 'MoE'} "
            "architecture) is not available yet in aisim; only dense Qwen3 / Llama models are "
            "priced so far. Use timing: {type: fixed, ...} meanwhile")
    version = data_version(spec.backend, spec.backend_version)
    tables, system = load_tables("b200_sxm", spec.backend, version)
    return build_dense_plan(model, tables, system, backend=spec.backend, version=version,
                            tensor_parallel=spec.tensor, pipeline_parallel=spec.pipeline,
                            mode=spec.database_mode)


def provenance(spec) -> dict:
    return {
        "data_identity": None,
        "data_version": data_version(spec.backend, spec.backend_version),
        "data_version_unavailable_reason": None,
        "estimator": "op_level",
        "timing_source": "aic",
    }

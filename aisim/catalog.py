"""The shipped model configs and where op-level timing prices each one (`aisim models`).

A model is priced on a (hardware, backend) when predict would build its op plan there: the
config resolves (checkpoint precision, backend version, parallelism rules) and the tables hold
every op and slice the plan reads. That is checked by building the plan, at the backend's
current version and at one deployment per model chosen by rule (`probe_parallelism`); other
parallelisms can still lack a slice, which predict and validate name. A check costs ~0.4 s, so
each outcome is cached under a digest of everything it depends on.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from aisim.config.registry import KNOWN_HARDWARE, current_version, priced_versions
from aisim.errors import AisimError
from aisim.models import ModelArch, load_model, shipped_model_ids

BACKENDS = ("vllm", "trtllm")
_PROBE = "<models>"


@dataclasses.dataclass(frozen=True)
class Coverage:
    hardware: str
    backend: str
    version: str
    deployment: str  # the parallelism the check built the plan for
    priced: bool
    reason: str  # why not, in predict's words; "" when priced


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    model_id: str
    family: str
    precision: str  # the checkpoint's declared weight quantization, or its dtype
    layers: int
    coverage: tuple[Coverage, ...]

    def priced_on(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for c in self.coverage:
            if c.priced:
                out.setdefault(c.hardware, []).append(c.backend)
        return out


def family_of(model: ModelArch) -> str:
    """The op-plan family that prices the model (aisim.timing.families), by its config."""
    from aisim.timing.families import DENSE_MODEL_TYPES

    if model.kv_lora_rank > 0:
        return "deepseek-dsa" if model.index_n_heads > 0 else "deepseek-mla"
    if model.num_experts > 0:
        return "moe"
    return "dense" if model.model_type in DENSE_MODEL_TYPES else f"({model.model_type})"


def precision_of(model: ModelArch) -> str:
    return model.weight_quant or model.torch_dtype


def probe_parallelism(model: ModelArch, hardware: str) -> dict[str, int]:
    """The smallest power-of-two group (at most one 8-GPU node) whose BF16 weights per GPU fit
    in 90 % of the GPU's memory; dense models split it by tensor parallelism, MoE models by
    tensor x expert parallelism, MLA models by attention-DP x expert parallelism."""
    from aisim.engine.spec import gpu_system
    from aisim.memory import model_family, weights_bytes

    capacity = 0.9 * float(gpu_system(hardware)["gpu"]["mem_capacity"])
    family = model_family(model)
    n = 1
    while n < 8:
        split = _split(family, n)
        per_gpu = weights_bytes(
            model,
            family,
            tensor=split["tensor"],
            pipeline=1,
            moe_tensor=split["moe_tensor"],
            moe_expert=split["moe_expert"],
            gemm_bytes=2.0,
            moe_bytes=2.0,
        )
        if per_gpu <= capacity:
            break
        n *= 2
    return _split(family, n)


def _split(family: str, n: int) -> dict[str, int]:
    if family in ("deepseek", "deepseek_v32"):
        return {"tensor": 1, "attention_data": n, "moe_tensor": 1, "moe_expert": n}
    if family == "moe":
        return {"tensor": n, "attention_data": 1, "moe_tensor": 1, "moe_expert": n}
    return {"tensor": n, "attention_data": 1, "moe_tensor": 1, "moe_expert": 1}


def _probe_config(model_id: str, hardware: str, backend: str, par: dict[str, int]) -> dict:
    return {
        "traffic": {
            "source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 128},
            "load": {"type": "concurrency", "concurrency": 1},
            "stop": {"requests": 1},
        },
        "engine": {
            "mode": "aggregated",
            "model": model_id,
            "hardware": hardware,
            "backend": backend,
            "backend_version": None,
            "workers": {
                "aggregated": {
                    "parallelism": {"replicas": 1, "pipeline": 1, **par},
                    "kv_cache": {"capacity": {"type": "fixed", "blocks": 4096}},
                    "timing": {"type": "default"},
                }
            },
        },
    }


def _deployment_text(par: dict[str, int]) -> str:
    names = {"tensor": "TP", "attention_data": "DP", "moe_expert": "EP"}
    return " ".join(f"{names[k]}{v}" for k, v in par.items() if k in names and v > 1) or "TP1"


def check(model_id: str, hardware: str, backend: str) -> Coverage:
    """Whether predict prices the model on the hardware and backend (current version)."""
    version = current_version(hardware, backend)
    if not priced_versions(hardware, backend):
        return Coverage(hardware, backend, "", "", False, f"no {backend} tables")
    model = load_model(model_id)
    par = probe_parallelism(model, hardware)
    key = _cache_key(model, hardware, backend, par)
    cached = _read_cached(key)
    if cached is not None:
        return cached
    result = Coverage(hardware, backend, version, _deployment_text(par), True, "")
    try:
        from aisim.config.load import parse_config
        from aisim.engine.spec import resolve
        from aisim.timing.provider import plan_for

        spec = resolve(parse_config(_probe_config(model_id, hardware, backend, par), _PROBE))
        plan_for(spec, _PROBE)
    except AisimError as exc:
        reason = exc.format_message()
        for prefix in (f"{_PROBE}.timing: ", f"{_PROBE}: "):
            reason = reason.removeprefix(prefix)
        result = dataclasses.replace(result, priced=False, reason=reason)
    _write_cached(key, result)
    return result


def catalog(
    models: tuple[str, ...] = (),
    hardware: tuple[str, ...] = (),
    backends: tuple[str, ...] = (),
    jobs: int | None = None,
) -> list[ModelEntry]:
    """The shipped models (or the given ones) with their coverage on the given hardware and
    backends (default: all)."""
    hardware = hardware or KNOWN_HARDWARE
    backends = backends or BACKENDS
    ids = list(models) or shipped_model_ids()
    combos = [(m, h, b) for m in ids for h in hardware for b in backends]
    jobs = jobs or min(len(combos), os.cpu_count() or 1)
    if jobs > 1 and any(_read_cached_combo(*c) is None for c in combos):
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_check_args, combos, chunksize=4))
    else:
        results = [check(*c) for c in combos]
    by_model: dict[str, list[Coverage]] = {}
    for (m, _, _), r in zip(combos, results, strict=True):
        by_model.setdefault(m, []).append(r)
    entries = []
    for m in ids:
        model = load_model(m)
        entries.append(
            ModelEntry(
                m, family_of(model), precision_of(model), model.num_layers, tuple(by_model[m])
            )
        )
    return entries


def _check_args(combo: tuple[str, str, str]) -> Coverage:
    return check(*combo)


def _read_cached_combo(model_id: str, hardware: str, backend: str) -> Coverage | None:
    if not priced_versions(hardware, backend):
        return Coverage(hardware, backend, "", "", False, "")
    model = load_model(model_id)
    return _read_cached(_cache_key(model, hardware, backend, probe_parallelism(model, hardware)))


def _cache_key(model: ModelArch, hardware: str, backend: str, par: dict[str, int]) -> str:
    from aisim.timing.plan_cache import manifest_bytes

    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(model), sort_keys=True).encode())
    digest.update(json.dumps([hardware, backend, par], sort_keys=True).encode())
    digest.update(manifest_bytes(hardware))
    digest.update(_code_digest())
    return digest.hexdigest()[:24]


@functools.cache
def _code_digest() -> bytes:
    """sha256 over every aisim source (config rules decide refusals too), once per process."""
    from aisim.timing.plan_cache import plan_sources

    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted({*root.rglob("*.py"), *plan_sources()}):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.digest()


def _cache_file(key: str) -> Path:
    from aisim.kernels._cache import cache_root

    return cache_root() / "coverage" / f"{key}.json"


def _read_cached(key: str) -> Coverage | None:
    try:
        return Coverage(**json.loads(_cache_file(key).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_cached(key: str, result: Coverage) -> None:
    path = _cache_file(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(result)))
        os.replace(tmp, path)
    except OSError:  # a read-only cache only costs the next listing its checks again
        pass


def render(entries: list[ModelEntry], hardware: tuple[str, ...] = ()) -> str:
    """One line per model: family, checkpoint weights, and the GPUs each backend prices it on."""
    hardware = hardware or KNOWN_HARDWARE
    backends = sorted({c.backend for e in entries for c in e.coverage}, key=BACKENDS.index)
    header = ["model", "family", "weights", *backends]
    rows = []
    for e in entries:
        cells = [e.model_id, e.family, e.precision]
        for b in backends:
            with_tables = [h for h in hardware if priced_versions(h, b)]
            priced = [c.hardware for c in e.coverage if c.backend == b and c.priced]
            if priced and priced == with_tables and len(with_tables) > 1:
                cells.append(f"all {len(priced)}")
            else:
                cells.append(" ".join(_short(h) for h in priced) or "-")
        rows.append(cells)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append(
        "Checked at each backend's current version, one deployment per model and GPU (--format "
        "json lists it and every refusal); other parallelisms can lack a table slice, which "
        "`aisim validate` names. 'all N': every GPU with that backend's tables."
    )
    return "\n".join(lines)


def _short(hardware: str) -> str:
    return hardware.removesuffix("_sxm").replace("rtx_pro_6000_server", "rtx_pro_6000")


def as_json(entries: list[ModelEntry]) -> list[dict]:
    return [dataclasses.asdict(e) for e in entries]

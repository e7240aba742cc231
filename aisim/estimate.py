"""`aisim estimate`: price single passes of a config's deployment, op by op.

The deployment (model, parallelism, backend, version, database mode) is resolved exactly as
`aisim predict` resolves it; each requested pass shape is priced by the same kernels the event
loop uses (`PassPricer`), so a figure printed here is the figure the simulator charges.

Shapes: ``--prefill BATCHxNEW[+PREFIX]`` (NEW new tokens per request on a cached PREFIX, so the
scheduler's isl is NEW + PREFIX) and ``--decode BATCHxCTX`` (CTX: context per request including
the token being decoded). With both flags, passes are also combined into mixed passes: the
additive PREFILL + DECODE and the duration the simulator's clock advances by (each phase rounded
to whole ns, nearest, then added).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from aisim.errors import AisimError, ConfigError
from aisim.kernels.units import round_ns as _round_ns_kernel

# the plain-Python body of the kernel helper: one rule, no compile for a CLI estimate
_kernel_round_ns = getattr(_round_ns_kernel, "py_func", _round_ns_kernel)

_PREFILL_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?:\+\s*(\d+)\s*)?$")
_DECODE_RE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


@dataclass(frozen=True)
class PrefillShape:
    batch: int
    new: int
    prefix: int = 0

    @property
    def isl(self) -> int:
        return self.new + self.prefix

    def label(self) -> str:
        return f"{self.batch}x{self.new}" + (f"+{self.prefix}" if self.prefix else "")


@dataclass(frozen=True)
class DecodeShape:
    batch: int
    ctx: int

    def label(self) -> str:
        return f"{self.batch}x{self.ctx}"


def parse_prefill(text: str) -> PrefillShape:
    m = _PREFILL_RE.match(text)
    if m is None:
        raise AisimError(
            f"--prefill {text!r}: expected BATCHxNEW[+PREFIX], e.g. 1x1024 or 8x512+512"
        )
    batch, new, prefix = int(m[1]), int(m[2]), int(m[3] or 0)
    if batch < 1:
        raise AisimError(f"--prefill {text!r}: batch must be at least 1")
    if new < 1:
        raise AisimError(
            f"--prefill {text!r}: NEW tokens must be at least 1 (the prefix must "
            "be shorter than isl = NEW + PREFIX)"
        )
    return PrefillShape(batch, new, prefix)


def parse_decode(text: str) -> DecodeShape:
    m = _DECODE_RE.match(text)
    if m is None:
        raise AisimError(f"--decode {text!r}: expected BATCHxCTX, e.g. 64x1100")
    batch, ctx = int(m[1]), int(m[2])
    if batch < 1:
        raise AisimError(f"--decode {text!r}: batch must be at least 1")
    if ctx < 1:
        raise AisimError(
            f"--decode {text!r}: context must be at least 1 (it includes the token being decoded)"
        )
    return DecodeShape(batch, ctx)


def round_ns(ms: float) -> int:
    """A phase duration as the simulator's clock takes it (kernels/units.py: round_ns)."""
    return int(_kernel_round_ns(ms))


def _pairs(prefills: list, decodes: list) -> list[tuple]:
    """Mixed passes: the i-th --prefill with the i-th --decode; a single one pairs with each."""
    if not prefills or not decodes:
        return []
    if len(prefills) == len(decodes):
        return list(zip(prefills, decodes, strict=True))
    if len(prefills) == 1:
        return [(prefills[0], d) for d in decodes]
    if len(decodes) == 1:
        return [(p, decodes[0]) for p in prefills]
    raise AisimError(
        f"--prefill / --decode: {len(prefills)} and {len(decodes)} shapes cannot be "
        "paired into mixed passes; give as many of each, or one of either"
    )


def estimate(
    config_path: str,
    overrides: tuple[str, ...],
    prefill: tuple[str, ...],
    decode: tuple[str, ...],
    detail: tuple[str, ...] = (),
    role: str | None = None,
) -> dict:
    """Price every requested pass on one worker role's deployment (`role`: needed for a
    disaggregated config, whose pools differ); the result is what `--format json` prints."""
    prefills = [parse_prefill(s) for s in prefill]
    decodes = [parse_decode(s) for s in decode]
    want_memory = "memory" in detail
    if not prefills and not decodes and not want_memory:
        raise AisimError(
            "--prefill / --decode: give at least one pass shape, e.g. "
            "--prefill 1x1024 --decode 1x1025 (or --detail memory)"
        )
    mixed = _pairs(prefills, decodes)

    from aisim.config import load_config
    from aisim.engine.spec import memory_breakdown

    cfg = load_config(config_path, overrides)
    spec = _role_spec(cfg, role)
    where = f"{cfg.source_path}: engine.workers.{spec.role}"
    memory = None
    if want_memory:
        worker = cfg.engine.workers[spec.role]
        memory = memory_breakdown(
            cfg, worker, spec.model, f"{where}.kv_cache.capacity", strict=False
        )
    if not prefills and not decodes:
        return {
            "config": str(config_path),
            "model": spec.model.model_id,
            "passes": [],
            "mixed": [],
            "memory": memory.as_dict(),
            "memory_lines": memory.lines(),
        }
    if spec.timing != "op_level":
        kind = {"op_level": "default"}.get(spec.timing, spec.timing)
        raise ConfigError(
            f"{where}.timing: aisim estimate prices op-level passes, but the config's timing is "
            f"{{type: {kind}}}; use timing: {{type: default}} (e.g. --set "
            f"'engine.workers.{spec.role}.timing={{type: default}}')"
        )

    from aisim.timing.pricer import PassPricer
    from aisim.timing.provider import data_version, plan_for

    plan = plan_for(spec, where)
    pricer = PassPricer(plan)
    passes = []
    for p in prefills:
        ops = pricer.prefill_breakdown(p.batch, p.isl, p.prefix)
        total = pricer.prefill(p.batch, p.isl, p.prefix)
        passes.append(
            {
                "kind": "prefill",
                "shape": p.label(),
                "batch": p.batch,
                "new_tokens": p.new,
                "prefix_tokens": p.prefix,
                "isl": p.isl,
                "total_ms": total,
                "ops": _ops(ops, total),
            }
        )
    for d in decodes:
        ops = pricer.decode_breakdown(d.batch, d.ctx)
        total = pricer.decode(d.batch, d.ctx)
        passes.append(
            {
                "kind": "decode",
                "shape": d.label(),
                "batch": d.batch,
                "ctx": d.ctx,
                "total_ms": total,
                "ops": _ops(ops, total),
            }
        )
    mixed_out = []
    for p, d in mixed:
        pre = pricer.prefill(p.batch, p.isl, p.prefix)
        dec = pricer.decode(d.batch, d.ctx)
        pre_ns, dec_ns = round_ns(pre), round_ns(dec)
        mixed_out.append(
            {
                "prefill": p.label(),
                "decode": d.label(),
                "prefill_ms": pre,
                "decode_ms": dec,
                "additive_ms": pre + dec,
                "prefill_ns": pre_ns,
                "decode_ns": dec_ns,
                "duration_ns": pre_ns + dec_ns,
                "duration_ms": (pre_ns + dec_ns) / 1e6,
                # what AISimulate's FPM API returns for the same mixed pass
                "fpm_3pass_ms": pricer.fpm_mixed((p.batch, p.isl, p.prefix), (d.batch, d.ctx)),
            }
        )
    return {
        "config": str(config_path),
        "model": spec.model.model_id,
        "role": spec.role,
        "hardware": spec.hardware,
        "backend": spec.backend,
        "backend_version": data_version(spec.backend, spec.backend_version, spec.hardware),
        "database_mode": spec.database_mode,
        "tensor_parallel": spec.tensor,
        "pipeline_parallel": spec.pipeline,
        "passes": passes,
        "mixed": mixed_out,
        **({"memory": memory.as_dict(), "memory_lines": memory.lines()} if memory else {}),
    }


def _role_spec(cfg, role: str | None):
    """The EngineSpec of the worker role whose passes are priced."""
    from aisim.engine.deployment import resolve_run

    roles = sorted(cfg.engine.workers)
    if role is None:
        if cfg.engine.mode == "aggregated":
            return resolve_run(cfg).pools[0]
        raise ConfigError(
            f"--role: {cfg.source_path} is {cfg.engine.mode} (its pools differ); "
            f"name the pool to price: --role {' or --role '.join(roles)}"
        )
    if role not in cfg.engine.workers:
        raise ConfigError(
            f"--role: {cfg.source_path} has no {role!r} worker; its roles: {', '.join(roles)}"
        )
    return resolve_run(cfg).pool(role)


def _ops(ops: list[tuple[str, float]], total: float) -> list[dict]:
    return [
        {"op": name, "ms": ms, "share_pct": 100.0 * ms / total if total > 0 else 0.0}
        for name, ms in ops
    ]


def render_json(result: dict) -> str:
    return json.dumps({k: v for k, v in result.items() if k != "memory_lines"}, indent=2)


def render_table(result: dict) -> str:
    memory = [
        f"KV memory of {result['model']} (per GPU):",
        *(f"  {line}" for line in result.get("memory_lines", ())),
    ]
    if not result["passes"]:
        return "\n".join(memory)
    pool = "" if result["role"] == "aggregated" else f", {result['role']} workers"
    lines = [
        f"{result['model']} on {result['hardware']}, {result['backend']} "
        f"{result['backend_version']}, TP {result['tensor_parallel']} "
        f"PP {result['pipeline_parallel']}, {result['database_mode']}{pool} "
        "(ms per pass per GPU)"
    ]
    for ps in result["passes"]:
        if ps["kind"] == "prefill":
            what = (
                f"prefill {ps['shape']}: batch {ps['batch']}, {ps['new_tokens']} new "
                f"+ {ps['prefix_tokens']} cached prefix (isl {ps['isl']})"
            )
        else:
            what = f"decode {ps['shape']}: batch {ps['batch']}, context {ps['ctx']}"
        lines += ["", f"{what}: {ps['total_ms']:.9f} ms"]
        width = max(len("op"), *(len(o["op"]) for o in ps["ops"]))
        lines.append(f"  {'op':<{width}}  {'ms':>12}  {'share %':>7}")
        for o in ps["ops"]:
            lines.append(f"  {o['op']:<{width}}  {o['ms']:>12.6f}  {o['share_pct']:>7.2f}")
        lines.append(f"  {'total':<{width}}  {ps['total_ms']:>12.6f}  {100.0:>7.2f}")
    for m in result["mixed"]:
        lines += [
            "",
            f"mixed pass prefill {m['prefill']} + decode {m['decode']}: "
            f"{m['prefill_ms']:.9f} + {m['decode_ms']:.9f} = {m['additive_ms']:.9f} ms "
            f"additive; as simulated {m['prefill_ns']} ns + {m['decode_ns']} ns = "
            f"{m['duration_ms']:.6f} ms (FPM API 3-pass composition: "
            f"{m['fpm_3pass_ms']:.9f} ms)",
        ]
    if "memory_lines" in result:
        lines += ["", *memory]
    return "\n".join(lines)

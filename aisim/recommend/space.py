"""The candidate space of a recommend run, enumerated in full (docs/recommend.md, "Space").

A candidate is one deployment mode, backend, parallel shape per role, scheduler limits, KV
block size and memory fraction per role, and one load value. The parallel shapes are
AISimulate's automatic pool (1, 2, 4, 8 or 16 GPUs per worker, pipeline 1; a dense model
splits by tensor parallelism, an MoE model by the TEP / DEP / MoE-TP patterns; replicas up to
the GPU budget) filtered by the knob domains, or the explicit preset list. A shape is pruned
before anything is simulated when the role's KV cache cannot hold one sequence of the context
length on a rank, or when the model cannot be split that way; the reason is kept.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from aisim.config.checks import Invalid
from aisim.errors import AisimError, ConfigError
from aisim.recommend.spec import (
    KNOBS,
    RecommendSpec,
    RoleSpace,
    role_block,
    role_fraction,
    role_scheduler,
)

LADDER = (1, 2, 4, 8, 16)
MODE_ROLES = {"aggregated": ("aggregated",), "disaggregated": ("prefill", "decode")}
BRANCH = {"aggregated": "agg", "disaggregated": "disagg"}
NOT_SIMULATED = {"sglang": "aisim does not simulate the SGLang scheduler yet"}


@dataclass(frozen=True)
class RoleChoice:
    shape: tuple[tuple[str, int], ...]  # the six parallelism knobs
    max_batched_tokens: int
    max_sequences: int
    block_size: int
    memory_fraction: float | None  # None: a fixed block count

    @property
    def par(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def gpus(self) -> int:
        p = self.par
        return p["tensor"] * p["pipeline"] * p["attention_data"] * p["replicas"]


@dataclass(frozen=True)
class Candidate:
    mode: str
    hardware: str
    backend: str
    backend_version: str
    roles: tuple[tuple[str, RoleChoice], ...]
    load: Any
    status: str = "pending"  # pending (to simulate) or a pre-simulation verdict
    reason_category: str | None = None
    reason: str | None = None
    notes: dict = field(default_factory=dict, compare=False)

    @property
    def used_gpus(self) -> int:
        return sum(choice.gpus for _, choice in self.roles)

    def role(self, name: str) -> RoleChoice:
        return dict(self.roles)[name]


def _shape(tp: int, dp: int, mtp: int, mep: int, replicas: int) -> tuple:
    par = {
        "replicas": replicas,
        "tensor": tp,
        "pipeline": 1,
        "attention_data": dp,
        "moe_tensor": mtp,
        "moe_expert": mep,
    }
    return tuple((k, par[k]) for k in KNOBS)


def worker_shapes(moe: bool, backend: str, budget: int) -> list[tuple[int, int, int, int]]:
    """(tensor, attention_data, moe_tensor, moe_expert) of one worker, automatic pool."""
    out = []
    for g in LADDER:
        if g > budget:
            break
        if not moe:
            out.append((g, 1, 1, 1))
            continue
        splits = [(a, g // a) for a in (*LADDER, 32, 64, 128) if a <= g and g % a == 0]
        for tp, dp in splits:
            for mtp, mep in splits:
                identity = g == 1
                tep = tp > 1 and dp == 1 and mtp == 1 and mep > 1
                dep = tp == 1 and dp > 1 and mtp == 1 and mep > 1
                moe_tp = mep == 1 and mtp > 1 and ((tp > 1 and dp == 1) or (tp == 1 and dp > 1))
                if not (identity or tep or dep or moe_tp):
                    continue
                if backend == "trtllm" and dp > 1 and tp > 1:
                    continue
                if backend == "vllm" and mtp > 1 and mep > 1:
                    continue
                out.append((tp, dp, mtp, mep))
    return out


def role_shapes(space: RoleSpace, moe: bool, backend: str, budget: int) -> list[tuple]:
    """Every shape (with replicas) of one role within the budget, knob domains applied."""
    if isinstance(space.preset, tuple):
        return [tuple((k, s[k]) for k in KNOBS) for s in space.preset]
    shapes = []
    for tp, dp, mtp, mep in worker_shapes(moe, backend, budget):
        g = tp * dp
        for r in range(1, budget // g + 1):
            shape = _shape(tp, dp, mtp, mep, r)
            if all(dom.admits(dict(shape)[k]) for k, dom in space.knobs.items()):
                shapes.append(shape)
    return shapes


def _gpus(shape: tuple) -> int:
    p = dict(shape)
    return p["tensor"] * p["pipeline"] * p["attention_data"] * p["replicas"]


class Space:
    """Builds, prunes and lists the candidates of a RecommendSpec."""

    def __init__(self, spec: RecommendSpec) -> None:
        from aisim.models import load_model

        self.spec = spec
        try:
            self.model = load_model(spec.engine_fixed["model"])
        except Invalid as exc:
            raise ConfigError(exc.line(spec.source)) from None
        self.moe = self.model.num_experts > 0
        self.pruned: list[Candidate] = []
        self.shape_verdicts: dict = {}  # (backend, role, shape) -> None or (category, reason)

    def context_length(self, role: str) -> int:
        space = self.spec.roles[role]
        value = space.fixed.get("context_length", self.spec.context_length)
        return self.model.max_position_embeddings if value == "max" else int(value)

    def version(self, hardware: str, backend: str) -> str:
        from aisim.config.registry import current_version

        v = self.spec.backend_version
        if isinstance(v, dict):
            v = v.get(backend)
        return v or current_version(hardware, backend)

    def candidates(self) -> list[Candidate]:
        """Every candidate in a deterministic order: mode, backend, shapes (fewest GPUs
        first), then the knob product; unsupported backends and pruned shapes are listed
        with their reason and never simulated."""
        spec = self.spec
        out: list[Candidate] = []
        lo = spec.min_gpus or 1
        for mode, hardware in itertools.product(spec.modes, spec.hardwares):
            roles = MODE_ROLES[mode]
            for backend in spec.backends:
                version = self.version(hardware, backend)
                if backend in NOT_SIMULATED:
                    out.append(
                        Candidate(
                            mode,
                            hardware,
                            backend,
                            version,
                            (),
                            None,
                            "unsupported",
                            "backend_topology",
                            NOT_SIMULATED[backend],
                        )
                    )
                    continue
                per_role = {
                    role: role_shapes(spec.roles[role], self.moe, backend, spec.max_gpus)
                    for role in roles
                }
                combos = self._shape_combos(roles, per_role, lo)
                for shapes in combos:
                    verdict = self._shapes_verdict(mode, hardware, backend, version, roles, shapes)
                    for knobs in self._knob_product(roles, backend):
                        choices = tuple(
                            (role, RoleChoice(shape, *knob))
                            for role, shape, knob in zip(roles, shapes, knobs, strict=True)
                        )
                        for load in spec.load.values:
                            if verdict is None:
                                out.append(
                                    Candidate(mode, hardware, backend, version, choices, load)
                                )
                            else:
                                out.append(
                                    Candidate(
                                        mode,
                                        hardware,
                                        backend,
                                        version,
                                        choices,
                                        load,
                                        "infeasible",
                                        *verdict,
                                    )
                                )
        return out

    def _shape_combos(self, roles, per_role, lo) -> list[tuple]:
        budget = self.spec.max_gpus
        if len(roles) == 1:
            (role,) = roles
            shapes = [s for s in per_role[role] if lo <= _gpus(s) <= budget]
            return sorted(((s,) for s in shapes), key=lambda c: _gpus(c[0]))
        pre, dec = (per_role[r] for r in roles)
        pairs = [(p, d) for p in pre for d in dec if lo <= _gpus(p) + _gpus(d) <= budget]
        return sorted(pairs, key=lambda c: _gpus(c[0]) + _gpus(c[1]))

    def _knob_product(self, roles, backend) -> list[tuple]:
        per_role = []
        for role in roles:
            space = self.spec.roles[role]
            mbt, mseq = role_scheduler(space)
            block = role_block(space, backend)
            fraction = role_fraction(space, backend)
            fractions = (None,) if fraction is None else fraction.values
            per_role.append(
                list(itertools.product(mbt.values, mseq.values, block.values, fractions))
            )
        return list(itertools.product(*per_role))

    def _shapes_verdict(self, mode, hardware, backend, version, roles, shapes):
        for role, shape in zip(roles, shapes, strict=True):
            key = (hardware, backend, role, shape)
            if key not in self.shape_verdicts:
                self.shape_verdicts[key] = self._shape_verdict(
                    mode, hardware, backend, version, role, shape
                )
            if self.shape_verdicts[key] is not None:
                return self.shape_verdicts[key]
        return None

    def _shape_verdict(self, mode, hardware, backend, version, role, shape):
        """None when the shape can hold one context-length sequence per rank, else
        (category, reason). The KV capacity is taken at the role's largest batched-token
        limit and smallest memory fraction (the tightest case the knobs can reach)."""
        from aisim.config.load import parse_config
        from aisim.engine.spec import memory_breakdown

        space = self.spec.roles[role]
        mbt, mseq = role_scheduler(space)
        block = min(role_block(space, backend).values)
        fraction = role_fraction(space, backend)
        choice = RoleChoice(
            shape,
            max(mbt.values),
            max(mseq.values),
            block,
            None if fraction is None else min(fraction.values),
        )
        probe = Candidate(
            mode, hardware, backend, version, ((role, choice),), self.spec.load.values[0]
        )
        from aisim.recommend.materialize import predict_config

        raw = predict_config(self.spec, probe, self, single_role=role)
        context = self.context_length(role)
        try:
            cfg = parse_config(raw, self.spec.source)
        except AisimError as exc:
            return "backend_topology", _short(str(exc), self.spec.source)
        if space.fixed_capacity_blocks is not None:
            tokens = space.fixed_capacity_blocks * block
        else:
            worker = cfg.engine.workers[role]
            try:
                est = memory_breakdown(
                    cfg, worker, self.model, f"engine.workers.{role}", strict=False
                )
            except AisimError as exc:
                return "backend_topology", _short(str(exc), self.spec.source)
            tokens = est.kv_tokens if est.blocks > 0 else 0
        if tokens <= context:
            return (
                "kv_capacity",
                f"{role} KV cache holds {tokens} tokens per rank, not one {context}-token "
                "sequence (engine.context_length)",
            )
        return None


def _short(message: str, source: str) -> str:
    return message.removeprefix(f"{source}: ")

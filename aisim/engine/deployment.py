"""What one simulation runs: one or more pools and the KV handoff between them.

A pool is one worker role's deployment (aisim.engine.spec.EngineSpec); an aggregated run has
one pool ("aggregated"), a disaggregated run a prefill and a decode pool joined by the KV
transfer (docs/rules.md 9). The workload is resolved once, apart from the pools.
"""

from __future__ import annotations

from dataclasses import dataclass

from aisim import state as st
from aisim.engine.spec import EngineSpec, resolve_role
from aisim.engine.workload import WorkloadSpec, resolve_workload
from aisim.errors import NotAvailableError


@dataclass(frozen=True)
class RunSpec:
    pools: tuple[EngineSpec, ...]  # (aggregated,) or (prefill, decode)
    workload: WorkloadSpec
    handoff: st.TransferParams | None = None  # the KV transfer between pools (P/D only)

    @property
    def role(self) -> str:
        """engine.mode as the outputs name it: aggregated | disaggregated."""
        return "aggregated" if self.handoff is None else "disaggregated"

    def pool(self, role: str) -> EngineSpec:
        for spec in self.pools:
            if spec.role == role:
                return spec
        raise KeyError(f"this run has no {role!r} pool; its pools: {self.roles}")

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(spec.role for spec in self.pools)

    @property
    def client(self) -> EngineSpec:
        """The pool whose tokens the client sees (the decode pool of a P/D run)."""
        return self.pools[-1]

    def with_workload(self, workload: WorkloadSpec) -> RunSpec:
        return RunSpec(self.pools, workload, self.handoff)


def resolve_run(cfg, workload: WorkloadSpec | None = None) -> RunSpec:
    """Validated config -> RunSpec: the pools engine.mode asks for, each checked against the
    workload; raises ConfigError / NotAvailableError / CapacityError."""
    from aisim.config import unsupported_features

    missing = unsupported_features(cfg)
    if missing:
        raise NotAvailableError(f"{cfg.source_path}: {missing[0]}")
    workload = workload or resolve_workload(cfg)
    if cfg.engine.mode != "disaggregated":
        return RunSpec((resolve_role(cfg, "aggregated", workload),), workload)
    if cfg.engine.nextn > 0:
        raise NotAvailableError(
            f"{cfg.source_path}: engine.nextn: native MTP with disaggregated prefill/decode is "
            "not available yet in aisim; use aggregated mode or nextn 0"
        )
    prefill = resolve_role(cfg, "prefill", workload)
    decode = resolve_role(cfg, "decode", workload)
    return RunSpec((prefill, decode), workload, _transfer(cfg, prefill))


def _transfer(cfg, prefill: EngineSpec) -> st.TransferParams:
    """engine.kv_transfer -> the transfer model (docs/rules.md 9.4)."""
    from aisim.memory import transfer_kv_bytes_per_token

    kvt = cfg.engine.kv_transfer
    bandwidth = 0.0
    bytes_per_token = 0.0
    full_prompt = False
    if kvt is not None:
        full_prompt = kvt.timing_mode == "full_prompt"
        if kvt.bandwidth_gb_per_second is not None:
            bandwidth = float(kvt.bandwidth_gb_per_second)
        if kvt.bytes_per_token == "auto":
            # KV bytes of one token on one source (prefill) rank
            bytes_per_token = float(
                transfer_kv_bytes_per_token(
                    prefill.model, prefill.tensor, prefill.kvcache_quant_mode
                )
            )
        else:
            bytes_per_token = float(kvt.bytes_per_token)
    return st.TransferParams(bytes_per_token, bandwidth, full_prompt)

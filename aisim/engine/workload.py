"""Resolve a validated Config's traffic into one WorkloadSpec: which requests arrive, and when.

The deployment of each pool (aisim.engine.spec.EngineSpec) and the workload are resolved apart:
a plan, a pass-time memo or a kernel specialization depends on the deployment alone, so sweep
points that differ only in traffic share them (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadSpec:
    load: str  # concurrency | poisson | constant_rate | trace_timestamps
    num_requests: int  # synthetic sources: requests to send (a trace counts its rows)
    concurrency: int = 0  # closed loop: requests in flight
    rate_per_s: float = 0.0  # poisson / constant_rate: requests per second
    seed: int = 42  # poisson arrivals
    input_tokens: int = 0  # synthetic prompt tokens
    output_tokens: int = 0  # synthetic output tokens, as configured
    cached_prefix_tokens: int = 0  # synthetic prompt tokens every request shares
    trace_path: str | None = None  # trace sources: the resolved JSONL file
    trace_block_size: int = 0  # tokens per trace hash id
    trace_format: str = "mooncake"  # mooncake | mooncake-delta (session rows accumulate)
    trace_speedup: float = 1.0  # trace_timestamps load: timestamps are divided by it
    max_time_ms: float = float("inf")  # soft cut-off (stop.max_virtual_time_seconds), ms
    turns: int = 1  # synthetic-session: turns per session (requests = sessions x turns)
    turn_delay_ms: float = 0.0  # synthetic-session: think time before each later turn, ms
    shared_prefix_ratio: float = 0.0  # synthetic-session: group-shared part of first prompts
    prefix_groups: int = 0  # synthetic-session: groups sharing a first-prompt prefix

    @property
    def closed_loop(self) -> bool:
        return self.load == "concurrency"

    @property
    def num_sessions(self) -> int:
        """Sessions of a synthetic-session source (each request is its own otherwise)."""
        return self.num_requests // self.turns


def resolve_workload(cfg) -> WorkloadSpec:
    """The workload of a validated Config (traffic.source, traffic.load, traffic.stop)."""
    src, load, stop = cfg.traffic.source, cfg.traffic.load, cfg.traffic.stop
    fields: dict = {}
    if stop.max_virtual_time_seconds is not None:
        fields["max_time_ms"] = float(stop.max_virtual_time_seconds) * 1000.0
    if src.TYPE == "trace":
        fields.update(
            trace_path=str(src.paths[0]),
            trace_block_size=int(src.block_size),
            trace_format=str(src.format),
            trace_speedup=float(getattr(load, "speedup", 1.0) or 1.0),
        )
    if src.TYPE == "synthetic-session":
        session = src.session
        fields.update(
            num_requests=(stop.num_sessions(load) or 0) * session.turns,
            rate_per_s=float(getattr(load, "sessions_per_second", 0.0) or 0.0),
            input_tokens=src.new_input_tokens_per_turn,
            output_tokens=src.output_tokens_per_turn,
            turns=session.turns,
            turn_delay_ms=float(session.inter_turn_delay_ms),
            shared_prefix_ratio=float(session.shared_prefix_ratio),
            prefix_groups=session.prefix_groups,
        )
    return WorkloadSpec(
        **{
            "load": getattr(load, "TYPE", "concurrency"),
            "num_requests": stop.num_requests(load) or 0,
            "concurrency": int(getattr(load, "concurrency", 0) or 0),
            "rate_per_s": float(getattr(load, "requests_per_second", 0.0) or 0.0),
            "seed": int(getattr(load, "seed", 42) or 0),
            "input_tokens": getattr(src, "input_tokens", 0),
            "output_tokens": getattr(src, "output_tokens", 0),
            "cached_prefix_tokens": getattr(src, "cached_prefix_tokens", 0),
            **fields,
        }
    )

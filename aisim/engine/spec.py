"""Resolve a validated Config into the EngineSpec of each pool: its deployment, computed once.

The traffic is resolved apart (aisim.engine.workload.WorkloadSpec); the checks that need both
(can a request finish, does the run's state fit in memory) take both."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from aisim.config.estimator import transfer_kinds
from aisim.engine.bounds import (
    check_pass_time,
    check_state_fits,
    never_finishing,
    never_finishing_message,
    rejected_at_admission,
)
from aisim.engine.workload import WorkloadSpec
from aisim.errors import CapacityError, ConfigError
from aisim.kernels.codes import Backend, LoadKind, TimingKind
from aisim.models import ModelArch, load_model

NO_LIMIT = np.iinfo(np.int64).max // 4


class KernelParams(NamedTuple):
    """Scalars of one run, as the kernels read them (fixed types: one compiled specialization)."""

    backend: int
    block_size: int
    num_blocks: int
    max_tokens: int
    max_seqs: int
    max_model_len: int
    prefix_caching: bool
    chunked_prefill: bool
    dp_size: int
    num_workers: int
    prefill_interval: int
    timing_kind: int
    prefill_ms: float
    decode_ms: float
    load_kind: int
    concurrency: int
    capture: bool
    lazy_decode: bool  # pass compression; False only to test that it changes nothing
    check_invariants: bool  # debug: check every rank's state after each pass start and end
    max_time_ms: float  # stop.max_virtual_time_seconds in ms (inf: run until the trace ends)
    nextn: int  # MTP draft tokens per decode step (0 = no MTP)
    capture_passes: bool = False  # write one PassLog row per rank per pass (--capture-passes)
    role: int = 0  # kernels.codes.Role: aggregated, or the prefill / decode side of P/D
    tok_threads: int = 0  # tokenizer threads per worker ahead of admission (0: none)
    tok_base_ms: float = 0.0  # tokenization time of a request: base ...
    tok_per_token_ms: float = 0.0  # ... plus this per prompt token
    sessions: bool = False  # the traffic is multi-turn sessions (kernels/sessions.py)


@dataclass(frozen=True)
class EngineSpec:
    role: str
    backend: str
    model: ModelArch
    replicas: int
    dp_size: int
    tensor: int
    pipeline: int
    block_size: int
    num_blocks: int  # per scheduler rank
    max_tokens: int
    max_seqs: int
    max_model_len: int | None  # None: no limit (TRT-LLM with context_length max)
    prefix_caching: bool
    chunked_prefill: bool
    prefill_interval: int
    timing: str  # fixed | polynomial | op_level
    prefill_ms: float
    decode_ms: float
    startup_ms: float
    backend_version: str | None = None  # op-time table version; None = newest
    database_mode: str = "SILICON"
    nextn: int = 0  # native MTP depth
    nextn_accepted: float | None = None  # mean accepted drafts per step (required iff nextn)
    moe_tensor: int = 1  # MoE parallelism (op-level pricing of MoE models)
    moe_expert: int = 1
    enable_shared_layer: bool | None = None  # False: primary table source only
    kv_precision: str | None = None  # capacity default: the KV dtype the memory model sized for
    hardware: str | None = None  # system of the op-time tables (engine.hardware, or the role's)
    # gemm / moe / kvcache / fmha quant_mode overrides of the checkpoint's dtypes ("" = none)
    quant_modes: tuple[str, str, str, str] = ("", "", "", "")
    # the transfer kinds EMPIRICAL may borrow utilisation with (sorted; every kind by default)
    transfers: tuple[str, ...] = transfer_kinds(None)
    # engine.tokenization on the pool requests arrive at: (threads per worker, base ms, ms per
    # prompt token); no threads = no tokenizer
    tokenization: tuple[int, float, float] = (0, 0.0, 0.0)

    @property
    def kvcache_quant_mode(self) -> str:
        """The role's kvcache_quant_mode override ("" = the checkpoint's KV dtype)."""
        return self.quant_modes[QUANT_MODE_KEYS.index("kvcache")]

    @property
    def num_ranks(self) -> int:
        return self.replicas * self.dp_size

    @property
    def gpus_per_worker(self) -> int:
        # AISimulate reports tensor x attention_data; the pipeline degree is not counted.
        return self.tensor * self.dp_size

    def kernel_params(
        self,
        workload: WorkloadSpec,
        capture: bool,
        lazy_decode: bool = True,
        check_invariants: bool = False,
        capture_passes: bool = False,
    ) -> KernelParams:
        return KernelParams(
            backend=int(Backend.TRTLLM if self.backend == "trtllm" else Backend.VLLM),
            block_size=self.block_size,
            num_blocks=self.num_blocks,
            max_tokens=self.max_tokens,
            max_seqs=self.max_seqs,
            max_model_len=NO_LIMIT if self.max_model_len is None else self.max_model_len,
            prefix_caching=bool(self.prefix_caching),
            chunked_prefill=bool(self.chunked_prefill),
            dp_size=self.dp_size,
            num_workers=self.replicas,
            prefill_interval=self.prefill_interval,
            timing_kind=int(
                {
                    "fixed": TimingKind.FIXED,
                    "polynomial": TimingKind.POLYNOMIAL,
                    "op_level": TimingKind.OP_LEVEL,
                }[self.timing]
            ),
            prefill_ms=float(self.prefill_ms),
            decode_ms=float(self.decode_ms),
            load_kind=int(LoadKind.CONCURRENCY if workload.closed_loop else LoadKind.OPEN),
            concurrency=workload.concurrency,
            capture=bool(capture),
            # bursts are random, so MTP decoders cannot be advanced implicitly
            lazy_decode=bool(lazy_decode) and self.nextn == 0,
            check_invariants=bool(check_invariants),
            max_time_ms=float(workload.max_time_ms),
            nextn=int(self.nextn),
            capture_passes=bool(capture_passes),
            tok_threads=int(self.tokenization[0]),
            tok_base_ms=float(self.tokenization[1]),
            tok_per_token_ms=float(self.tokenization[2]),
        )


def resolve(cfg, workload: WorkloadSpec | None = None) -> EngineSpec:
    """Config (mode aggregated) -> the EngineSpec of its one pool (the shortcut of
    aisim.engine.deployment.resolve_run for tools and tests); raises ConfigError /
    NotAvailableError / CapacityError."""
    from aisim.engine.deployment import resolve_run

    return resolve_run(cfg, workload).pool("aggregated")


def resolve_role(cfg, role: str, workload: WorkloadSpec) -> EngineSpec:
    """The EngineSpec of one worker role: aggregated, or prefill / decode (P/D); the workload
    is checked against it (a synthetic request that can never finish is refused here, a trace's
    requests once loaded)."""
    eng = cfg.engine
    worker = eng.workers[role]
    base = Path(cfg.source_path).parent if cfg.source_path else None
    model = load_model(eng.model, f"{cfg.source_path}: engine.model", base)
    par = worker.parallelism
    wpath = f"engine.workers.{role}"
    if model.num_attention_heads % par.tensor != 0:
        raise ConfigError(
            f"{cfg.source_path}: {wpath}.parallelism.tensor: {par.tensor} does not divide the "
            f"{model.num_attention_heads} attention heads of {eng.model}; use a divisor"
        )
    kvc = worker.kv_cache
    block_size = kvc.block_size
    cap_path = f"{cfg.source_path}: {wpath}.kv_cache.capacity"
    kv_precision = None
    if getattr(kvc.capacity, "TYPE", "fixed") == "default":
        breakdown = memory_breakdown(cfg, worker, model, cap_path)
        num_blocks = int(breakdown.blocks)
        kv_precision = breakdown.kv_quant_mode
    else:
        num_blocks = _fixed_blocks(cfg, kvc, model, par.tensor, f"{wpath}.kv_cache.capacity")
    if worker.context_length is not None:  # the role's own limit wins over the engine's
        max_model_len = int(worker.context_length)
    elif eng.context_length == "max":
        max_model_len = model.max_position_embeddings if eng.backend == "vllm" else None
    else:
        max_model_len = int(eng.context_length)
    timing = worker.timing
    timing_kind = getattr(timing, "TYPE", "fixed")
    if timing_kind == "default":
        timing_kind = "op_level"
    spec = EngineSpec(
        role=role,
        backend=eng.backend,
        model=model,
        replicas=par.replicas,
        dp_size=par.attention_data,
        tensor=par.tensor,
        pipeline=par.pipeline,
        block_size=block_size,
        num_blocks=num_blocks,
        max_tokens=worker.scheduler.max_batched_tokens,
        max_seqs=worker.scheduler.max_sequences,
        max_model_len=max_model_len,
        prefix_caching=bool(kvc.prefix_caching),
        chunked_prefill=eng.enable_chunked_prefill is not False,
        prefill_interval=(
            worker.scheduler.prefill_schedule_interval
            if eng.backend == "vllm" and par.attention_data > 1
            else 1
        ),
        timing=timing_kind,
        moe_tensor=par.moe_tensor,
        moe_expert=par.moe_expert,
        enable_shared_layer=eng.enable_shared_layer,
        backend_version=eng.backend_version,
        database_mode=str(getattr(timing, "database_mode", None) or eng.database_mode).upper(),
        prefill_ms=float(getattr(timing, "prefill_ms", 0.0) or 0.0),
        decode_ms=float(getattr(timing, "decode_ms", 0.0) or 0.0),
        # AISimulate 0.13 accepts startup_seconds but its replay ignores it (pinned golden)
        startup_ms=0.0,
        nextn=eng.nextn,
        nextn_accepted=eng.nextn_accepted,
        kv_precision=kv_precision,
        hardware=worker.hardware or eng.hardware,
        quant_modes=quant_modes(eng, worker, f"{cfg.source_path}: {wpath}"),
        transfers=transfer_kinds(
            role_policy
            if (role_policy := getattr(timing, "transfer_policy", None)) is not None
            else eng.transfer_policy
        ),
        tokenization=_tokenization(eng.tokenization, role),
    )
    check_pass_time(spec, cfg.source_path)
    if workload.trace_path is None:
        _check_can_finish(cfg, spec, workload)
        prompts, _ = _request_shapes(spec, workload)
        check_state_fits(
            spec,
            workload.num_requests,
            int(prompts.max()) + _output_tokens(spec, workload),
            cfg.source_path,
            "traffic.stop.sessions" if workload.turns > 1 else "traffic.stop.requests",
            sessions=workload.turns > 1,
        )
    return spec


def _tokenization(tok, role: str) -> tuple[int, float, float]:
    """EngineSpec.tokenization of a role: the tokenizer sits ahead of the pool requests arrive
    at. Per-token time in ms as AISimulate passes it to its engine (us / 1000, then times the
    prompt length: the product's rounding is part of the contract)."""
    if tok is None or role == "decode":
        return (0, 0.0, 0.0)
    return (int(tok.workers), float(tok.base_ms), float(tok.per_input_token_us) / 1000.0)


def _output_tokens(spec: EngineSpec, workload: WorkloadSpec) -> int:
    """Tokens a synthetic request emits (never below 0)."""
    return max(output_for(spec, workload.input_tokens, workload.output_tokens), 0)


def output_for(spec: EngineSpec, prompt: int, requested: int) -> int:
    """Tokens a request of `prompt` tokens emits on pool `spec`: truncated to the context,
    clamped to a TRT-LLM pool (docs/rules.md 3.2); aisim.traffic.truncated_outputs on arrays."""
    out = requested
    if spec.max_model_len is not None and prompt < spec.max_model_len:
        out = min(out, spec.max_model_len - prompt)
    if spec.backend == "trtllm":
        out = min(out, spec.num_blocks * spec.block_size - prompt)
    return out


def gpu_system(hardware: str = "b200_sxm") -> dict:
    """The GPU's system constants shipped with the compiled op-time table."""
    import json
    from importlib import resources

    path = resources.files("aisim.data") / "optables" / hardware / "system.json"
    return json.loads(path.read_text())


QUANT_MODE_KEYS = ("gemm", "moe", "kvcache", "fmha")


def quant_modes(eng, worker, where: str = "") -> tuple[str, str, str, str]:
    """The gemm / moe / kvcache / fmha quant_mode overrides of one role: its timing's, else the
    engine's ("" = the checkpoint's dtype). `where` ("FILE: engine.workers.ROLE") names an
    unknown one."""
    from aisim.memory import _QUANT_BYTES

    modes = []
    for k in QUANT_MODE_KEYS:
        key = f"{k}_quant_mode"
        role_mode = getattr(worker.timing, key, None)
        mode = str(role_mode or getattr(eng, key) or "")
        if mode and mode not in _QUANT_BYTES:
            source = where.split(": ")[0]
            field = f"{where}.timing.{key}" if role_mode else f"{source}: engine.{key}"
            known = ", ".join(sorted(_QUANT_BYTES))
            raise ConfigError(f"{field}: unknown quantization {mode!r}; use one of {known}")
        modes.append(mode)
    return tuple(modes)


def memory_breakdown(cfg, worker, model: ModelArch, where: str, strict: bool = True):
    """Every term of the memory model for one worker role (a fixed capacity is shown with the
    default memory fraction, so `aisim estimate --detail memory` works for any config).
    capacity {type: default} takes its block count from here, whatever the timing type."""
    from aisim.memory import kv_blocks_from_memory

    eng = cfg.engine
    par = worker.parallelism
    cap = worker.kv_cache.capacity
    memory_fraction = getattr(cap, "memory_fraction", None)
    cuda_graph = getattr(cap, "cuda_graph_reserved_bytes", None) or 0
    system = gpu_system(eng.hardware)
    role = next(r for r, w in eng.workers.items() if w is worker)
    gemm_q, moe_q, kv_q, _ = quant_modes(eng, worker, f"{cfg.source_path}: engine.workers.{role}")
    return kv_blocks_from_memory(
        model,
        gemm_quant_mode=gemm_q or None,
        moe_quant_mode=moe_q or None,
        kvcache_quant_mode=kv_q or None,
        backend=eng.backend,
        block_size=worker.kv_cache.block_size,
        tensor=par.tensor,
        pipeline=par.pipeline,
        attention_data=par.attention_data,
        moe_tensor=par.moe_tensor,
        moe_expert=par.moe_expert,
        memory_fraction=memory_fraction,
        cuda_graph_reserved_bytes=cuda_graph,
        gpu_memory_bytes=int(system["gpu"]["mem_capacity"]),
        max_batched_tokens=worker.scheduler.max_batched_tokens,
        decode_context=par.decode_context,
        nccl_mem_bytes={int(k): int(v) for k, v in system["misc"]["nccl_mem"].items()},
        runtime_overhead_bytes=int(system["misc"]["other_mem"]),
        where=where,
        strict=strict,
    )


def _fixed_blocks(cfg, kvc, model: ModelArch, tensor: int, path: str) -> int:
    cap = kvc.capacity
    if getattr(cap, "blocks", None) is not None:
        return int(cap.blocks)
    bpt = kvc.bytes_per_token
    if bpt == "auto":
        from aisim.memory import checkpoint_kv_bytes_per_token

        bpt = checkpoint_kv_bytes_per_token(model, tensor)
    blocks = int(cap.bytes) // (kvc.block_size * int(bpt))
    if blocks < 1:
        raise ConfigError(
            f"{cfg.source_path}: {path}.bytes: {cap.bytes} bytes hold no block of "
            f"{kvc.block_size} tokens x {bpt} bytes; raise the capacity"
        )
    return blocks


def no_request_can_complete(cfg, spec: EngineSpec, workload: WorkloadSpec) -> str | None:
    """Why no request of a synthetic workload can complete (each is rejected at admission),
    or None. Such a run is simulated as AISimulate does it (outputs written, exit 1);
    `aisim validate` says so up front with this reason."""
    if workload.trace_path is not None:
        return None
    wpath = f"engine.workers.{spec.role}"
    p, bs = workload.input_tokens, spec.block_size
    if spec.max_model_len is not None and p >= spec.max_model_len:
        limit = (
            f"{wpath}.context_length"
            if cfg.engine.workers[spec.role].context_length is not None
            else "engine.context_length"
        )
        outcome = "every handoff fails" if spec.role == "decode" else "each request is rejected"
        return (
            f"{limit}: every {p}-token prompt reaches the {spec.max_model_len}-token context, "
            f"so {outcome}"
        )
    if spec.role == "decode":
        return None
    if spec.backend == "vllm" and -(-p // bs) > spec.num_blocks:
        return (
            f"{wpath}.kv_cache.capacity.blocks: every {p}-token prompt needs "
            f"{-(-p // bs)} KV blocks of {bs} tokens but a rank has {spec.num_blocks}, so "
            "each request is rejected at admission; raise the capacity"
        )
    return None


def _check_can_finish(cfg, spec: EngineSpec, workload: WorkloadSpec) -> None:
    """Reject deployments on which a request can never finish (AISimulate loops or aborts).
    A session's turns are checked one by one (their prompts grow)."""
    where = f"{cfg.source_path}: engine.workers.{spec.role}"
    prompts, requested = _request_shapes(spec, workload)
    stuck, need, out = never_finishing(spec, prompts, requested)
    rejected = rejected_at_admission(spec, prompts)
    for k, p in enumerate(prompts.tolist()):
        if stuck[k]:
            raise CapacityError(never_finishing_message(where, p, int(out[k]), int(need[k]), spec))
        if rejected[k]:
            # rejected, reported as "no request completed" when every request is (a decode
            # pool: the handoff fails), as AISimulate does
            continue
        if not spec.chunked_prefill and p > spec.max_tokens and spec.role != "decode":
            # the first prompt on a rank has no cache hit, so it could never be scheduled
            turn = f"turn {k} of every session: " if workload.turns > 1 else ""
            raise CapacityError(
                f"{where}.scheduler.max_batched_tokens: {spec.max_tokens} is smaller than a "
                f"{turn}{p}-token prompt and engine.enable_chunked_prefill is false; the prompt "
                "could never be scheduled. Raise max_batched_tokens or enable chunked prefill"
            )


def _request_shapes(spec: EngineSpec, workload: WorkloadSpec) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, requested output) of every distinct request shape of a synthetic source: one,
    or one per turn of a session."""
    if workload.turns > 1:
        from aisim.traffic_session import turn_lengths

        prompts, requested, _ = turn_lengths(spec, workload)
        return prompts, requested
    return (
        np.array([workload.input_tokens], dtype=np.int64),
        np.array([workload.output_tokens], dtype=np.int64),
    )

"""aisim.config: the six seed workloads, defaults, --set overrides, strict types, frozen results.

Self-contained: every config is written inline (or into tmp_path); no network, no ../shared.
"""
# ruff: noqa: E501  (the seed workload YAML below is copied verbatim, long lines included)

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from aisim.config import (
    ConcurrencyLoad,
    Config,
    ConstantRateLoad,
    DefaultCapacity,
    DefaultTiming,
    FixedCapacity,
    FixedTiming,
    PoissonLoad,
    PolynomialTiming,
    Stop,
    SyntheticSource,
    TraceSource,
    TraceTimestampsLoad,
    apply_overrides,
    load_config,
    parse_config,
    unsupported_features,
)
from aisim.errors import ConfigError

# --------------------------------------------------------------------------- seed workloads

DENSE_VLLM = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: 65536}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  context_length: max
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""

DENSE_TRTLLM = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: 65536}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: trtllm
  backend_version: "1.3.0rc20"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  context_length: max
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 32, prefix_caching: true, capacity: {type: fixed, blocks: 32768}}
      timing: {type: default}
"""

MLA_DP8 = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 128}
  stop: {requests: 32768}
engine:
  mode: aggregated
  model: deepseek-ai/DeepSeek-V3.2
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  context_length: max
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {replicas: 2, tensor: 1, pipeline: 1, attention_data: 8, moe_tensor: 1, moe_expert: 8}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""

MTP_VLLM = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: 65536}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  context_length: max
  nextn: 2
  nextn_accepted: 1.5
  enable_shared_layer: true
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""

PD_VLLM = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: 40960}
engine:
  mode: disaggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  estimation_mode: op_level
  database_mode: SILICON
  fallback_policy: deny
  context_length: max
  enable_shared_layer: true
  kv_transfer: {bandwidth_gb_per_second: 400.0, timing_mode: destination_missing}
  workers:
    prefill:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 16}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
    decode:
      parallelism: {replicas: 2, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: default}
"""

VLLM_C256_FIXED = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 256}
  stop: {requests: 262144}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  context_length: max
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1, moe_tensor: 1, moe_expert: 1}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: fixed, prefill_ms: 1, decode_ms: 1}
"""

SEEDS = {
    "dense-vllm": DENSE_VLLM,
    "dense-trtllm": DENSE_TRTLLM,
    "mla-dp8": MLA_DP8,
    "mtp-vllm": MTP_VLLM,
    "pd-vllm": PD_VLLM,
    "vllm-c256-fixed": VLLM_C256_FIXED,
}

# (concurrency, requests, model, backend, version, nextn, roles, tensor, dp, replicas, blocks, bs)
SEED_FACTS = {
    "dense-vllm": (64, 65536, "Qwen/Qwen3-32B", "vllm", "0.24.0", 0, ("aggregated",), 4, 1, 1, 16384, 64),
    "dense-trtllm": (64, 65536, "Qwen/Qwen3-32B", "trtllm", "1.3.0rc20", 0, ("aggregated",), 4, 1, 1, 32768, 32),
    "mla-dp8": (128, 32768, "deepseek-ai/DeepSeek-V3.2", "vllm", "0.24.0", 0, ("aggregated",), 1, 8, 2, 16384, 64),
    "mtp-vllm": (64, 65536, "Qwen/Qwen3-32B", "vllm", "0.24.0", 2, ("aggregated",), 4, 1, 1, 16384, 64),
    "pd-vllm": (64, 40960, "Qwen/Qwen3-32B", "vllm", "0.24.0", 0, ("prefill", "decode"), 4, 1, 1, 16384, 64),
    "vllm-c256-fixed": (256, 262144, "Qwen/Qwen3-32B", "vllm", "0.24.0", 0, ("aggregated",), 4, 1, 1, 16384, 64),
}  # fmt: skip


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_seed_workload_loads(tmp_path: Path, name: str) -> None:
    cfg = load_config(write(tmp_path, SEEDS[name], f"{name}.yaml"))
    conc, nreq, model, backend, version, nextn, roles, tp, dp, reps, blocks, bs = SEED_FACTS[name]
    assert isinstance(cfg, Config)
    assert cfg.source_path.endswith(f"{name}.yaml")
    src, load, stop = cfg.traffic.source, cfg.traffic.load, cfg.traffic.stop
    assert src == SyntheticSource(input_tokens=1024, output_tokens=128)
    assert load == ConcurrencyLoad(concurrency=conc)
    assert stop.requests == nreq and stop.num_requests(load) == nreq
    eng = cfg.engine
    assert (eng.model, eng.hardware, eng.backend, eng.backend_version) == (
        model,
        "b200_sxm",
        backend,
        version,
    )
    assert eng.context_length == "max"
    assert eng.database_mode == "SILICON" and eng.fallback_policy == "deny"
    assert eng.nextn == nextn
    assert eng.nextn_accepted == (1.5 if nextn else None)
    assert tuple(eng.workers) == roles
    assert cfg.evaluation is None and cfg.execution is None
    for w in eng.workers.values():
        assert w.kv_cache.block_size == bs
        assert w.kv_cache.prefix_caching is True
        assert w.kv_cache.bytes_per_token == "auto"
        assert w.kv_cache.capacity == FixedCapacity(blocks=blocks)
        assert w.kv_cache.num_blocks_per_rank() == blocks
        assert w.parallelism.tensor == tp and w.parallelism.attention_data == dp
        assert w.scheduler.max_batched_tokens == 8192
        assert w.scheduler.prefill_schedule_interval == 1
        assert w.startup_seconds == 0.0 and w.hardware is None
    first = next(iter(eng.workers.values()))
    assert first.parallelism.replicas == reps


def test_seed_specifics(tmp_path: Path) -> None:
    fixed = load_config(write(tmp_path, VLLM_C256_FIXED))
    agg = fixed.engine.workers["aggregated"]
    assert agg.timing == FixedTiming(prefill_ms=1.0, decode_ms=1.0)
    assert isinstance(agg.timing.prefill_ms, float)
    assert fixed.engine.estimation_mode == "auto"  # default
    assert fixed.engine.enable_shared_layer is None
    assert unsupported_features(fixed) == []

    dense = load_config(write(tmp_path, DENSE_VLLM))
    assert dense.engine.estimation_mode == "op_level"
    assert dense.engine.enable_shared_layer is True
    assert isinstance(dense.engine.workers["aggregated"].timing, DefaultTiming)

    mla = load_config(write(tmp_path, MLA_DP8))
    par = mla.engine.workers["aggregated"].parallelism
    assert (par.moe_expert, par.moe_tensor, par.pipeline) == (8, 1, 1)
    assert par.gpus_per_worker == 8

    pd = load_config(write(tmp_path, PD_VLLM))
    assert pd.engine.mode == "disaggregated"
    assert pd.engine.kv_transfer is not None
    assert pd.engine.kv_transfer.bandwidth_gb_per_second == 400.0
    assert pd.engine.kv_transfer.timing_mode == "destination_missing"
    assert pd.engine.kv_transfer.bytes_per_token == "auto"
    assert pd.engine.workers["prefill"].scheduler.max_sequences == 16
    assert pd.engine.workers["decode"].parallelism.replicas == 2


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("dense-vllm", []),
        ("dense-trtllm", []),
        ("mla-dp8", []),  # valid config; DeepSeek op plans stop later (aisim.timing.provider)
        ("mtp-vllm", []),
        ("pd-vllm", []),
        ("vllm-c256-fixed", []),
    ],
)
def test_unsupported_features_of_seeds(tmp_path: Path, name: str, expected: list[str]) -> None:
    lines = unsupported_features(load_config(write(tmp_path, SEEDS[name])))
    assert [line.split(":")[0] for line in lines] == expected
    for line in lines:
        assert "not available yet in aisim" in line
        assert "\n" not in line


# --------------------------------------------------------------------------- defaults

NO_TRAFFIC = {
    "engine": {
        "model": "Qwen/Qwen3-32B",
        "hardware": "b200_sxm",
        "workers": {
            "aggregated": {
                "kv_cache": {"capacity": {"type": "fixed", "blocks": 100}},
                "timing": {"type": "fixed", "prefill_ms": 7.3, "decode_ms": 1.7},
            }
        },
    }
}


MINIMAL = {
    "traffic": {
        "source": {"type": "synthetic", "input_tokens": 64, "output_tokens": 8},
        "load": {"type": "concurrency"},
        "stop": {"requests": 10},
    },
    **NO_TRAFFIC,
}


def cfg_with(*overrides: str, base: dict | None = None) -> Config:
    return parse_config(apply_overrides(base or MINIMAL, overrides), "t.yaml")


def test_traffic_omitted_means_default_traffic() -> None:
    cfg = cfg_with(base=NO_TRAFFIC)
    assert cfg.traffic.source == SyntheticSource(input_tokens=1024, output_tokens=128)
    assert cfg.traffic.load == ConcurrencyLoad(concurrency=10)
    assert cfg.traffic.stop == Stop(requests=100)


def test_engine_and_worker_defaults() -> None:
    eng = cfg_with().engine
    assert eng.mode == "aggregated" and eng.backend == "vllm" and eng.backend_version is None
    assert eng.estimation_mode == "auto" and eng.context_length == "max"
    assert eng.nextn == 0 and eng.enable_chunked_prefill is None and eng.kv_transfer is None
    assert eng.speculation is None and eng.tokenization is None and dict(eng.estimator_config) == {}
    w = eng.workers["aggregated"]
    assert (w.parallelism.replicas, w.parallelism.tensor, w.parallelism.pipeline) == (1, 1, 1)
    assert w.parallelism.prefill_context is None
    assert w.scheduler.max_batched_tokens == 8192 and w.scheduler.max_sequences == 256
    assert w.scheduler.prefill_decode_interval == 0
    assert w.kv_cache.block_size == 64 and w.kv_cache.prefix_caching is True
    assert w.startup_seconds == 0.0


def test_backend_dependent_defaults() -> None:
    trt = cfg_with("engine.backend=trtllm").engine.workers["aggregated"]
    assert trt.kv_cache.block_size == 32
    sgl = cfg_with(
        "engine.backend=sglang", "engine.workers.aggregated.kv_cache.capacity={type: default}"
    ).engine.workers["aggregated"]
    assert sgl.kv_cache.block_size == 1
    assert sgl.kv_cache.capacity == DefaultCapacity(memory_fraction=0.88)
    vll = cfg_with("engine.workers.aggregated.kv_cache.capacity={}").engine.workers["aggregated"]
    assert vll.kv_cache.capacity == DefaultCapacity(
        memory_fraction=0.9, cuda_graph_reserved_bytes=0
    )
    assert vll.kv_cache.num_blocks_per_rank() is None
    default_timing = cfg_with("engine.workers.aggregated.timing={}").engine.workers["aggregated"]
    assert isinstance(default_timing.timing, DefaultTiming)


def test_prefill_role_defaults_to_one_sequence() -> None:
    worker = MINIMAL["engine"]["workers"]["aggregated"]
    base = {"engine": {**MINIMAL["engine"], "mode": "disaggregated"}}  # no traffic: defaults
    base["engine"]["workers"] = {"prefill": worker, "decode": worker}
    eng = parse_config(base, "pd.yaml").engine
    assert eng.workers["prefill"].scheduler.max_sequences == 1
    assert eng.workers["decode"].scheduler.max_sequences == 256
    assert eng.kv_transfer is None


def test_loads_and_resolved_defaults() -> None:
    poisson = cfg_with("traffic.load={type: poisson, requests_per_second: 20}").traffic.load
    assert poisson == PoissonLoad(requests_per_second=20.0, seed=42)
    seeded = cfg_with("traffic.load={type: poisson, requests_per_second: 5, seed: 7}").traffic
    assert seeded.load.seed == 7
    rate = cfg_with("traffic.load={type: constant_rate, requests_per_second: 30}").traffic.load
    assert rate == ConstantRateLoad(requests_per_second=30.0)
    # keys of another load type are ignored at their default value (as AISimulate does)
    cfg = cfg_with("traffic.load={type: concurrency, requests_per_second: null, seed: null}")
    assert cfg.traffic.load == ConcurrencyLoad(concurrency=10)
    assert cfg_with("traffic.load={}").traffic.load == ConcurrencyLoad(concurrency=10)


@pytest.mark.parametrize(
    ("load", "x", "expected"),
    [
        ("{type: concurrency, concurrency: 5}", 24.5, 122),  # 122.5 rounds half to even
        ("{type: concurrency, concurrency: 5}", 2.5, 12),  # 12.5 -> 12
        ("{type: concurrency, concurrency: 3}", 1.5, 4),  # 4.5 -> 4
        ("{type: concurrency, concurrency: 2}", 1.75, 4),  # 3.5 -> 4
        ("{type: concurrency, concurrency: 2}", 0.1, 1),  # at least one request
        ("{type: poisson, requests_per_second: 10}", 0.5, 5),  # rate loads use req/s
        ("{type: constant_rate, requests_per_second: 10}", 0.25, 2),  # 2.5 -> 2
    ],
)
def test_requests_per_load_unit(load: str, x: float, expected: int) -> None:
    cfg = cfg_with(f"traffic.load={load}", f"traffic.stop={{requests_per_load_unit: {x}}}")
    assert cfg.traffic.stop.num_requests(cfg.traffic.load) == expected


def test_polynomial_timing_and_lax_fields() -> None:
    w = cfg_with(
        "engine.workers.aggregated.timing={type: polynomial}",
        "engine.workers.aggregated.kv_cache.prefix_caching=off",
        "engine.workers.aggregated.startup_seconds='2.5'",
    ).engine.workers["aggregated"]
    assert w.timing == PolynomialTiming()
    assert w.kv_cache.prefix_caching is False
    assert w.startup_seconds == 2.5
    # AISimulate reads these few fields leniently; so does aisim
    for text, value in [("'true'", True), ("0", False), ("no", False)]:
        kv = cfg_with(f"engine.workers.aggregated.kv_cache.prefix_caching={text}").engine
        assert kv.workers["aggregated"].kv_cache.prefix_caching is value
    fixed = cfg_with("engine.workers.aggregated.timing.prefill_ms='7.5'").engine
    assert fixed.workers["aggregated"].timing.prefill_ms == 7.5


def test_bytes_capacity_blocks() -> None:
    kv = (
        cfg_with(
            "engine.workers.aggregated.kv_cache={block_size: 16, bytes_per_token: 1024, "
            "capacity: {type: fixed, bytes: 10000000}}"
        )
        .engine.workers["aggregated"]
        .kv_cache
    )
    assert kv.capacity == FixedCapacity(bytes=10_000_000)
    assert kv.num_blocks_per_rank() == 10_000_000 // (16 * 1024)


def test_case_normalised_database_mode_and_sla() -> None:
    cfg = cfg_with(
        "engine.workers.aggregated.timing={}",
        "engine.database_mode=silicon",
        "evaluation.sla={ttft_ms: 200, itl_ms: 20}",
        "execution.resources.cpu_limit=4",
    )
    assert cfg.engine.database_mode == "SILICON"
    assert cfg.evaluation is not None and cfg.evaluation.sla is not None
    assert (cfg.evaluation.sla.ttft_ms, cfg.evaluation.sla.itl_ms) == (200.0, 20.0)
    assert cfg.evaluation.sla.e2e_ms is None
    assert cfg.execution is not None and cfg.execution["resources"]["cpu_limit"] == 4


def test_unsupported_feature_lines() -> None:
    cfg = cfg_with(
        "engine.workers.aggregated.timing={}",
        "engine.workers.aggregated.kv_cache.capacity={type: default}",
        "engine.tokenization={workers: 2}",
        "engine.speculation={kind: ngram, num_speculative_tokens: 1, acceptance_rates: [0.5]}",
    )
    lines = unsupported_features(cfg)
    # the tokenizer is simulated (docs/rules.md 2.3), speculation is not
    assert [line.split(":")[0] for line in lines] == ["engine.speculation"]
    session = cfg_with(
        "traffic={source: {type: synthetic-session, session: {turns: 2}}, load: {}, "
        "stop: {sessions: 3}}"
    )
    assert unsupported_features(session) == []  # sessions are simulated (docs/rules.md 10.5)
    assert unsupported_features(cfg_with("engine.backend=sglang"))[0].startswith("engine.backend")


def test_trace_paths_resolve_against_config_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "traces").mkdir()
    trace = tmp_path / "traces" / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 64, "output_length": 4, "hash_ids": [1]}\n')
    text = VLLM_C256_FIXED.replace(
        "  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}\n"
        "  load: {type: concurrency, concurrency: 256}\n"
        "  stop: {requests: 262144}\n",
        "  source: {type: trace, paths: [traces/t.jsonl]}\n  load: {type: trace_timestamps}\n",
    )
    path = write(tmp_path, text)
    monkeypatch.chdir("/")
    cfg = load_config(path)
    assert isinstance(cfg.traffic.source, TraceSource)
    assert cfg.traffic.source.paths == (str(trace.resolve()),)
    assert cfg.traffic.source.block_size == 512 and cfg.traffic.source.format == "mooncake"
    assert cfg.traffic.load == TraceTimestampsLoad(speedup=1.0)
    assert cfg.traffic.stop == Stop() and cfg.traffic.stop.num_requests(cfg.traffic.load) is None
    assert unsupported_features(cfg) == []  # mooncake trace replay is available


# --------------------------------------------------------------------------- --set


def test_set_overrides_applied_in_order(tmp_path: Path) -> None:
    path = write(tmp_path, VLLM_C256_FIXED)
    cfg = load_config(
        path,
        [
            "traffic.load.concurrency=8",
            "traffic.load.concurrency=16",
            "traffic.stop.requests=   32",
            "engine.workers.aggregated.scheduler.max_sequences=512",
        ],
    )
    assert cfg.traffic.load == ConcurrencyLoad(concurrency=16)
    assert cfg.traffic.stop.requests == 32
    assert cfg.engine.workers["aggregated"].scheduler.max_sequences == 512
    assert "concurrency: 256" in path.read_text()  # the file itself is untouched


def test_set_replaces_whole_mapping_and_creates_intermediates() -> None:
    raw = {"a": {"b": 1}}
    out = apply_overrides(raw, ["a={x: 2}", "c.d.e=[1, 2]", "f=null", "g='3'", "h=", "i=k=v"])
    assert out == {"a": {"x": 2}, "c": {"d": {"e": [1, 2]}}, "f": None, "g": "3", "h": None,
                   "i": "k=v"}  # fmt: skip
    assert raw == {"a": {"b": 1}}  # input not modified
    # an explicit null intermediate is replaced by a mapping
    assert apply_overrides({"a": None}, ["a.b=1"]) == {"a": {"b": 1}}
    assert apply_overrides({}, []) == {}


def test_set_swaps_load_type() -> None:
    cfg = cfg_with(
        "traffic={source: {type: synthetic}, load: {}, stop: {requests: 5}}",
        "traffic.load={type: poisson, requests_per_second: 20}",
    )
    assert cfg.traffic.load == PoissonLoad(requests_per_second=20.0, seed=42)


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("engine", "expected PATH=YAML_VALUE"),
        ("engine.workers.0.scheduler=1", "list indices are not supported"),
        ("engine..model=x", "empty key"),
        ("=1", "empty key"),
        ("engine.model.name=x", "engine.model is 'm', not a mapping"),
        ("optimization.x=1", "'optimization' is not part of a predict config"),
        ("optimizer=1", "'optimizer' is not part of a predict config"),
        ("traffic.stop.requests=[1", "invalid YAML value"),
    ],
)
def test_bad_set(flag: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides({"engine": {"model": "m"}}, [flag], source="c.yaml")
    msg = info.value.message
    assert msg.startswith(f"c.yaml: --set {flag!r}")
    assert needle in msg and "\n" not in msg


def test_set_through_load_config_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, VLLM_C256_FIXED)
    with pytest.raises(ConfigError, match=r"cfg\.yaml: --set 'traffic': expected PATH"):
        load_config(path, ["traffic"])
    with pytest.raises(ConfigError, match=r"traffic\.load\.concurrency: must be a positive"):
        load_config(path, ["traffic.load.concurrency=0"])


# --------------------------------------------------------------------------- strict types


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("1.0", "1.0 (a float); write 1 without a decimal point"),
        ("'1'", "'1' (a string); remove the quotes"),
        ("true", "true (a boolean)"),
        ("null", "null"),
        ("[1]", "[1] (a list)"),
    ],
)
def test_integers_are_strict(text: str, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg_with(f"traffic.load={{type: concurrency, concurrency: {text}}}")
    assert info.value.message == (
        f"t.yaml: traffic.load.concurrency: must be a positive integer, got {shown}"
    )


def test_floats_accept_ints_but_not_bools_or_strings() -> None:
    cfg = cfg_with("traffic.load={type: poisson, requests_per_second: 3}")
    assert cfg.traffic.load.requests_per_second == 3.0
    assert isinstance(cfg.traffic.load.requests_per_second, float)
    for bad in ("true", "'3'", ".inf", ".nan"):
        with pytest.raises(ConfigError, match=r"traffic\.load\.requests_per_second: must be"):
            cfg_with(f"traffic.load={{type: poisson, requests_per_second: {bad}}}")


def test_int_fields_everywhere_are_strict() -> None:
    for path in (
        "engine.workers.aggregated.parallelism.tensor",
        "engine.workers.aggregated.scheduler.max_batched_tokens",
        "engine.workers.aggregated.kv_cache.block_size",
        "engine.workers.aggregated.kv_cache.capacity.blocks",
        "engine.nextn",
        "traffic.stop.requests",
    ):
        with pytest.raises(ConfigError, match=rf"t\.yaml: {path}: .*got 4\.0 \(a float\)"):
            cfg_with("traffic.stop={requests: 4}", f"{path}=4.0")


# --------------------------------------------------------------------------- frozen results


def test_results_are_frozen() -> None:
    cfg = cfg_with()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.engine = cfg.engine  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.traffic.load.concurrency = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.engine.workers["aggregated"].scheduler.max_sequences = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.engine.workers["decode"] = cfg.engine.workers["aggregated"]  # type: ignore[index]
    cfg2 = cfg_with()
    assert cfg == cfg2 and hash(cfg) == hash(cfg2)


def test_every_field_is_documented() -> None:
    import ast
    import inspect
    import textwrap

    from aisim.config import schema

    for name in schema.__all__:
        cls = getattr(schema, name)
        if not (inspect.isclass(cls) and dataclasses.is_dataclass(cls)):
            continue
        assert cls.__doc__, name
        body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body  # type: ignore[attr-defined]
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if isinstance(stmt, ast.AnnAssign) and "ClassVar" not in ast.unparse(stmt.annotation):
                field_name = ast.unparse(stmt.target)
                assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), (
                    f"{name}.{field_name} has no docstring"
                )

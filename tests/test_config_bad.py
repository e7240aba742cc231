"""Bad configs: each one raises ConfigError with one line naming the file and the dotted path.

Unless marked "aisim only", AISimulate 0.13.0 rejects the same config (checked by running it).
"""
# ruff: noqa: E501  (one case per line keeps the table below readable)

from __future__ import annotations

from pathlib import Path

import pytest

from aisim.config import load_config
from aisim.errors import ConfigError

BASE = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 4}
  load: {type: concurrency, concurrency: 2}
  stop: {requests: 4}
engine:
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  workers:
    aggregated:
      parallelism: {tensor: 4}
      kv_cache: {capacity: {type: fixed, blocks: 1000}}
      timing: {type: fixed, prefill_ms: 1, decode_ms: 1}
"""

PD = {
    "engine.mode=disaggregated",
    "engine.workers={prefill: {kv_cache: {capacity: {type: fixed, blocks: 100}}, "
    "timing: {type: fixed, prefill_ms: 1, decode_ms: 1}}, "
    "decode: {kv_cache: {capacity: {type: fixed, blocks: 100}}, "
    "timing: {type: fixed, prefill_ms: 1, decode_ms: 1}}}",
}
W = "engine.workers.aggregated"
SESSION = "traffic.source={type: synthetic-session, session: {turns: 2}}"

# (id, --set overrides, dotted path in the message, fragment of the message)
CASES: list[tuple[str, list[str], str, str]] = [
    # top level and traffic
    ("unknown-top-level", ["trafic.x=1"], "", "unknown top-level section 'trafic' (did you mean 'traffic'?)"),
    ("null-section", ["traffic=null"], "traffic", "must be a mapping, got null"),
    ("unknown-key-suggest", ["traffic.load.concurency=3"], "traffic.load.concurency", "did you mean 'concurrency'?"),
    ("concurrency-zero", ["traffic.load.concurrency=0"], "traffic.load.concurrency", "must be a positive integer, got 0"),
    ("concurrency-null", ["traffic.load.concurrency=null"], "traffic.load.concurrency", "must be a positive integer, got null"),
    ("input-tokens-float", ["traffic.source.input_tokens=64.0"], "traffic.source.input_tokens", "got 64.0 (a float)"),
    ("output-tokens-bool", ["traffic.source.output_tokens=true"], "traffic.source.output_tokens", "got true (a boolean)"),
    ("cached-prefix-too-long", ["traffic.source.cached_prefix_tokens=65"], "traffic.source.cached_prefix_tokens", "must not exceed input_tokens (64)"),
    ("source-type-missing", ["traffic.source={input_tokens: 5}"], "traffic.source.type", "is required"),
    ("source-type-unknown", ["traffic.source={type: synthetc}"], "traffic.source.type", "did you mean 'synthetic'?"),
    ("load-type-unknown", ["traffic.load.type=poison"], "traffic.load.type", "valid: concurrency, poisson"),
    ("load-recommend-only", ["traffic.load={type: kv_capacity_fraction, fraction: 0.5}"], "traffic.load.type", "recommend"),
    ("load-key-of-other-type", ["traffic.load={type: poisson, requests_per_second: 10, concurrency: 4}"], "traffic.load.concurrency", "not accepted by load type 'poisson'"),
    ("seed-on-concurrency", ["traffic.load={type: concurrency, seed: 3}"], "traffic.load.seed", "not accepted by load type 'concurrency'"),
    ("poisson-without-rate", ["traffic.load={type: poisson}"], "traffic.load.requests_per_second", "is required"),
    ("rate-not-finite", ["traffic.load={type: constant_rate, requests_per_second: .inf}"], "traffic.load.requests_per_second", "finite"),
    ("session-rate-for-requests", ["traffic.load={type: poisson, requests_per_second: 1, sessions_per_second: 3}"], "traffic.load.sessions_per_second", "does not match a synthetic source"),
    ("trace-timestamps-synthetic", ["traffic.load={type: trace_timestamps}"], "traffic.load.type", "cannot use trace timestamps"),
    ("stop-missing", ["traffic.stop=null"], "traffic.stop", "needs a request stop"),
    ("stop-two-conditions", ["traffic.stop={requests: 2, requests_per_load_unit: 1.5}"], "traffic.stop", "exactly one count condition"),
    ("stop-sessions-for-synthetic", ["traffic.stop={sessions: 4}"], "traffic.stop", "needs a request stop"),
    ("stop-virtual-time-synthetic", ["traffic.stop={requests: 4, max_virtual_time_seconds: 10}"], "traffic.stop.max_virtual_time_seconds", "only valid for trace sources"),
    ("session-stop-requests", [SESSION], "traffic.stop", "needs a session stop"),
    ("session-shape-missing", ["traffic.source={type: synthetic-session}", "traffic.stop={sessions: 2}"], "traffic.source.session", "is required"),
    ("session-prefix-groups", ["traffic.source={type: synthetic-session, session: {turns: 2, shared_prefix_ratio: 0.5}}", "traffic.stop={sessions: 2}"], "traffic.source.session.prefix_groups", "must be positive"),
    ("session-turns", ["traffic.source={type: synthetic-session, session: {turns: 1}}", "traffic.stop={sessions: 2}"], "traffic.source.session.turns", "must be an integer >= 2, got 1"),
    ("trace-two-paths", ["traffic.source={type: trace, paths: [a.jsonl, b.jsonl]}", "traffic.load={type: trace_timestamps}", "traffic.stop=null"], "traffic.source.paths", "exactly one file"),
    ("trace-paths-not-list", ["traffic.source={type: trace, paths: a.jsonl}", "traffic.load={type: trace_timestamps}", "traffic.stop=null"], "traffic.source.paths", "must be a list"),
    ("trace-missing-file", ["traffic.source={type: trace, paths: [nope.jsonl]}", "traffic.load={type: trace_timestamps}", "traffic.stop=null"], "traffic.source.paths[0]", "trace file not found"),  # aisim only (AISimulate fails late)
    ("trace-poisson", ["traffic.source={type: trace, paths: [t.jsonl]}", "traffic.load={type: poisson, requests_per_second: 1}", "traffic.stop=null"], "traffic.load.type", "trace_timestamps or concurrency"),
    ("trace-request-stop", ["traffic.source={type: trace, paths: [t.jsonl]}", "traffic.load={type: trace_timestamps}"], "traffic.stop.requests", "not accepted for trace sources"),
    # engine
    ("model-missing", ["engine.model=null"], "engine.model", "must be a non-empty string"),
    ("hardware-auto", ["engine.hardware=auto"], "engine.hardware", "recommend"),
    ("hardware-unknown", ["engine.hardware=h300_sxm"], "engine.hardware", "unknown hardware, got 'h300_sxm'; did you mean 'h200_sxm'?"),
    ("hardware-without-database", ["engine.hardware=l4"], "engine.hardware", "ships no performance database for this system, got 'l4'; use one of: a100_sxm, b200_sxm"),
    ("hardware-without-backend", ["engine.hardware=b60", "engine.backend=trtllm"], "engine.backend", "no performance database for this backend on 'b60', got 'trtllm'; use vllm there"),
    ("backend-version-a100-next", ["engine.hardware=a100_sxm", "engine.backend_version=next"], "engine.backend_version", "use current = 0.14.0, the alias 'current', or null"),
    ("backend-version-b60-next", ["engine.hardware=b60", "engine.backend_version=next"], "engine.backend_version", "use current = 0.28.0, previous = 0.26.0"),
    ("backend-version-unknown", ["engine.backend_version=9.9.9"], "engine.backend_version", "use current = 0.24.0, next = 0.31.0"),  # aisim only
    # AISimulate 0.13 has data for these but refuses them as versions under op-level timing; under
    # the fixed timing here it takes any string, aisim refuses them (docs/rules.md 3.4)
    ("backend-version-vllm-0.25.0", ["engine.backend_version=0.25.0"], "engine.backend_version", "is not a version AISimulate 0.13 accepts for backend 'vllm' on 'b200_sxm', got '0.25.0'"),  # aisim only
    ("backend-version-vllm-0.27.1", ["engine.backend_version=0.27.1"], "engine.backend_version", "got '0.27.1'"),  # aisim only
    ("backend-version-previous", ["engine.backend_version=previous"], "engine.backend_version", "got 'previous'"),  # aisim only
    ("backend-version-trtllm-rc11", ["engine.backend=trtllm", "engine.backend_version=1.3.0rc11"], "engine.backend_version", "use current = 1.3.0rc20, next = 1.3.0rc23"),  # aisim only
    ("backend-unknown", ["engine.backend=TRTLLM"], "engine.backend", "must be one of 'vllm', 'trtllm', 'sglang'"),
    ("mode-unknown", ["engine.mode=Aggregated"], "engine.mode", "did you mean 'aggregated'?"),
    ("context-length-word", ["engine.context_length=maximum"], "engine.context_length", "positive integer or 'max'"),
    ("nextn-range", ["engine.nextn=6", "engine.nextn_accepted=1.0"], "engine.nextn", "must be an integer in [0, 5], got 6"),
    ("nextn-needs-accepted", ["engine.nextn=2"], "engine.nextn_accepted", "is required when nextn > 0"),
    ("accepted-needs-nextn", ["engine.nextn_accepted=0.5"], "engine.nextn_accepted", "needs nextn > 0"),
    ("accepted-above-nextn", ["engine.nextn=2", "engine.nextn_accepted=2.5", f"{W}.timing={{}}"], "engine.nextn_accepted", "within [0, nextn] = [0, 2]"),
    ("mtp-needs-default-timing", ["engine.nextn=2", "engine.nextn_accepted=1.5"], "engine.nextn", "needs default timing in every worker role"),
    ("estimator-policy-fixed-timing", ["engine.estimation_mode=op_level"], "engine.estimation_mode", "needs default timing"),
    ("shared-layer-fixed-timing", ["engine.enable_shared_layer=false"], "engine.enable_shared_layer", "needs default timing"),
    ("speculation-and-nextn", ["engine.nextn=1", "engine.nextn_accepted=0.5", f"{W}.timing={{}}", "engine.speculation={kind: ngram, num_speculative_tokens: 1, acceptance_rates: [0.5]}"], "engine.speculation", "cannot be combined with nextn"),
    ("ngram-rates-length", ["engine.speculation={kind: ngram, num_speculative_tokens: 2, acceptance_rates: [0.5]}"], "engine.speculation.acceptance_rates", "one rate per speculative token"),
    ("kv-transfer-aggregated", ["engine.kv_transfer={bandwidth_gb_per_second: 10}"], "engine.kv_transfer", "only valid in disaggregated mode"),
    ("afd-without-topology", ["engine.mode=afd"], "engine.afd", "is required when mode is 'afd'"),
    # workers
    ("workers-null", ["engine.workers=null"], "engine.workers", "must be a mapping, got null"),
    ("workers-role-missing", ["engine.workers={}"], f"{W}", "is required in aggregated mode"),
    ("workers-wrong-role", ["engine.workers.prefill={}"], "engine.workers.prefill", "is not a worker role of aggregated mode"),
    ("workers-unknown-role", ["engine.workers.agregated={}"], "engine.workers.agregated", "did you mean 'aggregated'?"),
    ("pd-missing-decode", [*sorted(PD), "engine.workers.decode=null"], "engine.workers.decode", "is required in disaggregated mode"),
    ("pd-missing-prefill", [*sorted(PD), "engine.workers.prefill=null"], "engine.workers.prefill", "is required in disaggregated mode"),
    ("pd-aggregated-role", [*sorted(PD), "engine.workers.aggregated={}"], "engine.workers.aggregated", "is not a worker role of disaggregated mode"),
    ("pd-mooncake-delta", [*sorted(PD), "traffic.source={type: trace, paths: [t.jsonl], format: mooncake-delta}", "traffic.load={type: trace_timestamps}", "traffic.stop=null"], "traffic.source.format", "'mooncake-delta' needs engine.mode: aggregated"),
    ("pd-bandwidth-zero", [*sorted(PD), "engine.kv_transfer={bandwidth_gb_per_second: 0}"], "engine.kv_transfer.bandwidth_gb_per_second", "must be"),
    ("pd-timing-mode", [*sorted(PD), "engine.kv_transfer={timing_mode: whole}"], "engine.kv_transfer.timing_mode", "destination_missing"),
    ("pd-bytes-per-token", [*sorted(PD), "engine.kv_transfer={bytes_per_token: -1}"], "engine.kv_transfer.bytes_per_token", "auto"),
    ("pd-decode-host-loop", [*sorted(PD), "engine.workers.decode.host_loop=false"], "engine.workers.decode.host_loop", "not accepted for the decode role"),
    ("role-hardware-aggregated", [f"{W}.hardware=b200_sxm"], f"{W}.hardware", "needs disaggregated prefill/decode workers"),
    ("host-loop-vllm", [f"{W}.host_loop=true"], f"{W}.host_loop", "only supported with backend 'sglang'"),
    ("tensor-zero", [f"{W}.parallelism.tensor=0"], f"{W}.parallelism.tensor", "must be a positive integer, got 0"),
    ("parallelism-typo", [f"{W}.parallelism.tensr=2"], f"{W}.parallelism.tensr", "did you mean 'tensor'?"),
    ("max-sequences-zero", [f"{W}.scheduler.max_sequences=0"], f"{W}.scheduler.max_sequences", "must be a positive integer"),
    ("sglang-knob-on-vllm", [f"{W}.scheduler.prefill_decode_interval=1"], f"{W}.scheduler.prefill_decode_interval", "SGLang setting"),
    ("vllm-knob-on-trtllm", ["engine.backend=trtllm", f"{W}.scheduler.prefill_schedule_interval=2"], f"{W}.scheduler.prefill_schedule_interval", "vLLM setting"),
    ("block-size-one", [f"{W}.kv_cache.block_size=1"], f"{W}.kv_cache.block_size", "must be >= 2 for vLLM"),
    ("prefix-caching-two", [f"{W}.kv_cache.prefix_caching=2"], f"{W}.kv_cache.prefix_caching", "must be true or false"),
    ("bytes-per-token-zero", [f"{W}.kv_cache.bytes_per_token=0"], f"{W}.kv_cache.bytes_per_token", "positive integer or 'auto'"),
    ("capacity-null", [f"{W}.kv_cache.capacity=null"], f"{W}.kv_cache.capacity", "must be a mapping"),
    ("capacity-type-unknown", [f"{W}.kv_cache.capacity={{type: foo}}"], f"{W}.kv_cache.capacity.type", "valid: fixed, default"),
    ("fixed-capacity-empty", [f"{W}.kv_cache.capacity={{type: fixed}}"], f"{W}.kv_cache.capacity", "needs blocks or bytes"),
    ("fixed-capacity-both", [f"{W}.kv_cache.capacity={{type: fixed, blocks: 1, bytes: 100000}}"], f"{W}.kv_cache.capacity.bytes", "cannot be combined with blocks"),
    ("fixed-rejects-fraction", [f"{W}.kv_cache.capacity={{type: fixed, blocks: 100, memory_fraction: 0.5}}"], f"{W}.kv_cache.capacity.memory_fraction", "not accepted by capacity type 'fixed'"),
    ("fixed-rejects-cuda-graph", [f"{W}.kv_cache.capacity={{type: fixed, blocks: 100, cuda_graph_reserved_bytes: 5}}"], f"{W}.kv_cache.capacity.cuda_graph_reserved_bytes", "not accepted by capacity type 'fixed'"),
    ("default-rejects-blocks", [f"{W}.kv_cache.capacity={{blocks: 100}}"], f"{W}.kv_cache.capacity.blocks", "not accepted by capacity type 'default'"),
    ("memory-fraction-zero", [f"{W}.kv_cache.capacity={{type: default, memory_fraction: 0}}"], f"{W}.kv_cache.capacity.memory_fraction", "in (0, 1]"),
    ("bytes-capacity-block-size", [f"{W}.kv_cache.capacity={{type: fixed, bytes: 10000000}}"], f"{W}.kv_cache.block_size", "must be given explicitly"),
    ("bytes-capacity-auto-bpt", [f"{W}.kv_cache.capacity={{type: fixed, bytes: 10000000}}", f"{W}.kv_cache.block_size=16"], f"{W}.kv_cache.bytes_per_token", "must be a number of bytes"),
    ("bytes-capacity-too-small", [f"{W}.kv_cache={{block_size: 16, bytes_per_token: 1024, capacity: {{type: fixed, bytes: 100}}}}"], f"{W}.kv_cache.capacity.bytes", "holds no whole block"),
    ("fixed-timing-missing-decode", [f"{W}.timing={{type: fixed, prefill_ms: 1}}"], f"{W}.timing.decode_ms", "is required for fixed timing"),
    ("fixed-timing-negative", [f"{W}.timing.prefill_ms=-1"], f"{W}.timing.prefill_ms", "non-negative"),
    ("fixed-timing-estimator", [f"{W}.timing.estimation_mode=op_level"], f"{W}.timing.estimation_mode", "not accepted by timing type 'fixed'"),
    ("fixed-timing-forward-model", [f"{W}.timing.forward_model=fpm"], f"{W}.timing.forward_model", "not accepted by timing type 'fixed'"),
    ("polynomial-rejects-ms", [f"{W}.timing.type=polynomial"], f"{W}.timing.prefill_ms", "not accepted by timing type 'polynomial'"),
    ("default-rejects-ms", [f"{W}.timing={{prefill_ms: 1, decode_ms: 2}}"], f"{W}.timing.prefill_ms", "not accepted by timing type 'default'"),
    ("timing-type-unknown", [f"{W}.timing.type=constant"], f"{W}.timing.type", "valid: default, fixed, polynomial"),
    ("startup-negative", [f"{W}.startup_seconds=-1"], f"{W}.startup_seconds", "non-negative"),
    # evaluation / execution
    ("sla-e2e-and-ttft", ["evaluation.sla={ttft_ms: 100, e2e_ms: 1000}"], "evaluation.sla.e2e_ms", "cannot be combined"),
    ("sla-unknown-key", ["evaluation.sla={tpot_ms: 5}"], "evaluation.sla.tpot_ms", "unknown key"),
    ("sla-zero", ["evaluation.sla={ttft_ms: 0}"], "evaluation.sla.ttft_ms", "must be a positive number"),
    ("execution-unknown-key", ["execution.resources.foo=4"], "execution.resources.foo", "unknown key"),
]  # fmt: skip


@pytest.fixture
def base_file(tmp_path: Path) -> Path:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "output_length": 4, "hash_ids": [1]}\n')
    path = tmp_path / "bad.yaml"
    path.write_text(BASE)
    return path


def test_base_is_valid(base_file: Path) -> None:
    cfg = load_config(base_file)
    assert cfg.engine.workers["aggregated"].parallelism.tensor == 4


def test_enough_distinct_cases() -> None:
    assert len({c[0] for c in CASES}) == len(CASES) >= 30
    assert len({tuple(c[1]) for c in CASES}) == len(CASES)


@pytest.mark.parametrize(
    ("overrides", "path", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_config(base_file: Path, overrides: list[str], path: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(base_file, overrides)
    msg = info.value.message
    assert "\n" not in msg
    prefix = f"{base_file}: {path}: " if path else f"{base_file}: "
    assert msg.startswith(prefix), msg
    assert fragment in msg, msg
    assert info.value.exit_code == 2


# --------------------------------------------------------------------------- file-level errors


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "must hold one YAML mapping (traffic:, engine:, ...), but it is empty"),
        ("- 1\n- 2\n", "must hold one YAML mapping (traffic:, engine:, ...), but it is a list"),
        ("plain text\n", "must hold one YAML mapping (traffic:, engine:, ...), but it is a str"),
        ("traffic: [\n", "invalid YAML: "),
        ("a: 1\n\tb: 2\n", "invalid YAML: "),
    ],
)
def test_unreadable_yaml(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message.startswith(f"{path}: ")
    assert fragment in info.value.message and "\n" not in info.value.message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: config file not found$"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load_config(tmp_path)


def test_duplicated_key_is_an_error(tmp_path: Path) -> None:
    """aisim only: AISimulate silently keeps the last of two equal keys."""
    path = tmp_path / "dup.yaml"
    path.write_text(BASE.replace("concurrency: 2}", "concurrency: 2, concurrency: 3}"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.message == (
        f"{path}: traffic.load.concurrency: key appears twice in the same mapping (line 3); "
        "keep only one"
    )
    nested = tmp_path / "dup2.yaml"
    nested.write_text(BASE + "  model: other\n")
    with pytest.raises(
        ConfigError, match=r"dup2\.yaml: engine\.model: key appears twice .*line 13"
    ):
        load_config(nested)


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    text = (
        BASE.replace(
            "  workers:\n    aggregated:\n",
            "  mode: disaggregated\n  workers:\n    prefill: &w\n",
        )
        + "    decode:\n      <<: *w\n      parallelism: {tensor: 2}\n"
    )
    path = tmp_path / "merge.yaml"
    path.write_text(text)
    cfg = load_config(path)
    assert cfg.engine.workers["prefill"].parallelism.tensor == 4
    assert cfg.engine.workers["decode"].parallelism.tensor == 2


def test_first_error_wins_in_walk_order(base_file: Path) -> None:
    # unknown keys of a mapping come before its field values; traffic before engine
    with pytest.raises(ConfigError, match=r"traffic\.load\.x: unknown key"):
        load_config(base_file, ["traffic.load.concurrency=0", "traffic.load.x=1", "engine.nextn=9"])
    with pytest.raises(ConfigError, match=r"traffic\.load\.concurrency: "):
        load_config(base_file, ["engine.nextn=9", "traffic.load.concurrency=0"])

"""Small configs shared by the parquet / sweep / plot / API tests."""

OP_LEVEL = """\
traffic:
  source: {type: synthetic, input_tokens: 256, output_tokens: 24}
  load: {type: concurrency, concurrency: 8}
  stop: {requests: 48}
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
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4, pipeline: 1, attention_data: 1}
      scheduler: {max_batched_tokens: 1024, max_sequences: 64}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 4096}}
      timing: {type: default}
"""

# KV pressure (preemptions), two workers with two attention-DP ranks each, a shared prefix
PRESSURE = """\
traffic:
  source: {type: synthetic, input_tokens: 64, output_tokens: 96, cached_prefix_tokens: 32}
  load: {type: concurrency, concurrency: 24}
  stop: {requests: 60}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  context_length: max
  workers:
    aggregated:
      parallelism: {replicas: 2, tensor: 4, pipeline: 1, attention_data: 2}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 30}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""

# disaggregated, op-level on both pools (one plan: the roles differ only in their pools)
PD_OP_LEVEL = """\
traffic:
  source: {type: synthetic, input_tokens: 300, output_tokens: 16, cached_prefix_tokens: 64}
  load: {type: concurrency, concurrency: 6}
  stop: {requests: 24}
engine:
  mode: disaggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  backend_version: "0.24.0"
  kv_transfer: {bandwidth_gb_per_second: 50}
  workers:
    prefill:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 256, max_sequences: 4}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 400}}
      timing: {type: default}
    decode:
      parallelism: {replicas: 2, tensor: 4}
      scheduler: {max_batched_tokens: 1024, max_sequences: 8}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 400}}
      timing: {type: default}
"""

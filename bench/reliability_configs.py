"""The configs and trace fixtures the reliability probes (bench/reliability_probes.py) run."""

from __future__ import annotations

import json

QUICK = """\
traffic:
  source: {type: synthetic, input_tokens: 1024, output_tokens: 128}
  load: {type: concurrency, concurrency: 64}
  stop: {requests: REQUESTS}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 64, prefix_caching: true, capacity: {type: fixed, blocks: 16384}}
      timing: {type: fixed, prefill_ms: 22.9, decode_ms: 7.5}
"""

TRACE_CONFIG = """\
traffic:
  source: {type: trace, paths: [trace.jsonl], format: mooncake, block_size: 16}
  load: {type: trace_timestamps}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  backend: vllm
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      scheduler: {max_batched_tokens: 8192, max_sequences: 256}
      kv_cache: {block_size: 16, prefix_caching: true, capacity: {type: fixed, blocks: 4000}}
      timing: {type: fixed, prefill_ms: 7.3, decode_ms: 1.7}
"""

ALIAS_BOMB = """\
traffic:
  source: {type: synthetic}
  stop: {requests: 10}
  load:
    type: concurrency
    concurrency:
      - &a [x, x, x, x, x, x, x, x, x, x]
      - &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
      - &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
      - &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
      - &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
      - &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
      - &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
      - &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
      - [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
engine: {model: Qwen/Qwen3-32B, hardware: b200_sxm}
"""


TRACE_CASES = {
    "negative input_length": lambda rows: rows[1].update(input_length=-5),
    "NaN timestamp": "NaN",
    "timestamp 1e300": lambda rows: rows[2].update(timestamp=1e300),
    "two objects on one line": "two",
    "out-of-order timestamps": lambda rows: (
        rows[0].update(timestamp=25),
        rows[2].update(timestamp=0),
    ),
    "100,000-deep brackets": "deep",
    "string input_length": lambda rows: rows[1].update(input_length="40"),
    "missing hash_ids": lambda rows: rows[1].pop("hash_ids"),
}


def trace_text(kind) -> str:
    rows = [
        {"timestamp": 10 * i, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}
        for i in range(4)
    ]
    if callable(kind):
        kind(rows)
    lines = [json.dumps(r) for r in rows]
    if kind == "NaN":
        lines[1] = lines[1].replace('"timestamp": 10,', '"timestamp": NaN,')
    if kind == "two":
        lines[0:2] = [lines[0] + lines[1]]
    if kind == "deep":
        lines.insert(2, "[" * 100000 + "]" * 100000)
    return "\n".join(lines) + "\n"

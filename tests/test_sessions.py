"""Multi-turn synthetic sessions (docs/rules.md 10.5): turn lengths, prefix groups, records and
refusals. End-to-end parity is in tests/golden/session-* (tests/test_golden.py); the kernel's
release of turns is checked against tests/reference/scheduler.py (test_kernel_vs_reference)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from aisim.cli import main
from aisim.config import load_config, unsupported_features
from aisim.engine.deployment import resolve_run
from aisim.errors import CapacityError, ConfigError, NotAvailableError
from aisim.kernels.rng import below
from aisim.prediction import run_prediction
from aisim.traffic import role_traffic
from aisim.traffic_session import shared_blocks, turn_lengths
from tests.reference.stdrng import StdRng

SESSIONS = """\
traffic:
  source:
    type: synthetic-session
    new_input_tokens_per_turn: {new}
    output_tokens_per_turn: {out}
    session: {{turns: {turns}, inter_turn_delay_ms: 5, shared_prefix_ratio: {ratio},
               prefix_groups: {groups}}}
  load: {{type: concurrency, concurrency: 2}}
  stop: {{sessions: 3}}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  context_length: {ctx}
  workers:
    aggregated:
      parallelism: {{replicas: 1, tensor: 4}}
      scheduler: {{max_batched_tokens: 4096, max_sequences: 64}}
      kv_cache: {{block_size: {bs}, capacity: {{type: fixed, blocks: {blocks}}}}}
      timing: {{type: fixed, prefill_ms: 10, decode_ms: 1}}
"""


def _config(tmp_path: Path, **kw) -> str:
    values = dict(new=100, out=20, turns=3, ratio=0.0, groups=0, ctx="max", bs=16, blocks=400)
    values.update(kw)
    path = tmp_path / "sessions.yaml"
    path.write_text(SESSIONS.format(**values))
    return str(path)


def _run(tmp_path: Path, **kw):
    path = _config(tmp_path, **kw)
    run = resolve_run(load_config(path))
    return run, role_traffic(run.pools[0], run.workload)


def test_a_turn_prompt_is_the_conversation_so_far(tmp_path: Path) -> None:
    run, traffic = _run(tmp_path)
    assert traffic.prompt_len.tolist() == [100, 220, 340] * 3
    assert traffic.turn.tolist() == [0, 1, 2] * 3
    assert traffic.turn_delay_ms.tolist() == [0.0, 5.0, 5.0] * 3
    assert run.workload.num_requests == 9


def test_a_rejected_turn_adds_no_output_to_the_next(tmp_path: Path) -> None:
    # context 235: turn 1 (220) is truncated to 15 output tokens, turn 2 (220 + 15 + 100 = 335)
    # is rejected, so turn 3 is 335 + 100 with no output of turn 2
    run, _ = _run(tmp_path, turns=4, ctx=235)
    prompts, requested, outs = turn_lengths(run.pools[0], run.workload)
    assert prompts.tolist() == [100, 220, 335, 435]
    assert requested.tolist() == [20] * 4
    assert outs.tolist()[:2] == [20, 15]


def test_group_prefix_blocks_round_half_away_from_zero(tmp_path: Path) -> None:
    # 100 tokens in blocks of 16: 7 blocks x 0.5 = 3.5 -> 4 blocks (banker's rounding gives 4
    # too); 5 blocks x 0.5 = 2.5 -> 3 (banker's: 2)
    run, _ = _run(tmp_path, ratio=0.5, groups=2)
    assert shared_blocks(run.pools[0], run.workload) == 4
    run, _ = _run(tmp_path, new=80, ratio=0.5, groups=2)
    assert shared_blocks(run.pools[0], run.workload) == 3
    # a whole first prompt shares only its full blocks
    run, _ = _run(tmp_path, new=100, ratio=1.0, groups=2)
    assert shared_blocks(run.pools[0], run.workload) == 100 // 16


def test_groups_are_rands_random_range_on_seed_zero() -> None:
    def reference(seed: int, bound: int, n: int) -> list[int]:
        rng, out = StdRng(seed), []
        for _ in range(n):
            m = rng.next_u32() * bound
            result, lo = m >> 32, m & 0xFFFFFFFF
            if lo > (1 << 32) - bound and lo + ((rng.next_u32() * bound) >> 32) >= 1 << 32:
                result += 1
            out.append(result)
        return out

    assert below(0, 3, 8).tolist() == [2, 2, 1, 2, 2, 0, 2, 1]  # AISimulate's groups (golden)
    for seed, bound in ((0, 2), (7, 3), (42, 5), (1, 1_000_003), (3, 3_000_000_019)):
        assert below(seed, bound, 200).tolist() == reference(seed, bound, 200)


def test_records_name_session_and_turn(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pred = run_prediction(_config(tmp_path), capture=True)
    keys = sorted((r["session_id"], r["turn_index"]) for r in pred.records)
    assert keys == [(f"session_{s}", t) for s in range(3) for t in range(3)]
    by_key = {(r["session_id"], r["turn_index"]): r for r in pred.records}
    # concurrency 2 counts sessions: session_2 starts when session_0 or session_1 ends
    first = by_key[("session_2", 0)]["arrival_time_ms"]
    ends = [by_key[(f"session_{s}", 2)]["terminal_time_ms"] for s in (0, 1)]
    assert first == min(ends)
    # turn 1 arrives 5 ms after turn 0's completion and hits its full blocks: 119 computed
    for s in range(3):
        t0, t1 = by_key[(f"session_{s}", 0)], by_key[(f"session_{s}", 1)]
        assert t1["arrival_time_ms"] == t0["terminal_time_ms"] + 5.0
        assert t1["first_admission_reused_input_tokens"] == 112
    res = CliRunner().invoke(
        main, ["predict", "-c", _config(tmp_path), "-o", str(out), "--capture-per-request"]
    )
    assert res.exit_code == 0, res.output
    table = pq.read_table(out / "requests.parquet")
    assert sorted(table.column("turn_index").to_pylist()) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert json.loads((out / "prediction.json").read_text())["num_requests"] == 9


def test_sessions_in_pd_are_refused_in_one_line(tmp_path: Path) -> None:
    text = Path(_config(tmp_path)).read_text()
    text = text.replace("mode: aggregated", "mode: disaggregated").replace(
        "    aggregated:\n", "    prefill:\n"
    )
    block = text[text.index("    prefill:\n") :]
    text += block.replace("prefill:", "decode:")
    path = tmp_path / "pd.yaml"
    path.write_text(text)
    lines = unsupported_features(load_config(str(path)))
    assert lines == [
        "traffic.source.type: multi-turn sessions in P/D is not available yet in aisim; run "
        "the sessions on an aggregated deployment"
    ]


def test_a_later_turn_that_could_never_finish_is_refused(tmp_path: Path) -> None:
    # 3 turns of 100 + 20: turn 2 needs ceil(359 / 16) = 23 blocks of a 22-block pool
    with pytest.raises(CapacityError, match=r"kv_cache\.capacity\.blocks: a request of 340 prompt"):
        resolve_run(load_config(_config(tmp_path, blocks=22)))


TRACE = """\
traffic:
  source: {type: trace, paths: [t.jsonl], format: FORMAT, block_size: 16}
  load: {type: trace_timestamps}
engine:
  mode: aggregated
  model: Qwen/Qwen3-32B
  hardware: b200_sxm
  workers:
    aggregated:
      parallelism: {replicas: 1, tensor: 4}
      kv_cache: {block_size: 16, capacity: {type: fixed, blocks: 400}}
      timing: {type: fixed, prefill_ms: 10, decode_ms: 1}
"""


def _trace(tmp_path: Path, rows: list[dict], fmt: str = "mooncake") -> str:
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "trace.yaml"
    path.write_text(TRACE.replace("FORMAT", fmt))
    return str(path)


def _row(**kw) -> dict:
    return {"input_length": 32, "output_length": 4, "hash_ids": [1, 2], **kw}


def test_trace_turns_follow_their_predecessor(tmp_path: Path) -> None:
    rows = [
        _row(session_id="a", timestamp=100),
        _row(session_id="b", timestamp=103),
        _row(session_id="a", delay=7, hash_ids=[1, 2, 3], input_length=48),
        _row(timestamp=104),  # a session of its own
        _row(session_id="b", timestamp=150, hash_ids=[1, 2, 4]),
    ]
    pred = run_prediction(_trace(tmp_path, rows), capture=True)
    rec = {(r["session_id"], r["turn_index"]): r for r in pred.records}
    assert sorted(rec) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("request_4", 0)]
    assert [rec[(s, 0)]["arrival_time_ms"] for s in ("a", "b", "request_4")] == [0.0, 3.0, 4.0]
    assert rec[("a", 1)]["arrival_time_ms"] == rec[("a", 0)]["terminal_time_ms"] + 7
    assert rec[("b", 1)]["arrival_time_ms"] == rec[("b", 0)]["terminal_time_ms"] + 47
    # full prompts: the hash-id prefix (2 blocks) is reused, the previous output is not
    assert rec[("a", 1)]["first_admission_reused_input_tokens"] == 32


def test_delta_turns_accumulate_the_conversation(tmp_path: Path) -> None:
    rows = [_row(session_id="a", timestamp=0), _row(session_id="a", hash_ids=[5, 6])]
    pred = run_prediction(_trace(tmp_path, rows, "mooncake-delta"), capture=True)
    second = next(r for r in pred.records if r["turn_index"] == 1)
    assert second["input_length"] == 32 + 4 + 32
    assert second["first_admission_reused_input_tokens"] == 32  # 35 computed: 2 full blocks


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([_row(session_id="a", delay=5)], r"t\.jsonl:1: delay 5 on the first turn of session 'a'"),
        (
            [_row(session_id="a", timestamp=50), _row(session_id="a", timestamp=20)],
            r"t\.jsonl:2: timestamp 20 is earlier than session 'a'",
        ),
        (
            [_row(session_id="a"), _row(session_id="a", timestamp=20)],
            r"t\.jsonl:2: session 'a' has no earlier timestamp",
        ),
        ([_row(session_id=7)], r"t\.jsonl:1: session_id must be a string"),
        ([_row(delay=1, delay_ms=2)], r"t\.jsonl:1: delay and delay_ms both set"),
        ([_row(session_id="a", delay=-1)], r"t\.jsonl:1: delay must be a finite number"),
    ],
)
def test_bad_session_rows_name_their_line(tmp_path: Path, rows, message) -> None:
    with pytest.raises(ConfigError, match=message):
        run_prediction(_trace(tmp_path, rows))


def test_trace_sessions_in_pd_are_refused(tmp_path: Path) -> None:
    text = TRACE.replace("mode: aggregated", "mode: disaggregated").replace(
        "    aggregated:\n", "    prefill:\n"
    )
    text += text[text.index("    prefill:\n") :].replace("prefill:", "decode:")
    (tmp_path / "t.jsonl").write_text(json.dumps(_row(session_id="a")) + "\n")
    path = tmp_path / "pd.yaml"
    path.write_text(text.replace("FORMAT", "mooncake"))
    with pytest.raises(NotAvailableError, match="multi-turn trace sessions in P/D"):
        run_prediction(str(path))


def test_trace_timeline_names_session_turns(tmp_path: Path) -> None:
    rows = [_row(session_id="a", timestamp=0), _row(session_id="a", delay=2), _row(timestamp=1)]
    out = tmp_path / "run"
    flags = ["--capture-per-request", "--capture-passes"]
    res = CliRunner().invoke(
        main, ["predict", "-c", _trace(tmp_path, rows), "-o", str(out), *flags]
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(main, ["trace", str(out), "--json"])
    assert res.exit_code == 0, res.output
    events = json.loads((out / "trace.json").read_text())["traceEvents"]
    names = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert {"a", "a turn 1", "request 3"} <= names

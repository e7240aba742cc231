"""Seeded property tests through the command line: mutated configs and mutated trace rows
either load or are refused in one line naming the file at fault (exit 2, nothing written,
validate and predict agreeing); nothing else ever escapes (no traceback, no hang)."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from click.testing import CliRunner  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aisim.cli import main  # noqa: E402
from tests.test_cli import BASE  # noqa: E402
from tests.test_reliability import TRACE, _rows  # noqa: E402

# 200 seeded examples a property, each run in this process: a child process per example costs
# ~2 s of interpreter start and kernel loading, which made 200 of them take ~400 s
SEEDED = settings(
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow],
)
# A mutation that loads is simulated too when its workload is at most this many tokens (BASE
# has 864; 2e7 fixed-timing tokens take ~0.2 s): simulating 10**7 requests would only prove
# that a big run takes long, and validate has already shown that it loads.
PREDICT_TOKENS = 20_000_000

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, 1e13, -0.0, 0.5]),
    st.text(max_size=8),
    st.sampled_from(["auto", "max", "default", "fixed", "vllm"]),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["type", "blocks", "x"]), st.integers(-3, 3), max_size=2),
)


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))


CONFIG = yaml.safe_load(BASE)
CONFIG_PATHS = list(_paths(CONFIG))


def _mutate(cfg: dict, path: tuple, how: str, value) -> dict:
    out = copy.deepcopy(cfg)
    node = out
    for k in path[:-1]:
        node = node[k]
    if how == "delete":
        del node[path[-1]]
    elif how == "unknown key" and isinstance(node.get(path[-1]), dict):
        node[path[-1]]["zz_unknown"] = value
    else:
        node[path[-1]] = value
    return out


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _one_line_refusal(res, names: str) -> str:
    """Exit 2 and one 'aisim: error:' line on stderr that names `names` (the file at fault)."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, (res.exit_code, res.output)
    assert lines[0].startswith("aisim: error: ") and names in lines[0], lines[0]
    assert len(lines[0]) < 2000 and not res.stdout.strip(), res.output
    return lines[0]


def _workload_tokens(config: Path) -> int | None:
    """Prompt + output tokens the config would simulate, or None when that is not known."""
    from aisim.config import load_config
    from aisim.engine.spec import resolve
    from aisim.engine.workload import resolve_workload

    cfg = load_config(config)
    spec, workload = resolve(cfg), resolve_workload(cfg)
    if workload.trace_path is not None:
        from aisim.traffic_trace import trace_traffic

        traffic = trace_traffic(spec, workload)
        return int(traffic.prompt_len.sum()) + int(traffic.requested_output_len.sum())
    if not workload.num_requests:
        return None
    return workload.num_requests * (workload.input_tokens + workload.output_tokens)


def _loads_or_is_refused(config: Path, names: str) -> None:
    """validate and predict agree: both refuse with the same one line (exit 2, predict writing
    nothing), or the config loads (exit 0, or 1 when no request can complete) and predict
    writes its results."""
    out = config.parent / "out"
    checked = _cli("validate", "-c", config)
    assert checked.exit_code in (0, 1, 2), (checked.exit_code, checked.output)
    if checked.exit_code == 2:
        line = _one_line_refusal(checked, names)
        ran = _cli("predict", "-c", config, "-o", out)
        assert _one_line_refusal(ran, names) == line
        assert not out.exists()
        return
    tokens = _workload_tokens(config)
    if tokens is None or tokens > PREDICT_TOKENS:
        return
    ran = _cli("predict", "-c", config, "-o", out)
    assert ran.exit_code == checked.exit_code, (checked.output, ran.output)
    assert "Traceback" not in ran.output and (out / "prediction.json").is_file()


@SEEDED
@given(
    path=st.sampled_from(CONFIG_PATHS),
    how=st.sampled_from(["set", "delete", "unknown key"]),
    value=VALUES,
)
def test_mutated_config_loads_or_is_refused_in_one_line(path, how, value) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "c.yaml"
        config.write_text(yaml.safe_dump(_mutate(CONFIG, path, how, value)))
        _loads_or_is_refused(config, str(config))


FIELDS = [
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
    "created_time",
    "input_tokens",
    "output_tokens",
    "session_id",
    "delay",
]
ROW_VALUES = st.one_of(VALUES, st.lists(st.integers(-2, 2**64 + 2), max_size=4))
TEXT_EDITS = st.sampled_from(["", "join", "blank", "garbage", "nan", "deep", "bom", "crlf"])


def _trace_text(edits: list[tuple[int, str, object]], text_edit: str) -> str:
    rows = _rows()
    for i, key, value in edits:
        if value == "<delete>":
            rows[i].pop(key, None)
        else:
            rows[i][key] = value
    lines = [json.dumps(r) for r in rows]
    if text_edit == "join":
        lines[0:2] = [lines[0] + lines[1]]
    elif text_edit == "blank":
        lines.insert(2, "   ")
    elif text_edit == "garbage":
        lines.append("{not json")
    elif text_edit == "nan":
        lines[1] = lines[1].replace('"timestamp": 10', '"timestamp": NaN')
    elif text_edit == "deep":
        lines.insert(1, "[" * 5000 + "]" * 5000)
    text = "\n".join(lines) + "\n"
    if text_edit == "bom":
        text = "\ufeff" + text
    if text_edit == "crlf":
        text = text.replace("\n", "\r\n")
    return text


@SEEDED
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 3), st.sampled_from(FIELDS), st.one_of(ROW_VALUES, st.just("<delete>"))
        ),
        max_size=3,
    ),
    text_edit=TEXT_EDITS,
)
def test_mutated_trace_reads_or_is_refused_with_file_and_line(edits, text_edit) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "trace.jsonl").write_text(_trace_text(edits, text_edit), encoding="utf-8")
        (folder / "c.yaml").write_text(TRACE)
        _loads_or_is_refused(folder / "c.yaml", "trace.jsonl")

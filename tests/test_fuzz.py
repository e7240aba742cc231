"""Seeded property tests: mutated configs and mutated trace rows either load or are refused
with one line naming the problem; nothing else ever escapes (no traceback, no hang)."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aisim.errors import AisimError  # noqa: E402
from tests.test_cli import BASE  # noqa: E402
from tests.test_reliability import TRACE, _rows  # noqa: E402

SEEDED = settings(derandomize=True, deadline=None, database=None, max_examples=25,
                  suppress_health_check=[HealthCheck.too_slow])

VALUES = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-2**70, max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, 2**64, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e300, 1e13, -0.0, 0.5]),
    st.text(max_size=8), st.sampled_from(["auto", "max", "default", "fixed", "vllm"]),
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


def _check_one_line(exc: AisimError) -> None:
    text = exc.format_message()
    assert "\n" not in text and 0 < len(text) < 2000, text


@SEEDED
@given(path=st.sampled_from(CONFIG_PATHS), how=st.sampled_from(["set", "delete", "unknown key"]),
       value=VALUES)
def test_mutated_config_loads_or_is_refused_in_one_line(path, how, value) -> None:
    from aisim.config import parse_config
    from aisim.engine.spec import no_request_can_complete, resolve

    raw = _mutate(CONFIG, path, how, value)
    try:
        cfg = parse_config(raw, "<fuzz>")
        spec = resolve(cfg)
        no_request_can_complete(cfg, spec)
    except AisimError as exc:
        _check_one_line(exc)


FIELDS = ["timestamp", "input_length", "output_length", "hash_ids", "created_time",
          "input_tokens", "output_tokens", "session_id"]
ROW_VALUES = st.one_of(VALUES, st.lists(st.integers(-2, 2**64 + 2), max_size=4))
TEXT_EDITS = st.sampled_from(["", "join", "blank", "garbage", "nan", "bom", "crlf"])


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
@given(edits=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(FIELDS),
                                st.one_of(ROW_VALUES, st.just("<delete>"))), max_size=3),
       text_edit=TEXT_EDITS)
def test_mutated_trace_reads_or_is_refused_with_file_and_line(edits, text_edit) -> None:
    from aisim.config import load_config
    from aisim.engine.spec import resolve
    from aisim.traffic_trace import check_trace

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "trace.jsonl").write_text(_trace_text(edits, text_edit), encoding="utf-8")
        (folder / "c.yaml").write_text(TRACE)
        try:
            check_trace(resolve(load_config(folder / "c.yaml")))
        except AisimError as exc:
            _check_one_line(exc)
            assert "trace.jsonl" in exc.format_message()

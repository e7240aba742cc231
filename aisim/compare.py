"""`aisim compare RUN_DIR MEASURED.json`: a prediction lined up with a real vLLM benchmark.

RUN_DIR is an `aisim predict -o` folder (prediction.json, and with --capture-per-request the
per-request records); MEASURED.json is what `vllm bench serve --save-result` wrote, with or
without --save-detailed. Both sides are read in vLLM's terms (aisim.output.vllm_bench): with the
records, the predicted statistics follow vLLM's definitions (docs/vllm-bench.md); without them
they come from prediction.json, whose percentiles are nearest-rank, and each such row says so.
Where both sides hold per-request times, the TTFT and E2E distributions are set side by side.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from aisim.errors import ConfigError
from aisim.output import vllm_bench as vb

QUANTILES = (10, 50, 90, 99)
# the summary keys compared, in vLLM's order, with the unit each is printed in
SUMMARY_ROWS = (
    ("duration", "s"),
    ("completed", "requests"),
    ("failed", "requests"),
    ("total_input_tokens", "tokens"),
    ("total_output_tokens", "tokens"),
    ("request_throughput", "req/s"),
    ("request_goodput", "req/s"),
    ("output_throughput", "tok/s"),
    ("total_token_throughput", "tok/s"),
    ("max_concurrent_requests", "requests"),
)
# vLLM's per-request arrays: one entry per request sent, failed ones included
PER_REQUEST_ARRAYS = (
    "input_lens",
    "output_lens",
    "ttfts",
    "itls",
    "latencies",
    "e2els",
    "start_times",
    "queue_times",
    "generated_texts",
    "errors",
)
# prediction.json's percentile keys (docs/rules.md 11.3): the only ones it can give
_PREDICTION_PCTS = {50.0: "median", 75.0: "p75", 90.0: "p90", 95.0: "p95", 99.0: "p99"}
_PREDICTION_NAMES = {
    "ttft": "ttft_ms",
    "tpot": "tpot_ms",
    "itl": "itl_ms",
    "e2el": "e2e_latency_ms",
}
NOTE_NEAREST = (
    "prediction.json statistic: nearest-rank percentile (vLLM interpolates); capture "
    "per-request records for vLLM's definition"
)
NOTE_ITL = (
    "prediction.json ITL: every token gap, an MTP burst's extra tokens as zero gaps (vLLM: one "
    "gap per streamed chunk); percentiles from the 0.1 % sketch at nearest ranks"
)
NOTE_DURATION = (
    "prediction.json duration: the last completion (vLLM: the last answer, failed requests "
    "included)"
)


def _load_json(path: Path, what: str) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {_reason(exc)}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    return doc


def _reason(exc: Exception) -> str:
    return " ".join(str(getattr(exc, "strerror", None) or exc).split())


def _number(doc: dict, key: str, path: Path, required: bool = False) -> float | None:
    """doc[key] as a float; None when absent or null (an error when required)."""
    if key not in doc or doc[key] is None:
        if required:
            raise ConfigError(f"{path}: field {key!r} is missing")
        return None
    v = doc[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{path}: field {key!r}: expected a number, got {json.dumps(v)[:40]}")
    return float(v)


def _read_records(run_dir: Path) -> tuple[vb.PerRequest | None, Path | None]:
    """The run's per-request records (requests.jsonl, else requests.parquet), or None."""
    jsonl, parquet = run_dir / "requests.jsonl", run_dir / "requests.parquet"
    if jsonl.is_file():
        cols: dict[str, list] = {k: [] for k in vb.RECORD_FIELDS}
        try:
            with open(jsonl, encoding="utf-8") as fh:
                for n, line in enumerate(fh, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ConfigError(f"{jsonl}: line {n} is not JSON ({exc.msg})") from None
                    for k, col in cols.items():
                        if k not in row:
                            raise ConfigError(f"{jsonl}: line {n}: field {k!r} is missing")
                        col.append(row[k])
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{jsonl}: cannot read the records: {_reason(exc)}") from None
        return _records(cols, jsonl), jsonl
    if parquet.is_file():
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(parquet)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise ConfigError(f"{parquet}: not a readable parquet file: {_reason(exc)}") from None
        for k in vb.RECORD_FIELDS:
            if k not in table.column_names:
                raise ConfigError(f"{parquet}: column {k!r} is missing")
        cols = {k: table.column(k).to_pylist() for k in vb.RECORD_FIELDS}
        return _records(cols, parquet), parquet
    return None, None


def _records(cols: dict, path: Path) -> vb.PerRequest:
    try:
        return vb.PerRequest.from_columns(cols)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: a record field has a wrong type: {_reason(exc)}") from None


def _measured_arrays(doc: dict, path: Path) -> dict[str, list]:
    """The per-request arrays of a --save-detailed file, checked to have one entry each."""
    arrays = {k: doc[k] for k in PER_REQUEST_ARRAYS if doc.get(k) is not None}
    for k, v in arrays.items():
        if not isinstance(v, list):
            raise ConfigError(f"{path}: field {k!r}: expected a list, got {type(v).__name__}")
    lengths = {k: len(v) for k, v in arrays.items()}
    if len(set(lengths.values())) > 1:
        first, other = _two_lengths(lengths)
        raise ConfigError(
            f"{path}: per-request arrays differ in length: {first!r} has {lengths[first]} "
            f"entries, {other!r} has {lengths[other]}"
        )
    if arrays and doc.get("failed") is not None:
        n = next(iter(lengths.values()))
        expect = int(doc["completed"]) + int(_number(doc, "failed", path))
        if n != expect:
            raise ConfigError(
                f"{path}: field {next(iter(lengths))!r} has {n} entries, but completed + "
                f"failed is {expect}"
            )
    return arrays


def _two_lengths(lengths: dict[str, int]) -> tuple[str, str]:
    first = next(iter(lengths))
    other = next(k for k, n in lengths.items() if n != lengths[first])
    return first, other


def _floats(arrays: dict, key: str, path: Path) -> np.ndarray:
    try:
        return np.asarray(arrays[key], dtype=np.float64)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: field {key!r}: expected a list of numbers") from None


def _measured_samples(doc: dict, arrays: dict, path: Path) -> dict[str, np.ndarray] | None:
    """Successful requests' TTFT and E2E (ms) from the measured arrays, or None without them."""
    if "ttfts" not in arrays:
        return None
    if "errors" in arrays:
        ok = np.array([not e for e in arrays["errors"]], dtype=bool)
    elif "output_lens" in arrays:
        ok = _floats(arrays, "output_lens", path) > 0
    else:
        ok = np.ones(len(arrays["ttfts"]), dtype=bool)
    if int(ok.sum()) != int(doc["completed"]):
        raise ConfigError(
            f"{path}: field 'errors' marks {int(ok.sum())} requests successful, but "
            f"'completed' is {int(doc['completed'])}"
        )
    ttft = _floats(arrays, "ttfts", path)[ok] * 1000.0
    for key in ("latencies", "e2els"):
        if key in arrays:
            return {"ttft": ttft, "e2el": _floats(arrays, key, path)[ok] * 1000.0}
    if "itls" in arrays:
        try:
            # vLLM's latency is its first-token time plus every chunk gap after it
            chunks = [sum(float(g) for g in gaps) for gaps in arrays["itls"]]
        except (TypeError, ValueError):
            raise ConfigError(f"{path}: field 'itls': expected lists of numbers") from None
        return {"ttft": ttft, "e2el": ttft + np.asarray(chunks, dtype=np.float64)[ok] * 1000.0}
    return {"ttft": ttft}


def _measured_percentiles(doc: dict) -> list[float]:
    """The --metric-percentiles a measured file carries, from its pXX_<metric>_ms keys."""
    found: dict[float, None] = {}
    for key in doc:
        for m in vb.METRICS:
            suffix = f"_{m}_ms"
            if key.startswith("p") and key.endswith(suffix):
                word = key[1 : -len(suffix)]
                if vb.is_number(word):
                    found[float(word)] = None
    return list(found)


def _predicted(pred: dict, reqs: vb.PerRequest | None, pcts: list[float]):
    """The prediction in vLLM's keys, and a note per key where its definition differs."""
    notes: dict[str, str] = {}
    if reqs is not None:
        fields = vb.summary_fields(pred, reqs, detailed=False, closed_loop=False)
        fields.update(vb.latency_fields(reqs, None, pcts, ("ttft", "tpot", "e2el")))
    else:
        dur = max(float(pred.get("duration_ms") or 0.0) / 1000.0, 1e-9)
        done = int(pred["completed_requests"])
        fields = {
            "duration": dur,
            "completed": done,
            "failed": int(pred.get("num_requests", done)) - done,
            "total_input_tokens": pred.get("total_input_tokens"),
            "total_output_tokens": pred.get("total_output_tokens"),
            "request_throughput": pred.get("request_throughput_rps"),
            "request_goodput": pred.get("goodput_request_throughput_rps"),
            "output_throughput": pred.get("output_throughput_tok_s"),
            "total_token_throughput": pred.get("total_throughput_tok_s"),
        }
        notes["duration"] = NOTE_DURATION
        for m in ("ttft", "tpot", "e2el"):
            _from_prediction(pred, m, pcts, fields, notes, NOTE_NEAREST)
    _from_prediction(pred, "itl", pcts, fields, notes, NOTE_ITL)
    return fields, notes


def _from_prediction(pred: dict, m: str, pcts, fields: dict, notes: dict, note: str) -> None:
    name = _PREDICTION_NAMES[m]
    keys = {"mean": f"mean_{name}", "median": f"median_{name}", "std": f"std_{name}"}
    for p in pcts:
        if float(p) in _PREDICTION_PCTS:
            keys[f"p{vb.p_word(p)}"] = f"{_PREDICTION_PCTS[float(p)]}_{name}"
    for stat, src in keys.items():
        if pred.get(src) is not None:
            fields[f"{stat}_{m}_ms"] = pred[src]
            # mean and std share vLLM's definition; the order statistics do not
            if m == "itl" or stat not in ("mean", "std"):
                notes[f"{stat}_{m}_ms"] = note


def relative_error(predicted: float, measured: float) -> float | None:
    """(predicted - measured) / |measured|; None when only the measurement is 0."""
    if measured == 0:
        return 0.0 if predicted == 0 else None
    return (predicted - measured) / abs(measured)


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical
    distribution functions, evaluated at every sample of either side."""
    if len(a) == 0 or len(b) == 0:
        return float("nan")
    a, b = np.sort(a), np.sort(b)
    at = np.concatenate([a, b])
    fa = np.searchsorted(a, at, side="right") / len(a)
    fb = np.searchsorted(b, at, side="right") / len(b)
    return float(np.max(np.abs(fa - fb)))


def _distribution(pred: np.ndarray, meas: np.ndarray) -> dict:
    rows = []
    for q in QUANTILES:
        p = float(np.percentile(pred, q)) if len(pred) else None
        m = float(np.percentile(meas, q)) if len(meas) else None
        err = relative_error(p, m) if p is not None and m is not None else None
        rows.append({"quantile": q, "predicted": p, "measured": m, "relative_error": err})
    return {
        "n_predicted": len(pred),
        "n_measured": len(meas),
        "quantiles": rows,
        # null, not NaN, when a side has no sample: the JSON output stays standard JSON
        "ks_distance": ks_distance(pred, meas) if len(pred) and len(meas) else None,
    }


def compare(run_dir: Path, measured_path: Path) -> dict:
    """Line a prediction folder up with a `vllm bench serve --save-result` file: one row per
    metric both sides have (predicted, measured, relative error), and the per-request TTFT and
    E2E distributions when both sides hold per-request times. Raises ConfigError, naming the
    file and field, for unreadable or mismatched input."""
    run_dir, measured_path = Path(run_dir), Path(measured_path)
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir}: not a folder (expected an `aisim predict -o` folder)")
    pred_path = run_dir / "prediction.json"
    pred = _load_json(pred_path, "prediction (is this an `aisim predict -o` folder?)")
    _number(pred, "completed_requests", pred_path, required=True)
    meas = _load_json(measured_path, "vllm bench result")
    m_done = _number(meas, "completed", measured_path, required=True)
    _number(meas, "duration", measured_path, required=True)
    reqs, rec_path = _read_records(run_dir)
    p_done = int(pred["completed_requests"])
    if int(m_done) != p_done:
        raise ConfigError(
            f"{measured_path}: field 'completed' is {int(m_done)}, but the prediction in "
            f"{run_dir} completed {p_done} requests: compare runs of the same workload"
        )
    if reqs is not None and int(reqs.completed.sum()) != p_done:
        raise ConfigError(
            f"{rec_path}: {int(reqs.completed.sum())} records are completed, but "
            f"prediction.json's 'completed_requests' is {p_done}"
        )
    pcts = _measured_percentiles(meas)
    predicted, notes = _predicted(pred, reqs, pcts)
    bench_path = run_dir / "vllm_bench.json"
    if bench_path.is_file():
        # written by predict --format vllm-bench: vLLM's own definitions (ITL over streamed
        # chunks included), so it replaces the prediction.json figures it covers
        bench = _load_json(bench_path, "vllm bench result of the prediction")
        for key, value in bench.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                if key in predicted or key.endswith("_ms"):
                    predicted[key] = value
                    notes.pop(key, None)
    rows = []
    keys = [(k, u) for k, u in SUMMARY_ROWS]
    for m in vb.METRICS:
        stats = ["mean", "median", "std"] + [f"p{vb.p_word(p)}" for p in pcts]
        keys += [(f"{s}_{m}_ms", "ms") for s in stats]
    for key, unit in keys:
        m_val = _number(meas, key, measured_path)
        p_val = predicted.get(key)
        if m_val is None or p_val is None:
            continue
        rows.append(
            {
                "metric": key,
                "unit": unit,
                "predicted": float(p_val),
                "measured": m_val,
                "relative_error": relative_error(float(p_val), m_val),
                "note": notes.get(key),
            }
        )
    out: dict = {
        "run_dir": str(run_dir),
        "measured": str(measured_path),
        "records": str(rec_path) if rec_path else None,
        "metrics": rows,
        "distributions": {},
    }
    arrays = _measured_arrays(meas, measured_path)
    samples = _measured_samples(meas, arrays, measured_path)
    if reqs is not None and samples is not None:
        mine = reqs.samples()
        for m, name in (("ttft", "ttft_ms"), ("e2el", "e2el_ms")):
            if m in samples:
                out["distributions"][name] = _distribution(mine[m], samples[m])
    return out


_COUNT_UNITS = ("requests", "tokens")


def _fmt(v, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit in _COUNT_UNITS:
        return f"{int(v):,}"
    # values below 10 (seconds, small latencies) keep four significant digits, not two decimals
    return f"{v:,.2f}" if abs(v) >= 10 else f"{v:.4g}"


def _pct(v) -> str:
    return "-" if v is None else f"{v * 100:+.2f} %"


def render_compare(d: dict) -> str:
    """The comparison as a terminal table: metrics, then distributions, then the notes."""
    lines = [f"predicted: {d['run_dir']}", f"measured:  {d['measured']}", ""]
    head = f"{'metric':<32} {'unit':<9} {'predicted':>14} {'measured':>14} {'rel. error':>11}"
    lines += [head, "-" * len(head)]
    notes: list[str] = []
    for r in d["metrics"]:
        mark = ""
        if r["note"]:
            if r["note"] not in notes:
                notes.append(r["note"])
            mark = f" [{notes.index(r['note']) + 1}]"
        lines.append(
            f"{r['metric']:<32} {r['unit']:<9} {_fmt(r['predicted'], r['unit']):>14} "
            f"{_fmt(r['measured'], r['unit']):>14} {_pct(r['relative_error']):>11}{mark}"
        )
    for name, dist in d["distributions"].items():
        lines += [
            "",
            f"{name} per request (predicted {dist['n_predicted']}, measured "
            f"{dist['n_measured']}; KS distance {_fmt(dist['ks_distance'])})",
        ]
        lines.append(f"{'quantile':<10} {'predicted':>14} {'measured':>14} {'rel. error':>11}")
        for q in dist["quantiles"]:
            lines.append(
                f"{'p' + str(q['quantile']):<10} {_fmt(q['predicted']):>14} "
                f"{_fmt(q['measured']):>14} "
                f"{_pct(q['relative_error']):>11}"
            )
    if not d["distributions"]:
        lines += [
            "",
            "no per-request distributions: they need the run's requests.jsonl "
            "(--capture-per-request) and a --save-detailed measurement",
        ]
    if notes:
        lines.append("")
        lines += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines)

"""The parity rule of the project (shared/tools/parity.py), plus a float-noise floor for std.

AISimulate's standard deviations come from a per-sample Welford pass in request-major order;
for a distribution whose samples are equal up to float noise the reference std is itself that
noise (~1e-12 of the mean, and it changes between AISimulate runs), so a std matches when it
is within 1e-9 relative OR both are below 1e-11 of the distribution's mean.
"""

from __future__ import annotations

import math

HOST = {"wall_time_ms", "processed_tokens_per_s", "processed_output_tokens_per_s"}
SKIP_PREFIX = ("power_diagnostics", "prediction_provenance", "per_request")
SKETCH = ("_itl_ms", "_output_token_throughput_per_user")
PCT = ("median_", "p75_", "p90_", "p95_", "p99_")


def _flat(d: dict, prefix: str = "") -> dict:
    """Nested fields as dotted keys (kv_cache_precision.decode.dtype), as parity.py reads them."""
    out = {}
    for k, v in d.items():
        key = prefix + k
        if isinstance(v, dict) and not key.startswith(SKIP_PREFIX):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def mismatches(got: dict, ref: dict, rtol: float = 1e-9) -> list[str]:
    bad = []
    got, ref = _flat(got), _flat(ref)
    for key, rv in ref.items():
        if key in HOST or key.startswith(SKIP_PREFIX):
            continue
        if key not in got:
            bad.append(f"{key}: missing")
            continue
        gv = got[key]
        if rv is None or isinstance(rv, (str, bool)):
            if gv != rv:
                bad.append(f"{key}: got {gv!r} ref {rv!r}")
            continue
        if not isinstance(gv, (int, float)) or isinstance(gv, bool):
            bad.append(f"{key}: got {gv!r} ref {rv!r}")
            continue
        tol = rtol
        if key.startswith(PCT) and key.endswith(SKETCH):
            tol = max(rtol, 2.5e-3)
        if abs(gv - rv) <= tol * max(abs(rv), 1e-12):
            continue
        if key.startswith("std_"):
            scale = abs(ref.get("mean_" + key[4:]) or 0.0)
            if max(abs(gv), abs(rv)) <= 1e-11 * scale:
                continue
        bad.append(f"{key}: got {gv!r} ref {rv!r} ({abs(gv - rv) / max(abs(rv), 1e-12):.3g} rel)")
    return bad


def records_mismatches(got: list[dict], ref: list[dict]) -> list[str]:
    """Compare per-request records by (session_id, turn_index) (AISimulate orders ties by a
    random uuid)."""

    def key(r):
        return r["session_id"], r.get("turn_index", 0)

    gmap = {key(r): r for r in got}
    bad = []
    if len(got) != len(ref):
        bad.append(f"{len(got)} records, reference has {len(ref)}")
    for r in ref:
        name = "{}/{}".format(*key(r))
        g = gmap.get(key(r))
        if g is None:
            bad.append(f"{name}: missing")
            continue
        for k, v in r.items():
            if k == "uuid":
                continue
            if not _close(g.get(k), v):
                bad.append(f"{name}.{k}: got {g.get(k)!r} ref {v!r}")
                break
    return bad


def _close(a, b) -> bool:
    if isinstance(b, float) or isinstance(a, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(b, list):
        return isinstance(a, list) and len(a) == len(b) and all(map(_close, a, b))
    if isinstance(b, dict):
        return isinstance(a, dict) and all(_close(a.get(k), v) for k, v in b.items())
    return a == b

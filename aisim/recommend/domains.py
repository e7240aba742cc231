"""Search domains of a recommend YAML: a fixed value, `{choices: [...]}` or
`{range: {min, max, step, scale}}` (docs/recommend.md, "Domains").

aisim enumerates every candidate, so each domain becomes a finite tuple of values. A linear
range with a step expands to min, min + step, ... <= max. An integer log range (no step, as
AISimulate requires) expands to the powers of two strictly inside [min, max] plus both ends; a
float range without a step has no finite expansion and is refused with the fix. Parallelism
knobs only filter the automatic pool, so they keep their bounds (`Domain.admits`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aisim.config.checks import Invalid


@dataclass(frozen=True)
class Domain:
    values: tuple  # the finite expansion, in the order given (ranges ascending)
    interval: tuple | None = None  # (min, max) of a log range: a pool filter admits all inside

    def admits(self, value) -> bool:
        """Whether a pool member's value lies in the domain (parallelism knobs)."""
        if self.interval is not None:
            return self.interval[0] <= value <= self.interval[1]
        return value in self.values

    @property
    def fixed(self) -> bool:
        return len(self.values) == 1


def fixed(value) -> Domain:
    return Domain((value,))


def _strict_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def domain(raw, path: str, kind: str, *, positive: bool = True, upper: float | None = None):
    """raw value -> Domain. kind "int" (integers), "float" or "choice" (strings: choices only)."""
    if isinstance(raw, dict):
        keys = set(raw)
        if keys == {"choices"}:
            return _choices(raw["choices"], path, kind, positive, upper)
        if keys == {"range"}:
            if kind == "choice":
                raise Invalid(path, "takes a value or {choices: [...]}, not a range")
            return _range(raw["range"], path + ".range", kind, positive, upper)
        raise Invalid(
            path,
            "a domain is a value, {choices: [...]} or {range: {min, max, step, scale}}",
            raw,
        )
    _check_value(raw, path, kind, positive, upper)
    return fixed(raw)


def _check_value(v, path: str, kind: str, positive: bool, upper: float | None) -> None:
    if kind == "int":
        if not _strict_int(v) or (positive and v < 1):
            raise Invalid(path, "must be a positive integer" if positive else "an integer", v)
    elif kind == "float":
        if not _number(v) or (positive and v <= 0):
            raise Invalid(path, "must be a positive number" if positive else "a number", v)
        if upper is not None and v > upper:
            raise Invalid(path, f"must be at most {upper:g}", v)


def _choices(values, path: str, kind: str, positive: bool, upper: float | None) -> Domain:
    path = path + ".choices"
    if not isinstance(values, list) or not values:
        raise Invalid(path, "must be a nonempty list", values)
    for i, v in enumerate(values):
        if kind != "choice":
            _check_value(v, f"{path}[{i}]", kind, positive, upper)
    if len({repr(v) for v in values}) != len(values):
        raise Invalid(path, "must contain unique values", values)
    return Domain(tuple(values))


def _range(spec, path: str, kind: str, positive: bool, upper: float | None) -> Domain:
    if not isinstance(spec, dict):
        raise Invalid(path, "must be a mapping {min, max, step, scale}", spec)
    unknown = set(spec) - {"min", "max", "step", "scale"}
    if unknown:
        raise Invalid(
            f"{path}.{sorted(unknown)[0]}", "is not a range field (min, max, step, scale)"
        )
    for key in ("min", "max"):
        if key not in spec:
            raise Invalid(f"{path}.{key}", "is required")
        _check_value(spec[key], f"{path}.{key}", kind, positive, upper)
    lo, hi = spec["min"], spec["max"]
    if lo > hi:
        raise Invalid(path, f"min {lo} is above max {hi}")
    scale = spec.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise Invalid(f"{path}.scale", "must be linear or log", scale)
    step = spec.get("step")
    if scale == "log":
        if step is not None:
            raise Invalid(f"{path}.step", f"a {kind_name(kind)} log range takes no step")
        if lo <= 0:
            raise Invalid(f"{path}.min", "must be above 0 on a log scale", lo)
        if kind == "float":
            raise Invalid(
                path,
                "a float log range is continuous and aisim enumerates the search space",
                fix="give {choices: [...]} or a linear range with a step",
            )
        values = sorted({lo, hi, *(1 << k for k in range(64) if lo < (1 << k) < hi)})
        return Domain(tuple(values), (lo, hi))
    if step is None:
        if lo == hi:
            return Domain((lo,))
        what = (
            "an integer linear range requires step"
            if kind == "int"
            else (
                "a float range without a step is continuous and aisim enumerates the search space"
            )
        )
        raise Invalid(path, what, fix="add step: (e.g. step: 1) or give {choices: [...]}")
    _check_value(step, f"{path}.step", kind, True, None)
    values = []
    k = 0
    while True:
        v = lo + k * step
        if kind == "float":
            v = round(v, 12)
        if v > hi + (1e-12 if kind == "float" else 0):
            break
        values.append(v)
        k += 1
    return Domain(tuple(values))


def kind_name(kind: str) -> str:
    return {"int": "integer", "float": "float"}.get(kind, kind)

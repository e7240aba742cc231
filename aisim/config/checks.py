"""Value checkers for single config fields, and the one-line error they raise.

A checker is a callable ``check(value, path) -> converted value``.  It raises :class:`Invalid`
(path, what is wrong, the offending value, a fix) which the loader turns into a
:class:`aisim.errors.ConfigError` prefixed with the file name.

Strictness follows AISimulate's schema: an ``int`` field rejects floats, strings and booleans;
a ``float`` field accepts ints but rejects booleans and strings; every number must be finite.
A few AISimulate fields are *lax* (``prefix_caching``, ``startup_seconds``, ``prefill_ms``,
``decode_ms``); their checkers accept the spellings AISimulate accepts so its configs still load.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

Checker = Callable[[Any, str], Any]

INT64_MAX = 2**63 - 1
"""Integer fields without a bound of their own are stored as 64-bit integers."""

NOTHING: Any = object()
"""Marker for 'no offending value to show' in :class:`Invalid`."""


class Invalid(Exception):
    """A config value is wrong at ``path`` (dotted YAML keys)."""

    def __init__(self, path: str, what: str, got: Any = NOTHING, fix: str | None = None) -> None:
        super().__init__(path, what)
        self.path = path
        self.what = what
        self.got = got
        self.fix = fix

    def line(self, source: str) -> str:
        """The single-line message ``<source>: <path>: <what>, got <value>; <fix>``."""
        text = f"{source}: {self.path}: {self.what}" if self.path else f"{source}: {self.what}"
        if self.got is not NOTHING:
            text += f", got {show(self.got)}"
        if self.fix:
            text += f"; {self.fix}"
        return " ".join(text.split())  # guarantee one line


class FrozenMap(Mapping[str, Any]):
    """A read-only, hashable mapping (used for opaque sections and the worker table)."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data = dict(data or {})

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(tuple(self._data.items()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def freeze(value: Any) -> Hashable:
    """Deep-convert mappings to :class:`FrozenMap` and lists to tuples."""
    if isinstance(value, Mapping):
        return FrozenMap({str(k): freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


def show(value: Any, limit: int = 60) -> str:
    """Render a YAML value for a message: ``null``, ``true``, ``'text'``, ``1.5``, ``{a: 1}``.

    Rendering stops once `limit` characters are out, so a huge value (or one that YAML
    aliases make huge) costs no more than a small one.
    """
    parts: list[str] = []
    _render(value, parts, [limit + 1], limit)
    text = "".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _render(value: Any, parts: list[str], budget: list[int], limit: int) -> None:
    """Append value's text to parts until budget[0] characters are spent."""
    if budget[0] <= 0:
        return
    if value is None:
        text = "null"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = repr(value if len(value) <= limit else value[: limit + 1])
    elif isinstance(value, Mapping | list | tuple):
        is_map = isinstance(value, Mapping)
        parts.append("{" if is_map else "[")
        budget[0] -= 1
        for i, item in enumerate(value.items() if is_map else value):
            if budget[0] <= 0:
                return
            if i:
                parts.append(", ")
                budget[0] -= 2
            if is_map:
                k, v = item
                key = f"{k}: "
                parts.append(key)
                budget[0] -= len(key)
                _render(v, parts, budget, limit)
            else:
                _render(item, parts, budget, limit)
        parts.append("}" if is_map else "]")
        budget[0] -= 1
        return
    else:
        text = repr(value)
    parts.append(text)
    budget[0] -= len(text)


def kind(value: Any) -> str:
    """'a float', 'a string', ... for 'got 1.0 (a float)'."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__


class _Shown:
    """A value rendered with its kind, e.g. ``1.0 (a float)``."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        if self.value is None:
            return "null"
        return f"{show(self.value)} ({kind(self.value)})"


def typed(value: Any) -> Any:
    """Wrap ``value`` so that the message shows its kind next to it."""
    return _Shown(value)


def _bounds_text(noun: str, gt: float | None, ge: float | None, le: float | None) -> str:
    article = "an" if noun[0] in "aeiou" else "a"
    if le is None:
        if gt == 0:
            return f"must be a positive {noun}"
        if ge == 0:
            return f"must be a non-negative {noun}"
        if gt is not None:
            return f"must be {article} {noun} > {gt}"
        if ge is not None:
            return f"must be {article} {noun} >= {ge}"
        return f"must be {article} {noun}"
    if gt is not None:
        return f"must be {article} {noun} in ({gt}, {le}]"
    if ge is not None:
        return f"must be {article} {noun} in [{ge}, {le}]"
    return f"must be {article} {noun} <= {le}"


def _in_bounds(x: float, gt: float | None, ge: float | None, le: float | None) -> bool:
    return (gt is None or x > gt) and (ge is None or x >= ge) and (le is None or x <= le)


def integer(
    *, gt: int | None = None, ge: int | None = None, le: int | None = None, nullable: bool = False
) -> Checker:
    """A strict integer (bool, float and str rejected) within the bounds."""
    what = _bounds_text("integer", gt, ge, le)

    def check(value: Any, path: str) -> int | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            fix = None
            if isinstance(value, float) and math.isfinite(value) and value.is_integer():
                fix = f"write {int(value)} without a decimal point"
            elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                fix = "remove the quotes"
            raise Invalid(path, what, typed(value), fix)
        if not _in_bounds(value, gt, ge, le):
            raise Invalid(path, what, value)
        if le is None and value > INT64_MAX:
            raise Invalid(path, f"must be at most {INT64_MAX} (a 64-bit integer)", value)
        return value

    return check


def number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    nullable: bool = False,
    lax: bool = False,
) -> Checker:
    """A finite float (ints accepted; bools rejected).  ``lax`` also accepts numeric strings."""
    what = _bounds_text("number", gt, ge, le)
    if lt is not None:
        what = f"must be a number in [{ge}, {lt})" if ge is not None else f"must be < {lt}"

    def check(value: Any, path: str) -> float | None:
        if value is None and nullable:
            return None
        if lax and isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise Invalid(path, what, typed(value)) from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            fix = None
            if isinstance(value, str):
                try:
                    float(value)
                    fix = "write it as a plain number with a decimal point, e.g. 1000.0"
                except ValueError:
                    pass
            raise Invalid(path, what, typed(value), fix)
        if not math.isfinite(value):
            raise Invalid(path, "must be a finite number", value)
        if not _in_bounds(value, gt, ge, le) or (lt is not None and value >= lt):
            raise Invalid(path, what, value)
        return float(value)

    return check


_LAX_TRUE = {"true", "yes", "on", "1", "t", "y"}
_LAX_FALSE = {"false", "no", "off", "0", "f", "n"}


def boolean(*, nullable: bool = False, lax: bool = False) -> Checker:
    """``true``/``false``.  ``lax`` also accepts 0/1 and strings such as 'yes'/'off'."""

    def check(value: Any, path: str) -> bool | None:
        if value is None and nullable:
            return None
        if isinstance(value, bool):
            return value
        if lax:
            if isinstance(value, int | float) and value in (0, 1):
                return bool(value)
            if isinstance(value, str) and value.strip().lower() in _LAX_TRUE | _LAX_FALSE:
                return value.strip().lower() in _LAX_TRUE
        raise Invalid(path, "must be true or false", typed(value))

    return check


def choice(
    *options: str, nullable: bool = False, normalize: Callable[[str], str] | None = None
) -> Checker:
    """One of ``options`` (strings)."""
    listed = ", ".join(repr(o) for o in options)

    def check(value: Any, path: str) -> str | None:
        if value is None and nullable:
            return None
        if isinstance(value, str):
            v = normalize(value) if normalize else value
            if v in options:
                return v
        fix = None
        if isinstance(value, str):
            near = suggest(value, options)
            fix = f"did you mean {near!r}?" if near else None
        raise Invalid(path, f"must be one of {listed}", value, fix)

    return check


def string(*, nullable: bool = False) -> Checker:
    """A non-empty string."""

    def check(value: Any, path: str) -> str | None:
        if value is None and nullable:
            return None
        if not isinstance(value, str) or not value:
            raise Invalid(path, "must be a non-empty string", typed(value))
        return value

    return check


def string_list(*, nullable: bool = False, min_len: int = 1) -> Checker:
    """A list of non-empty strings, returned as a tuple."""

    def check(value: Any, path: str) -> tuple[str, ...] | None:
        if value is None and nullable:
            return None
        if not isinstance(value, list):
            raise Invalid(path, "must be a list of strings", typed(value))
        if len(value) < min_len:
            raise Invalid(path, f"must list at least {min_len} entry", value)
        item = string()
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return check


def number_list(*, ge: float | None = None, le: float | None = None) -> Checker:
    """A list of finite numbers within the bounds, returned as a tuple of floats."""
    item = number(ge=ge, le=le)

    def check(value: Any, path: str) -> tuple[float, ...]:
        if not isinstance(value, list):
            raise Invalid(path, "must be a list of numbers", typed(value))
        return tuple(item(v, f"{path}[{i}]") for i, v in enumerate(value))

    return check


def string_or_list(*, nullable: bool = False) -> Checker:
    """A string or a list of strings (AISimulate's ``transfer_policy``)."""
    one, many = string(), string_list(min_len=0)

    def check(value: Any, path: str) -> str | tuple[str, ...] | None:
        if value is None and nullable:
            return None
        return many(value, path) if isinstance(value, list) else one(value, path)

    return check


def int_or(literal: str, *, gt: int = 0, nullable: bool = False) -> Checker:
    """A positive integer or the word ``literal`` (``'max'``, ``'auto'``)."""
    as_int = integer(gt=gt)

    def check(value: Any, path: str) -> int | str | None:
        if value is None and nullable:
            return None
        if value == literal and isinstance(value, str):
            return value
        try:
            return as_int(value, path)
        except Invalid as exc:
            raise Invalid(
                path, f"must be a positive integer or {literal!r}", exc.got, exc.fix
            ) from None

    return check


def opaque(*, nullable: bool = True) -> Checker:
    """Any mapping, kept as a :class:`FrozenMap` (sections aisim validates no further)."""

    def check(value: Any, path: str) -> FrozenMap | None:
        if value is None and nullable:
            return None
        if not isinstance(value, Mapping):
            raise Invalid(path, "must be a mapping", typed(value))
        return freeze(value)  # type: ignore[return-value]

    return check


def suggest(word: str, options: Any) -> str | None:
    """The closest of ``options`` to ``word`` (difflib), or None."""
    import difflib

    found = difflib.get_close_matches(word, [str(o) for o in options], n=1, cutoff=0.6)
    return found[0] if found else None


# --------------------------------------------------------------------------- field specs

_MISSING: Any = dataclasses.MISSING


@dataclass(frozen=True)
class Section:
    """Marker: the field is a nested section of class ``cls``."""

    cls: type
    nullable: bool = False
    """An explicit ``null`` is accepted (the field becomes None)."""
    optional: bool = False
    """When the key is absent the field is None (otherwise the section is built from ``{}``)."""


@dataclass(frozen=True)
class Tagged:
    """Marker: the field is a section whose class is chosen by a tag key (``type`` / ``kind``)."""

    registry: str
    """Name of the tag -> class map in :data:`aisim.config.registry.REGISTRIES`."""
    tag_key: str = "type"
    """The key holding the tag."""
    default_tag: str | None = None
    """Tag used when the key is absent from the mapping (None: the tag is required)."""
    nullable: bool = False
    optional: bool = False


def spec(check: Checker | Section | Tagged | None, *, yaml: bool = True) -> dict[str, Any]:
    """Field metadata: the checker (or section marker) and whether the field is a YAML key."""
    return {"check": check, "yaml": yaml}


def fld(
    default: Any = _MISSING, check: Checker | Section | Tagged | None = None, *, yaml: bool = True
) -> Any:
    """A dataclass field with its checker; no default means the YAML key is required.

    ``yaml=False`` marks a field that is filled by the loader, not read from the same mapping.
    """
    return field(default=default, metadata=spec(check, yaml=yaml))

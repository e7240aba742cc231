"""The generic section builder: a raw mapping -> one frozen dataclass, first error wins.

At every mapping: unknown keys first (in file order, with a close-match suggestion), then the
fields in declaration order (recursively, through :class:`~aisim.config.checks.Section` and
:class:`~aisim.config.checks.Tagged` markers), then the section's cross-field *hook*
(registered with :func:`hook` in :mod:`aisim.config.validate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aisim.config import registry as reg
from aisim.config.checks import Invalid, Section, Tagged, suggest, typed


@dataclasses.dataclass
class Ctx:
    """What a section needs to know about the rest of the config while it is built."""

    base_dir: Path
    backend: str = "vllm"
    mode: str = "aggregated"
    role: str = "aggregated"


Hook = Callable[[dict[str, Any], Mapping[str, Any], str, Ctx], None]
HOOKS: dict[type, Hook] = {}


def hook(cls: type) -> Callable[[Hook], Hook]:
    """Register the cross-field rules of section ``cls``."""

    def register(fn: Hook) -> Hook:
        HOOKS[cls] = fn
        return fn

    return register


def join(path: str, key: str) -> str:
    """``path.key`` (just ``key`` at the top level)."""
    return f"{path}.{key}" if path else key


def yaml_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The dataclass fields of ``cls`` that are YAML keys, in declaration order."""
    return [f for f in dataclasses.fields(cls) if f.metadata.get("yaml", True)]


def mapping(raw: Any, path: str) -> Mapping[str, Any]:
    """``raw`` if it is a mapping, else the error for ``path``."""
    if not isinstance(raw, Mapping):
        raise Invalid(path, "must be a mapping", typed(raw))
    return raw


def unknown_key(path: str, key: Any, allowed: Sequence[str], noun: str = "keys") -> Invalid:
    """The error for a key that is not in ``allowed``, with the closest allowed key."""
    near = suggest(str(key), allowed)
    what = f"unknown key (did you mean {near!r}?)" if near else "unknown key"
    return Invalid(join(path, str(key)), what, fix=f"allowed {noun}: {', '.join(allowed)}")


def build(
    cls: type,
    raw: Any,
    path: str,
    ctx: Ctx,
    *,
    listed_extra: Sequence[str] = (),
    noun: str = "keys",
) -> Any:
    """Build section ``cls`` from ``raw``: unknown keys, fields, then the section's hook."""
    raw = mapping(raw, path)
    allowed = [f.name for f in yaml_fields(cls)]
    for key in raw:
        if key not in allowed:
            raise unknown_key(path, key, [*listed_extra, *allowed], noun)
    values: dict[str, Any] = {}
    for f in yaml_fields(cls):
        values[f.name] = _field_value(f, raw, path, ctx)
    if cls in HOOKS:
        HOOKS[cls](values, raw, path, ctx)
    return cls(**values)


def _field_value(f: dataclasses.Field[Any], raw: Mapping[str, Any], path: str, ctx: Ctx) -> Any:
    check = f.metadata.get("check")
    sub = join(path, f.name)
    present = f.name in raw
    if isinstance(check, Section | Tagged):
        if not present:
            if f.default is dataclasses.MISSING:
                raise Invalid(sub, "is required")
            if check.optional:
                return None
            value: Any = {}
        else:
            value = raw[f.name]
            if value is None:
                if check.nullable:
                    return None
                raise Invalid(sub, "must be a mapping", typed(None))
        if isinstance(check, Section):
            return build(check.cls, value, sub, ctx)
        return build_tagged(check, value, sub, ctx)
    if not present:
        if f.default is dataclasses.MISSING:
            raise Invalid(sub, "is required")
        return f.default
    if check is None:  # filled by a hook
        return raw[f.name]
    return check(raw[f.name], sub)


def same_as_default(value: Any, default: Any) -> bool:
    if default is dataclasses.MISSING:
        return False
    if value is None or default is None:
        return value is None and default is None
    return type(value) is type(default) and value == default


def build_tagged(marker: Tagged, raw: Any, path: str, ctx: Ctx) -> Any:
    """Build a section whose class is chosen by its tag (``type:`` or ``kind:``)."""
    raw = mapping(raw, path)
    table = reg.REGISTRIES[marker.registry]
    tags = [t for t in table if t != reg.WILDCARD]
    key = marker.tag_key
    tag = raw.get(key, marker.default_tag)
    tag_path = join(path, key)
    if tag is None:
        raise Invalid(tag_path, "is required", fix=f"one of {', '.join(map(repr, tags))}")
    if not isinstance(tag, str) or (tag not in table and reg.WILDCARD not in table):
        near = suggest(str(tag), tags)
        hint = f"did you mean {near!r}? " if near else ""
        raise Invalid(
            tag_path, f"unknown {marker.registry} type", tag, f"{hint}valid: {', '.join(tags)}"
        )
    cls = table.get(tag, table.get(reg.WILDCARD))
    if marker.registry == "load" and tag in reg.RECOMMEND_ONLY_LOADS:
        raise Invalid(
            tag_path,
            "is only understood by AISimulate's recommend command, not by predict",
            tag,
            "use concurrency, poisson or constant_rate",
        )
    own = {f.name for f in yaml_fields(cls)}
    keep: dict[str, Any] = {}
    for k, v in raw.items():
        if k == key and k not in own:
            continue
        owners = [
            (t, f) for t, c in table.items() if c is not cls for f in yaml_fields(c) if f.name == k
        ]
        if k in own or not owners:
            keep[k] = v
            continue
        # A key of a sibling type: AISimulate ignores it at its default value only.
        if any(same_as_default(v, f.default) for _, f in owners):
            continue
        named = [repr(t) for t, _ in owners if t != reg.WILDCARD]
        fix = (
            f"it belongs to {marker.registry} type {', '.join(named)} only"
            if named
            else f"it applies to {marker.registry} types other than {tag!r}"
        )
        raise Invalid(
            join(path, str(k)), f"is not accepted by {marker.registry} type {tag!r}", v, fix
        )
    noun = f"keys for {marker.registry} type {tag!r}"
    if key in own:
        keep[key] = tag
        return build(cls, keep, path, ctx, noun=noun)
    return build(cls, keep, path, ctx, listed_extra=(key,), noun=noun)

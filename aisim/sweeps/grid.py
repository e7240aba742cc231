"""Sweep points: a base config plus override grids (`--grid KEY=V1,V2,...` or a sweep YAML).

Every point is an ordered tuple of `--set`-style overrides (`PATH=YAML_VALUE`), so a point run
alone is exactly `aisim predict -c BASE --set PATH=VALUE ...`. A sweep YAML holds dimensions:

    product:                       # each key is its own dimension
      traffic.load.concurrency: [1, 2, 4, 8]
    zip:                           # one dimension whose keys advance together
      engine.workers.aggregated.parallelism.tensor: [1, 2, 4]
      engine.workers.aggregated.parallelism.replicas: [4, 2, 1]

`zip` may also be a list of such mappings (several zipped dimensions); `groups:` may list
`{product: {...}}` / `{zip: {...}}` items in order. The points are the cartesian product of all
dimensions, first dimension outermost.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from aisim.errors import ConfigError


@dataclass(frozen=True)
class Point:
    index: int
    values: tuple[tuple[str, object], ...]  # (dotted path, value) in dimension order

    @property
    def overrides(self) -> tuple[str, ...]:
        return tuple(f"{k}={yaml_text(v)}" for k, v in self.values)

    def point_id(self, base_sha256: str) -> str:
        blob = json.dumps([base_sha256, list(self.overrides)]).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


def yaml_text(value) -> str:
    """A value as the YAML text `--set` parses back to the same value."""
    if isinstance(value, str):
        return value if _roundtrips(value) else json.dumps(value)
    return (
        yaml.safe_dump(value, default_flow_style=True, width=1 << 20)
        .strip()
        .removesuffix("\n...")
        .strip()
    )


def _roundtrips(text: str) -> bool:
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes (values may be YAML flow lists/maps)."""
    parts, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts]


def parse_grid(option: str) -> tuple[tuple[str, list], ...]:
    """`--grid PATH=V1,V2,...` -> one product dimension."""
    key, sep, rest = option.partition("=")
    key = key.strip()
    if not sep or not key or not rest.strip():
        raise ConfigError(
            f"--grid {option!r}: expected PATH=V1,V2,... e.g. traffic.load.concurrency=1,2,4"
        )
    values = []
    for text in _split_top(rest):
        if not text:
            raise ConfigError(f"--grid {option!r}: empty value in the list")
        try:
            values.append(yaml.safe_load(text))
        except yaml.YAMLError:
            raise ConfigError(f"--grid {option!r}: {text!r} is not a YAML value") from None
    return ((key, values),)


def _mapping_dims(group, where: str, zipped: bool) -> list[tuple[tuple[str, list], ...]]:
    if not isinstance(group, dict) or not group:
        raise ConfigError(f"{where}: expected a mapping of PATH: [values, ...]")
    for key, values in group.items():
        if not isinstance(key, str) or not isinstance(values, list) or not values:
            raise ConfigError(f"{where}.{key}: expected a non-empty list of values")
    if not zipped:
        return [((k, v),) for k, v in group.items()]
    lengths = {len(v) for v in group.values()}
    if len(lengths) != 1:
        raise ConfigError(
            f"{where}: zipped lists must have equal lengths, got "
            + ", ".join(f"{k}: {len(v)}" for k, v in group.items())
        )
    return [tuple(group.items())]


def load_sweep_yaml(path: str | Path) -> list[tuple[tuple[str, list], ...]]:
    """Sweep YAML -> dimensions (each a tuple of (path, values) advancing together)."""
    source = str(path)
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{source}: sweep file not found") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the sweep file must hold a mapping (product:, zip:)")
    unknown = set(raw) - {"product", "zip", "groups"}
    if unknown:
        raise ConfigError(
            f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
            "use product:, zip: or groups:"
        )
    items: list[tuple[str, object]] = []
    for key in raw:
        if key == "groups":
            if not isinstance(raw["groups"], list):
                raise ConfigError(f"{source}: groups: expected a list")
            for i, g in enumerate(raw["groups"]):
                if (
                    not isinstance(g, dict)
                    or len(g) != 1
                    or next(iter(g)) not in ("product", "zip")
                ):
                    raise ConfigError(f"{source}: groups[{i}]: expected product: or zip:")
                items.append((next(iter(g)), next(iter(g.values()))))
        elif key == "zip" and isinstance(raw["zip"], list):
            items.extend(("zip", g) for g in raw["zip"])
        else:
            items.append((key, raw[key]))
    dims = []
    for i, (kind, group) in enumerate(items):
        dims.extend(
            _mapping_dims(
                group,
                f"{source}: {kind}[{i}]" if kind == "zip" else f"{source}: {kind}",
                kind == "zip",
            )
        )
    return dims


def expand(dims: list[tuple[tuple[str, list], ...]]) -> list[Point]:
    """Cartesian product of the dimensions -> points in order."""
    keys = [k for dim in dims for k, _ in dim]
    if len(set(keys)) != len(keys):
        raise ConfigError(
            "sweep: a config path is swept twice: "
            + ", ".join(sorted({k for k in keys if keys.count(k) > 1}))
        )
    columns = [list(zip(*(vals for _, vals in dim), strict=True)) for dim in dims]
    points = []
    for i, combo in enumerate(itertools.product(*columns)):
        values = []
        for dim, picked in zip(dims, combo, strict=True):
            values.extend((k, v) for (k, _), v in zip(dim, picked, strict=True))
        points.append(Point(i, tuple(values)))
    return points

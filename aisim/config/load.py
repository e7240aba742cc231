"""Read a YAML config, apply ``--set`` overrides, validate, return the typed tree.

Flow: file -> YAML (duplicated keys rejected) -> top level must be a mapping -> ``--set``
overrides in command-line order -> :func:`aisim.config.validate.build_config`.  Every problem is
one :class:`aisim.errors.ConfigError` line starting with the file name.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from aisim.config.checks import Invalid, show
from aisim.config.schema import Config
from aisim.config.validate import build_config
from aisim.errors import ConfigError

REJECTED_OVERRIDE_ROOTS = ("optimization", "optimizer")
"""``--set`` paths under these are rejected (they belong to other AISimulate commands)."""

MAX_CONFIG_BYTES = 4 << 20
"""A config is a few KB; anything this large is not one (and would be slow to parse)."""
MAX_VALUES = 1_000_000
"""Values a config may hold once YAML aliases are expanded: a 1 KB file of nested aliases
(a "billion laughs") expands to 10^9 values, and every walk over it would hang."""
MAX_DEPTH = 100
"""Nesting levels a config may have (real ones have fewer than ten)."""


def _quoted(flag: str) -> str:
    """A --set flag as a message quotes it: at most 80 characters."""
    return show(flag, 80)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return _one_line(f"{problem}{where}")


def _node_key(node: yaml.Node) -> Any:
    return node.value if isinstance(node, yaml.ScalarNode) else None


def _find_duplicate(
    node: yaml.Node, path: str, seen_nodes: set[int] | None = None
) -> tuple[str, int] | None:
    """First duplicated mapping key under ``node``: (dotted path, line), depth first."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias seen before (or a recursive structure)
        return None
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[Any] = set()
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = _node_key(key_node)
            sub = f"{path}.{key}" if path else str(key)
            if key is not None:
                if key in keys:
                    return sub, key_node.start_mark.line + 1
                keys.add(key)
            found = _find_duplicate(value_node, sub, seen_nodes)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _find_duplicate(item, f"{path}[{i}]", seen_nodes)
            if found:
                return found
    return None


def _check_size(node: yaml.Node, source: str) -> None:
    """Refuse a node graph that expands to more than MAX_VALUES values or nests deeper than
    MAX_DEPTH; counted over shared (aliased) nodes once each, without recursion."""
    size: dict[int, int] = {}
    stack: list[tuple[yaml.Node, int, bool]] = [(node, 1, False)]
    on_path: set[int] = set()
    while stack:
        n, depth, done = stack.pop()
        key = id(n)
        children = _children(n)
        if done:
            on_path.discard(key)
            size[key] = 1 + sum(size[id(c)] for c in children)
            if size[key] > MAX_VALUES:
                raise ConfigError(
                    f"{source}: the YAML expands to more than {MAX_VALUES:,} values through "
                    "its aliases (*name); a config needs far fewer, write the values out"
                )
            continue
        if key in size:
            continue
        if key in on_path:
            raise ConfigError(
                f"{source}: a YAML alias refers to a value that contains it; "
                "a config cannot be recursive"
            )
        if depth > MAX_DEPTH:
            raise ConfigError(
                f"{source}: the YAML nests deeper than {MAX_DEPTH} levels; a config needs far fewer"
            )
        on_path.add(key)
        stack.append((n, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [c for pair in node.value for c in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def parse_yaml(text: str, source: str, what: str = "YAML") -> Any:
    """YAML text -> Python object with ``yaml.SafeLoader``; a duplicated key is an error.

    AISimulate silently keeps the last of two equal keys; aisim refuses, because the first
    value is then lost without a word. The text, the values it expands to and its nesting are
    bounded (MAX_CONFIG_BYTES, MAX_VALUES, MAX_DEPTH), so no input makes the loader or an
    error message walk for ever.
    """
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{source}: {len(text):,} characters is not a config (the limit is "
            f"{MAX_CONFIG_BYTES:,}); give the YAML config file"
        )
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(
                f"{source}: the YAML nests deeper than {MAX_DEPTH} levels; a config needs far fewer"
            ) from None
        if node is None:
            return None
        _check_size(node, source)
        dup = _find_duplicate(node, "")
        if dup:
            raise ConfigError(
                f"{source}: {dup[0]}: key appears twice in the same mapping (line {dup[1]}); "
                "keep only one"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid {what}: {_yaml_problem(exc)}") from None
    finally:
        loader.dispose()


def _set_path(raw: dict[str, Any], keys: list[str], value: Any, flag: str, source: str) -> None:
    node: Any = raw
    for depth, key in enumerate(keys[:-1]):
        nxt = node.get(key)
        if nxt is None:
            nxt = node[key] = {}
        elif not isinstance(nxt, dict):
            crossed = ".".join(keys[: depth + 1])
            raise ConfigError(
                f"{source}: --set {_quoted(flag)}: {crossed} is {show(nxt)}, not a mapping, so "
                "it has no sub-keys; set the whole value instead"
            )
        node = nxt
    node[keys[-1]] = value


def apply_overrides(
    raw: Mapping[str, Any], overrides: Sequence[str], *, source: str = "<config>"
) -> dict[str, Any]:
    """Return a copy of ``raw`` with every ``PATH=YAML_VALUE`` applied, in order.

    PATH is dot-separated mapping keys; missing intermediate mappings are created; a path that
    crosses a non-mapping value, an empty key or a list index is an error; the value is parsed
    with ``yaml.safe_load`` (empty = null); paths under optimization/optimizer are rejected.
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: the config must be a YAML mapping to apply --set to")
    result: dict[str, Any] = copy.deepcopy(dict(raw))
    for flag in overrides or ():
        if flag is None:
            continue
        path, sep, text = flag.partition("=")
        path = path.strip()
        if not sep:
            raise ConfigError(
                f"{source}: --set {_quoted(flag)}: expected PATH=YAML_VALUE, "
                "e.g. --set traffic.load.concurrency=32"
            )
        keys = path.split(".")
        if any(not k for k in keys):
            raise ConfigError(
                f"{source}: --set {_quoted(flag)}: the path has an empty key; use dot-separated "
                "keys such as engine.workers.aggregated.scheduler.max_sequences"
            )
        if any(k.isdigit() for k in keys):
            raise ConfigError(
                f"{source}: --set {_quoted(flag)}: list indices are not supported; "
                "set the whole list instead, e.g. --set 'traffic.source.paths=[a.jsonl]'"
            )
        if keys[0] in REJECTED_OVERRIDE_ROOTS:
            raise ConfigError(
                f"{source}: --set {_quoted(flag)}: '{keys[0]}' is not part of a predict config"
            )
        value = (
            parse_yaml(text, f"{source}: --set {_quoted(flag)}", what="YAML value")
            if text.strip()
            else None
        )
        _set_path(result, keys, value, flag, source)
    return result


def _note_defaults(raw: Mapping[str, Any], source: str) -> None:
    if isinstance(raw, Mapping) and "traffic" not in raw:
        from aisim.errors import note

        note(
            f"{source} has no traffic: section, so it runs AISimulate's default workload: 100 "
            "synthetic requests of 1024 prompt and 128 output tokens at concurrency 10"
        )


def parse_config(
    raw: Mapping[str, Any], source: str = "<config>", *, base_dir: str | Path | None = None
) -> Config:
    """Validate an already-loaded mapping into a :class:`Config`.

    ``base_dir`` resolves relative trace paths; by default the folder of ``source`` when it
    names an existing file, else the current directory.
    """
    if base_dir is None:
        src = Path(source)
        base_dir = src.parent if src.is_file() else Path.cwd()
    try:
        cfg = build_config(raw, source, Path(base_dir))
    except Invalid as exc:
        raise ConfigError(exc.line(source)) from None
    _note_defaults(raw, source)
    return cfg


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> Config:
    """Read, override and validate the YAML config at ``path``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read the config file: {_one_line(exc)}") from None
    raw = parse_yaml(text, source)
    if not isinstance(raw, dict):
        what = "empty" if raw is None else f"a {type(raw).__name__}"
        raise ConfigError(
            f"{source}: the file must hold one YAML mapping (traffic:, engine:, ...), "
            f"but it is {what}"
        )
    raw = apply_overrides(raw, overrides, source=source)
    return parse_config(raw, source, base_dir=Path(path).resolve().parent)

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


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> Python object with ``yaml.SafeLoader``; a duplicated key is an error.

    AISimulate silently keeps the last of two equal keys; aisim refuses, because the first
    value is then lost without a word.
    """
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        dup = _find_duplicate(node, "")
        if dup:
            raise ConfigError(
                f"{source}: {dup[0]}: key appears twice in the same mapping (line {dup[1]}); "
                "keep only one"
            )
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: invalid YAML: {_yaml_problem(exc)}") from None
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
                f"{source}: --set {flag!r}: {crossed} is {show(nxt)}, not a mapping, so it has "
                "no sub-keys; set the whole value instead"
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
                f"{source}: --set {flag!r}: expected PATH=YAML_VALUE, "
                "e.g. --set traffic.load.concurrency=32"
            )
        keys = path.split(".")
        if any(not k for k in keys):
            raise ConfigError(
                f"{source}: --set {flag!r}: the path has an empty key; use dot-separated keys "
                "such as engine.workers.aggregated.scheduler.max_sequences"
            )
        if any(k.isdigit() for k in keys):
            raise ConfigError(
                f"{source}: --set {flag!r}: list indices are not supported; "
                "set the whole list instead, e.g. --set 'traffic.source.paths=[a.jsonl]'"
            )
        if keys[0] in REJECTED_OVERRIDE_ROOTS:
            raise ConfigError(
                f"{source}: --set {flag!r}: '{keys[0]}' is not part of a predict config"
            )
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(
                f"{source}: --set {flag!r}: invalid YAML value: {_yaml_problem(exc)}"
            ) from None
        _set_path(result, keys, value, flag, source)
    return result


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
        return build_config(raw, source, Path(base_dir))
    except Invalid as exc:
        raise ConfigError(exc.line(source)) from None


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

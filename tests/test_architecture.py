"""The shape of the code base: kernels stand alone, modules stay small, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"aisim": ROOT / "aisim", "aisim.kernels": ROOT / "kernels"}
MAX_LINES = 650  # "about 600": a module beyond it is split by concern


def _modules() -> dict[str, Path]:
    out = {}
    for prefix, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([prefix, *parts])] = path
    return out


def _imports(path: Path) -> set[str]:
    """Modules a file imports, at any depth (lazy imports inside functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_kernels_do_not_import_the_python_package() -> None:
    """Kernels are pure functions of the arrays they are given (the Python package calls them,
    never the other way round)."""
    for name, path in _modules().items():
        if not name.startswith("aisim.kernels"):
            continue
        outside = {
            m
            for m in _imports(path)
            if m.startswith("aisim.") and not m.startswith("aisim.kernels")
        }
        assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


def test_modules_stay_small() -> None:
    for folder in ("aisim", "kernels", "bench", "tests"):
        for path in (ROOT / folder).rglob("*.py"):
            n = len(path.read_text().splitlines())
            assert n <= MAX_LINES, f"{path.relative_to(ROOT)}: {n} lines"


def test_no_import_cycles_at_module_level() -> None:
    """Module-level imports between aisim modules form no cycle (a lazy import inside a
    function is how a late dependency is spelt)."""
    modules = _modules()
    graph = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    # `from pkg import submodule` depends on the submodule, not on pkg's body
                    sub = f"{node.module}.{a.name}"
                    cand = sub if sub in modules else node.module
                    if cand in modules and cand != name:
                        deps.add(cand)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name in modules and a.name != name}
        graph[name] = deps
    state: dict[str, int] = {}

    def visit(n: str, trail: list[str]) -> None:
        state[n] = 1
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*trail, n, d]))
            if d not in state:
                visit(d, [*trail, n])
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n, [])


def test_every_run_goes_through_the_one_driver() -> None:
    """The event loops are called by their pool layout's module only, and those by the driver:
    a feature built around a run (reruns, cut-off, errors, results) is written once."""
    owners = {
        "aisim.kernels.loop": {"aisim.engine.one_pool"},
        "aisim.kernels.loop_pd": {"aisim.engine.pd_pools"},
        "aisim.engine.one_pool": {"aisim.engine.driver", "aisim.engine.pd_pools"},
        "aisim.engine.pd_pools": {"aisim.engine.driver"},
    }
    for name, path in _modules().items():
        if name.startswith("aisim.kernels"):
            continue
        for target, allowed in owners.items():
            if target in _imports(path):
                assert name in allowed, f"{path.relative_to(ROOT)} imports {target}"

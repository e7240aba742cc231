"""Which source files feed one op table: the shared-layer rules of docs/timing.md 2.2.

Channels, in priority order (earlier wins on a key conflict):

1. ``primary``        ``<family>/<backend>/<requested version>/<file>``, no filter (always
                      listed, ``exists`` false when the file is missing);
2. ``declared_reuse`` donors named by the requested version's ``reuse.yaml``, in file order
                      (the only channel that may borrow a newer version);
3. ``fallback``       same-backend versions strictly earlier than requested, nearest first;
4. ``cross_backend``  other backends' rows whose ``kernel_source`` the
                      ``perf_data_reuse_manifest.yaml`` lists as consumable by this backend
                      (tiers shared / shared_fallback), frameworks sorted, newest version first.

With ``enable_shared_layer: false`` only channel 1 is used. NCCL never inherits. Communication
tables stored under ``comm/<backend>/`` (custom allreduce, MoE all-to-all) use channel 1 plus
channel 3 restricted to ``comm/<backend>/`` (AISimulate's framework-versioned comm rule; this is
what gives vLLM custom allreduce its 0.19.0 fallback and TRT-LLM its 1.3.0rc10 / 1.2.0rc5 ones).
Directory walks are sorted so the result does not depend on the filesystem's listing order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

KNOWN_BACKEND_DIRS = ("trtllm", "sglang", "vllm", "nccl", "oneccl")
FRAMEWORK_AGNOSTIC_FILES = ("nccl_perf.parquet", "oneccl_perf.parquet")
COMM_FAMILY = "comm"
COMM_VERSIONED_BACKENDS = ("sglang", "trtllm", "vllm")
REUSE_KEYS = ("table", "from_version", "reason", "approved_by")


@dataclass(frozen=True)
class Source:
    channel: str  # primary | declared_reuse | fallback | cross_backend
    backend: str  # the backend directory the file lives under
    version: str
    path: Path
    exists: bool
    ks_filter: tuple[str, ...] | None = None  # kernel_source allow-list (cross_backend only)


# ---------------------------------------------------------------------------- PEP 440 ordering

_PEP440 = re.compile(
    r"^v?(?:(?P<epoch>\d+)!)?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:-(?P<post_n1>\d+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>\d*))?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>\d*))?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
_LOW, _HIGH = (0,), (2,)  # sentinels below / above any real (1, value) component


def version_key(version: str) -> tuple | None:
    """A sort key with PEP 440 ordering (as packaging.version), or None if unparseable."""
    m = _PEP440.match(version.strip())
    if m is None:
        return None
    release = [int(x) for x in m.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre = None
    if m.group("pre_l"):
        pre = (_PRE_RANK[m.group("pre_l").lower()], int(m.group("pre_n") or 0))
    post = None
    if m.group("post_n1") is not None:
        post = int(m.group("post_n1"))
    elif m.group("post_l"):
        post = int(m.group("post_n2") or 0)
    dev = int(m.group("dev_n") or 0) if m.group("dev_l") else None
    if pre is None and post is None and dev is not None:
        pre_k = _LOW
    elif pre is None:
        pre_k = _HIGH
    else:
        pre_k = (1, pre)
    post_k = _LOW if post is None else (1, post)
    dev_k = _HIGH if dev is None else (1, dev)
    if m.group("local"):
        parts = re.split(r"[-_.]", m.group("local").lower())
        local_k = (1, tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in parts))
    else:
        local_k = _LOW
    return (int(m.group("epoch") or 0), tuple(release), pre_k, post_k, dev_k, local_k)


# ---------------------------------------------------------------------------- tree walks


def _subdirs(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    return sorted((p for p in path.iterdir() if p.is_dir()), key=lambda p: p.name)


def version_dir_unusable(vdir: Path) -> bool:
    """A legacy INCOMPLETE.txt marker without a collection_meta.yaml vetoes the directory."""
    return (vdir / "INCOMPLETE.txt").is_file() and not (vdir / "collection_meta.yaml").is_file()


def _family_dirs(data_root: Path) -> list[Path]:
    return [
        p
        for p in _subdirs(data_root)
        if not p.name.startswith(".") and p.name not in KNOWN_BACKEND_DIRS
    ]


def op_data_path(data_root: Path, backend: str, version: str, op_file: str) -> Path:
    """The file for (backend, version) in the family-first layout, else the legacy path."""
    for fam in _family_dirs(data_root):
        vdir = fam / backend / version
        if vdir.is_dir() and not version_dir_unusable(vdir) and (vdir / op_file).is_file():
            return vdir / op_file
    return data_root / backend / version / op_file


def backend_versions(data_root: Path, backend: str) -> list[tuple[str, Path]]:
    """(version, dir) for a backend across family dirs and the legacy <backend>/ layout."""
    out = []
    for entry in _subdirs(data_root):
        if entry.name.startswith("."):
            continue
        if entry.name == backend:
            parents = [entry]
        elif entry.name not in KNOWN_BACKEND_DIRS:
            parents = [entry / backend]
        else:
            continue
        for parent in parents:
            out.extend((v.name, v) for v in _subdirs(parent) if not v.name.startswith((".", "_")))
    return out


def _location(path: Path, data_root: Path) -> tuple[str | None, str] | None:
    """(family or None for the legacy layout, storage backend) encoded by a table path."""
    try:
        parts = path.relative_to(data_root).parts
    except ValueError:
        return None
    if len(parts) == 4 and parts[0] not in KNOWN_BACKEND_DIRS:
        return parts[0].lower(), parts[1].lower()
    if len(parts) == 3:
        return None, parts[0].lower()
    return None


def _families_holding(data_root: Path, op_file: str) -> set[str]:
    found = set()
    for fam in _family_dirs(data_root):
        for be in _subdirs(fam):
            if any(
                (v / op_file).is_file() for v in _subdirs(be) if not v.name.startswith((".", "_"))
            ):
                found.add(fam.name.lower())
                break
    return found


def parse_reuse_yaml(path: Path) -> list[dict]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or "reuse" not in doc:
        raise ValueError(f"{path}: missing required top-level 'reuse' key")
    entries = doc["reuse"]
    if not isinstance(entries, list):
        raise ValueError(f"{path}: 'reuse' must be a list")
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise ValueError(f"{path}: reuse[{i}] must be a mapping")
        missing = [k for k in REUSE_KEYS if k not in e]
        if missing:
            raise ValueError(f"{path}: reuse[{i}] missing required key(s): {', '.join(missing)}")
        for k in REUSE_KEYS:
            if not isinstance(e[k], str) or not e[k].strip():
                raise ValueError(f"{path}: reuse[{i}].{k} must be a non-empty string")
    return entries


def _manifest_groups(systems_root: Path, op_file: str) -> list[dict]:
    path = systems_root / "perf_data_reuse_manifest.yaml"
    if not path.is_file():
        return []
    doc = yaml.safe_load(path.read_text()) or {}
    out = []
    for g in doc.get("groups") or []:
        name = g.get("op_file") or ""
        if name.endswith(".txt"):
            name = name[:-4] + ".parquet"
        if name == op_file:
            out.append(g)
    return out


# ---------------------------------------------------------------------------- the resolver


def resolve_sources(
    data_root: Path,
    systems_root: Path,
    backend: str,
    version: str,
    op_file: str,
    shared_layer: bool = True,
    warnings: list[str] | None = None,
) -> list[Source]:
    """The ordered source list for one op file (see the module docstring)."""
    warnings = warnings if warnings is not None else []
    backend = backend.lower()
    primary = op_data_path(data_root, backend, version, op_file)
    records = [Source("primary", backend, version, primary, primary.is_file())]
    if not shared_layer or op_file in FRAMEWORK_AGNOSTIC_FILES:
        return records

    loc = _location(primary, data_root)
    if loc is not None and loc[0] is not None:
        namespaces = {loc}
    else:
        storage = loc[1] if loc is not None else ""
        namespaces = {(fam, storage) for fam in _families_holding(data_root, op_file)}
    comm_backend = None
    if len(namespaces) == 1:
        fam, storage = next(iter(namespaces))
        if fam == COMM_FAMILY:
            if storage != backend or storage not in COMM_VERSIONED_BACKENDS:
                return records
            comm_backend = storage
    elif any(fam == COMM_FAMILY for fam, _ in namespaces):
        return records  # ambiguous legacy basename: fail closed, as AISimulate does

    declared: list[str] = []
    if comm_backend is None:
        for cand, vdir in backend_versions(data_root, backend):
            if cand != version or not (vdir / "reuse.yaml").is_file():
                continue
            try:
                entries = parse_reuse_yaml(vdir / "reuse.yaml")
            except (ValueError, yaml.YAMLError) as exc:
                warnings.append(f"malformed reuse.yaml ignored: {exc}")
                continue
            for e in entries:
                if f"{e['table']}.parquet" != op_file or e["from_version"] in declared:
                    continue
                path = op_data_path(data_root, backend, e["from_version"], op_file)
                if path.is_file() and not version_dir_unusable(path.parent):
                    records.append(Source("declared_reuse", backend, e["from_version"], path, True))
                    declared.append(e["from_version"])

    requested = version_key(version)
    if requested is not None:
        if comm_backend is not None:
            cands = {
                v.name
                for v in _subdirs(data_root / COMM_FAMILY / comm_backend)
                if not v.name.startswith((".", "_"))
            }
        else:
            cands = {v for v, _ in backend_versions(data_root, backend)}
        cands -= {version, *declared}
        earlier = []
        for v in sorted(cands):
            key = version_key(v)
            if key is None:
                warnings.append(f"unparseable sibling version {backend}/{v} skipped")
            elif key < requested:
                earlier.append((key, v))
        for _, v in sorted(earlier, reverse=True):
            if comm_backend is not None:
                path = data_root / COMM_FAMILY / comm_backend / v / op_file
            else:
                path = op_data_path(data_root, backend, v, op_file)
            if path.is_file() and not version_dir_unusable(path.parent):
                records.append(Source("fallback", backend, v, path, True))
    if comm_backend is not None:
        return records

    allow: dict[str, set[str]] = {}
    for g in _manifest_groups(systems_root, op_file):
        fws = {str(f).lower() for f in g.get("frameworks") or []}
        ks = g.get("kernel_source")
        if backend not in fws or not ks or g.get("tier") not in ("shared", "shared_fallback"):
            continue
        for fw in fws:
            allow.setdefault(fw, set()).add(str(ks))
    for fw in sorted(set(allow) - {backend}):
        versions = sorted(
            {v for v, _ in backend_versions(data_root, fw)},
            key=lambda v: (1, version_key(v)) if version_key(v) else (0, v),
            reverse=True,
        )
        for v in versions:
            path = op_data_path(data_root, fw, v, op_file)
            if path.is_file() and not version_dir_unusable(path.parent):
                records.append(Source("cross_backend", fw, v, path, True, tuple(sorted(allow[fw]))))
    return records


def nccl_source(data_root: Path, nccl_version: str, library: str = "nccl") -> Source:
    """The system-wide collective table selected by the system yaml: misc.nccl_version's NCCL
    table, or with `library` "oneccl" misc.oneccl_version's oneCCL table (b60), which has the
    NCCL table's columns."""
    fam = data_root / COMM_FAMILY / library / nccl_version
    usable = fam.is_dir() and not version_dir_unusable(fam)
    vdir = fam if usable else data_root / library / nccl_version
    path = vdir / f"{library}_perf.parquet"
    return Source("primary", library, nccl_version, path, path.is_file())

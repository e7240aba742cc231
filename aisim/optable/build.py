"""`aisim optable build`: silicon parquet tree -> data/optables/<hardware>/.

Output layout (all deterministic: a rebuild from the same tree gives the same bytes)::

    <out>/NOTICE, <out>/LICENSE-*.txt            attribution and the source licence
    <out>/<hw>/manifest.json                     every table: rows, keys, sources, sha256
    <out>/<hw>/system.json                       GPU/node constants from <hw>.yaml
    <out>/<hw>/PROVENANCE.md                     what was compiled from where, and the rules
    <out>/<hw>/<backend>/<version>/<family>.arrow
    <out>/<hw>/nccl/<nccl_version>/nccl.arrow    system-wide, selected by misc.nccl_version
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from aisim.errors import OpTableError
from aisim.optable.compile import compile_family, sha256_file, write_ipc
from aisim.optable.provenance import notice_text, provenance_markdown
from aisim.optable.resolve import nccl_source, resolve_sources
from aisim.optable.schema import FAMILIES, FAMILY_BY_NAME, FORMAT_VERSION

DEFAULT_TARGETS = (("vllm", "0.24.0"), ("trtllm", "1.3.0rc20"))
GENERATOR = "aisim optable build"


@dataclass
class SourceTree:
    systems_root: Path  # holds <hw>.yaml and perf_data_reuse_manifest.yaml
    data_root: Path  # <family>/<backend>/<version>/<table>.parquet lives here
    system_yaml: Path
    licenses: list[Path] = field(default_factory=list)


def locate_source(source: Path, hardware: str) -> SourceTree:
    """Accept the silicon layout (DIR/<hw>.yaml + DIR/<hw>/...) and the PyPI `systems/` layout
    (systems/<hw>.yaml with data_dir: data/<hw>), given DIR, systems/ or systems/data/."""
    source = Path(source)
    for root in (source, source.parent):
        yml = root / f"{hardware}.yaml"
        if not yml.is_file():
            continue
        doc = yaml.safe_load(yml.read_text()) or {}
        cands = [root / doc["data_dir"]] if doc.get("data_dir") else []
        cands += [root / hardware, root / "data" / hardware]
        for data_root in cands:
            if data_root.is_dir():
                lic = sorted(
                    p
                    for p in root.iterdir()
                    if p.is_file() and p.name.upper().startswith("LICENSE")
                )
                return SourceTree(root, data_root, yml, lic)
    raise OpTableError(
        f"no silicon tables for hardware '{hardware}' under {source}: expected "
        f"{hardware}.yaml beside a {hardware}/ folder of "
        "<family>/<backend>/<version>/*.parquet"
    )


def system_constants(tree: SourceTree, hardware: str) -> dict:
    doc = yaml.safe_load(tree.system_yaml.read_text()) or {}

    def plain(v):
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, list):
            return [plain(x) for x in v]
        return v

    out = {k: plain(v) for k, v in doc.items() if k != "data_dir"}
    out.update(
        hardware=hardware,
        source_file=tree.system_yaml.name,
        source_sha256=sha256_file(tree.system_yaml),
    )
    return out


def _dump_json(obj, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, sort_keys=True, indent=1) + "\n")


def _clear_output(hw_dir: Path) -> None:
    """Remove a previous build of this hardware (only if it is ours)."""
    if not hw_dir.exists():
        return
    man = hw_dir / "manifest.json"
    ours = man.is_file() and json.loads(man.read_text()).get("generator") == GENERATOR
    if not ours and any(hw_dir.iterdir()):
        raise OpTableError(
            f"{hw_dir} exists and is not an aisim optable build; remove it or choose another --out"
        )
    shutil.rmtree(hw_dir)


def build_optables(
    source: Path,
    hardware: str,
    out: Path,
    targets: tuple[tuple[str, str], ...] = DEFAULT_TARGETS,
    families: tuple[str, ...] | None = None,
    origin: str = "",
    log=None,
) -> dict:
    """Compile every family of every (backend, version) target; return the manifest."""
    log = log or (lambda msg: None)
    tree = locate_source(source, hardware)
    system = system_constants(tree, hardware)
    misc = system.get("misc") or {}
    # the system's collective library: oneCCL where the system names a version of it (b60, as
    # AISimulate reads it), NCCL otherwise; compiled as the `nccl` family either way
    library = "oneccl" if misc.get("oneccl_version") else "nccl"
    nccl_version = str(misc.get(f"{library}_version") or "")
    fams = [FAMILY_BY_NAME[f] for f in families] if families else list(FAMILIES)
    out = Path(out)
    hw_dir = out / hardware
    _clear_output(hw_dir)

    warnings: list[str] = []
    entries: list[dict] = []
    target_meta: list[dict] = []

    def emit(family, sources, backend, version):
        table, meta = compile_family(family, sources, tree.data_root, hardware, backend, version)
        rel = Path(backend) / version / f"{family.name}.arrow"
        path = hw_dir / rel
        write_ipc(table, path)
        entries.append(
            {
                "backend": backend,
                "version": version,
                "family": family.name,
                "file": rel.as_posix(),
                "rows": meta["rows"],
                "rows_primary": meta["rows_primary"],
                "key_columns": meta["key_columns"],
                "columns": table.column_names,
                "unit": meta["unit"],
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
                "sources": [
                    {k: s[k] for k in ("src", "channel", "backend", "version", "path", "rows_kept")}
                    for s in meta["sources"]
                ],
            }
        )
        log(
            f"{backend}/{version}/{family.name}: {meta['rows']} rows "
            f"({meta['rows_primary']} primary) from "
            + ", ".join(f"{s['channel']} {s['version']}" for s in meta["sources"] if s["exists"])
        )

    for backend, version in targets:
        built, absent = [], []
        for fam in fams:
            if fam.system:
                continue
            srcs = resolve_sources(
                tree.data_root,
                tree.systems_root,
                backend,
                version,
                fam.op_file,
                shared_layer=True,
                warnings=warnings,
            )
            if not any(s.exists for s in srcs):
                absent.append(fam.name)
                continue
            emit(fam, srcs, backend, version)
            built.append(fam.name)
        if not built:
            raise OpTableError(
                f"no silicon tables for {hardware} {backend} {version} under {tree.data_root}"
            )
        target_meta.append(
            {"backend": backend, "version": version, "families": built, "absent": absent}
        )

    if nccl_version and any(f.system for f in fams):
        src = nccl_source(tree.data_root, nccl_version, library)
        if src.exists:
            emit(FAMILY_BY_NAME["nccl"], [src], "nccl", nccl_version)
        else:
            warnings.append(f"{library} {nccl_version} table not found at {src.path}")

    if not tree.licenses:
        warnings.append("no LICENSE* file beside the system yaml; NOTICE written without it")
    root_names = ((str(tree.data_root), hardware), (str(tree.systems_root), "."))
    for old, new in root_names:
        warnings = [w.replace(old, new) for w in warnings]
    warnings = list(dict.fromkeys(warnings))
    _dump_json(system, hw_dir / "system.json")
    manifest = {
        "format_version": FORMAT_VERSION,
        "generator": GENERATOR,
        "hardware": hardware,
        "nccl_version": nccl_version,
        "collective_library": library,
        "origin": origin,
        "targets": target_meta,
        "system": {"file": "system.json", "sha256": sha256_file(hw_dir / "system.json")},
        "source_files": {
            "system_yaml": {"file": tree.system_yaml.name, "sha256": sha256_file(tree.system_yaml)},
            "reuse_manifest": (
                {
                    "file": "perf_data_reuse_manifest.yaml",
                    "sha256": sha256_file(tree.systems_root / "perf_data_reuse_manifest.yaml"),
                }
                if (tree.systems_root / "perf_data_reuse_manifest.yaml").is_file()
                else None
            ),
            "licenses": [p.name for p in tree.licenses],
        },
        "warnings": warnings,
        "tables": sorted(entries, key=lambda e: (e["backend"], e["version"], e["family"])),
    }
    _dump_json(manifest, hw_dir / "manifest.json")
    (hw_dir / "PROVENANCE.md").write_text(provenance_markdown(manifest))
    out.mkdir(parents=True, exist_ok=True)
    for lic in tree.licenses:
        shutil.copyfile(lic, out / lic.name)
    (out / "NOTICE").write_text(notice_text([p.name for p in tree.licenses]))
    for w in warnings:
        log(f"warning: {w}")
    return manifest

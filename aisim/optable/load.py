"""Load the compiled op-time tables (`data/optables/<hardware>/`), lazily, one family at a time.

`load_optable` reads only manifest.json and system.json; a family's Arrow file is read (and
its zstd buffers decompressed) on first use and cached in the OpTable object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from aisim.errors import OpTableError

META_KEY = b"aisim.optable"


def default_root() -> Path:
    """The shipped tables: data/optables inside the installed package (aisim.data)."""
    return Path(str(resources.files("aisim.data") / "optables"))


def read_manifest(hardware: str, root: Path | None = None) -> dict:
    root = Path(root) if root is not None else default_root()
    path = root / hardware / "manifest.json"
    if not path.is_file():
        have = (
            sorted(p.name for p in root.iterdir() if (p / "manifest.json").is_file())
            if root.is_dir()
            else []
        )
        raise OpTableError(
            f"no compiled op-time tables for hardware '{hardware}' in {root} "
            f"(available: {', '.join(have) or 'none'}); build them with "
            f"`aisim optable build --source DIR --hardware {hardware}`"
        )
    return json.loads(path.read_text())


@dataclass(frozen=True, eq=False)
class OpTable:
    """The op-time tables of one (hardware, backend, version), plus the hardware's NCCL table.

    ``table(f)`` gives the pyarrow Table, ``columns(f)`` a dict of numpy arrays (dictionary
    columns as their integer codes; ``categories(f)`` maps codes back to strings), ``meta(f)``
    the table's metadata (key columns, sources, constants). ``primary_only=True`` keeps the rows
    of the requested version's own directory (``enable_shared_layer: false``).
    """

    hardware: str
    backend: str
    version: str
    root: Path
    manifest: dict
    system: dict
    entries: dict  # family -> manifest entry
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted(self.entries))

    def _entry(self, family: str) -> dict:
        try:
            return self.entries[family]
        except KeyError:
            raise OpTableError(
                f"op-time table '{family}' not available for {self.hardware} {self.backend} "
                f"{self.version} (available: {', '.join(self.families)})"
            ) from None

    def table(self, family: str):
        """The family as a pyarrow Table (sorted on its key columns)."""
        key = ("table", family)
        if key not in self._cache:
            import pyarrow as pa

            entry = self._entry(family)
            path = self.root / entry["file"]
            if not path.is_file():
                raise OpTableError(
                    f"op-time table file missing: {path} ({self.hardware} "
                    f"{entry['backend']} {entry['version']} {family})"
                )
            with pa.memory_map(str(path)) as src:
                tbl = pa.ipc.open_file(src).read_all()
            self._cache[key] = tbl.combine_chunks()
        return self._cache[key]

    def meta(self, family: str) -> dict:
        key = ("meta", family)
        if key not in self._cache:
            self._cache[key] = json.loads(self.table(family).schema.metadata[META_KEY])
        return self._cache[key]

    def sources(self, family: str) -> list[dict]:
        return self.meta(family)["sources"]

    def categories(self, family: str) -> dict[str, list[str]]:
        return self.meta(family)["categories"]

    def code(self, family: str, column: str, value: str) -> int:
        """Integer code of a string value in a dictionary column, -1 if absent."""
        cats = self.categories(family).get(column)
        if cats is None:
            raise OpTableError(f"column '{column}' of {family} is not a dictionary column")
        try:
            return cats.index(value)
        except ValueError:
            return -1

    def columns(self, family: str, primary_only: bool = False) -> dict[str, np.ndarray]:
        """{column: numpy array}; dictionary columns as int codes. Arrays are read-only."""
        key = ("columns", family)
        if key not in self._cache:
            import pyarrow as pa

            out = {}
            for name, col in zip(
                self.table(family).column_names, self.table(family).columns, strict=True
            ):
                arr = col.chunk(0) if col.num_chunks else col.combine_chunks()
                if pa.types.is_dictionary(arr.type):
                    arr = arr.indices
                out[name] = arr.to_numpy(zero_copy_only=True)
            self._cache[key] = out
        cols = self._cache[key]
        if not primary_only:
            return dict(cols)
        pkey = ("primary", family)
        if pkey not in self._cache:
            mask = cols["src"] == 0
            sub = {}
            for name, arr in cols.items():
                a = arr[mask]
                a.flags.writeable = False
                sub[name] = a
            self._cache[pkey] = sub
        return dict(self._cache[pkey])

    def decode(self, family: str, column: str, codes: np.ndarray) -> np.ndarray:
        """Strings of a dictionary column for the given codes."""
        cats = np.array(self.categories(family)[column], dtype=object)
        return cats[np.asarray(codes, dtype=np.int64)]

    def source_order(self, family: str, primary_only: bool = False) -> np.ndarray:
        """Row indices (into ``columns(family, primary_only)``) in the order AISimulate reads
        them: source priority, then file order. Replays first-seen orders such as the GEMM
        site walk (m, then n under m, then k under (m, n))."""
        cols = self.columns(family, primary_only)
        return np.lexsort((cols["src_row"], cols["src"]))

    def first_seen(self, family: str, column: str, primary_only: bool = False) -> list:
        """Values of a column in first-seen order of the source rows (source priority, then
        file order): e.g. GEMM quant order or attention lanes in load order."""
        cols = self.columns(family, primary_only)
        vals = cols[column][self.source_order(family, primary_only)]
        _, idx = np.unique(vals, return_index=True)
        firsts = vals[np.sort(idx)]
        if column in self.categories(family):
            return [self.categories(family)[column][int(c)] for c in firsts]
        return [int(v) for v in firsts]


def load_optable(
    hardware: str = "b200_sxm",
    backend: str = "vllm",
    version: str = "0.24.0",
    root: Path | None = None,
) -> OpTable:
    """The compiled tables of one backend version on one GPU (lazy per family)."""
    root = Path(root) if root is not None else default_root()
    manifest = read_manifest(hardware, root)
    hw_root = root / hardware
    entries = {
        e["family"]: e
        for e in manifest["tables"]
        if e["backend"] == backend and e["version"] == version
    }
    if not entries:
        have = sorted(
            {f"{e['backend']} {e['version']}" for e in manifest["tables"] if e["backend"] != "nccl"}
        )
        raise OpTableError(
            f"no compiled op-time tables for {hardware} backend '{backend}' "
            f"version '{version}' (available: {', '.join(have)})"
        )
    nccl = manifest.get("nccl_version")
    for e in manifest["tables"]:
        if e["backend"] == "nccl" and e["version"] == nccl:
            entries.setdefault(e["family"], e)
    system_path = hw_root / manifest["system"]["file"]
    if not system_path.is_file():
        raise OpTableError(f"system constants missing for {hardware}: {system_path}")
    system = json.loads(system_path.read_text())
    return OpTable(hardware, backend, version, hw_root, manifest, system, entries)

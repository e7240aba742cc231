"""Result files: prediction.json, requests.jsonl / requests.parquet, prediction.sha256, ...

A result folder holds one complete run or the run it held before, never a mix and never a
half-written file. :class:`ResultFolder` is opened before the simulation starts (so an
unwritable folder is refused before minutes of work), every file is written into a hidden
staging folder inside it, and only when all of them are complete are they renamed into place,
with Ctrl-C and SIGTERM held back for those few renames. A failure or an interrupt removes the
staging folder; the earlier results stay as they were. Staging folders of processes that were
killed outright are removed by the next run into the same folder.

Per-request records are streamed (aisim.output.records): requests.jsonl, requests.parquet and
the `per_request` array of prediction.json are written a batch at a time, with the same bytes a
whole-list dump gives.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import signal
import threading
from pathlib import Path

from aisim.output.contract import EXTENSION_FIELDS, HOST_FIELDS

OUTPUT_NAMES = (
    "prediction.json",
    "requests.jsonl",
    "requests.parquet",
    "prediction.sha256",
    "summary.parquet",
    "passes.parquet",
    "vllm_bench.json",
)
STAGING_PREFIX = ".aisim-staging-"
# requests.parquet rows per row group: pyarrow's own default, so the streamed file has the
# bytes pq.write_table gives the whole table (one row group per 1,048,576 rows)
ROW_GROUP = 1 << 20
# stands in for the per_request array while the rest of prediction.json is rendered
_PLACEHOLDER = "\0aisim per_request\0"


# outside the hash: host times, and aisim's own views of the run (the latency attribution comes
# from the records the hash already covers), so a captured and an uncaptured run hash alike
UNHASHED = frozenset(HOST_FIELDS) | frozenset(EXTENSION_FIELDS)


def prediction_sha256(prediction: dict) -> str:
    """Hash of every deterministic field: a change can prove its simulated outputs unchanged."""
    det = {k: v for k, v in prediction.items() if k not in UNHASHED}
    blob = json.dumps(det, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def os_error_text(exc: OSError) -> str:
    """An OSError as the few words a one-line message quotes (its strerror)."""
    return " ".join((exc.strerror or str(exc)).split())


class ResultFolder:
    """The output folder of one run, ready to take a complete set of result files.

    Opening it checks what can be checked before simulating: the path is (or can become) a
    folder, aisim can create files in it, and it holds no earlier results unless `overwrite`.
    Use as a context manager: leaving it by an exception removes everything it staged (and the
    folder itself when it created it and it is empty).
    """

    def __init__(self, out_dir: Path | str, overwrite: bool, flag: str = "--output-dir"):
        from aisim.errors import AisimError

        self.flag = flag
        if str(out_dir).strip() == "":
            raise AisimError(f"{flag}: the path is empty; name a folder (. for the current one)")
        self.path = Path(out_dir)
        self.created: list[Path] = []
        self.staging: Path | None = None
        self.committed = False
        path = self.path
        if path.is_symlink() and not path.exists():
            raise AisimError(
                f"{flag}: {path} is a symbolic link to {os.readlink(path)}, which "
                "does not exist; create its target or give another folder"
            )
        if path.exists() and not path.is_dir():
            raise AisimError(f"{flag}: {path} exists and is not a directory")
        existing = [n for n in OUTPUT_NAMES if (path / n).exists()]
        if existing and not overwrite:
            how = "pass --overwrite" if flag.startswith("--") else "give overwrite=True"
            raise AisimError(
                f"{flag}: {path} already holds {', '.join(existing)}; {how} to replace them"
            )
        self.had_results = bool(existing)
        try:
            missing = []
            for folder in (path, *path.parents):
                if folder.exists():
                    break
                missing.append(folder)
            for folder in reversed(missing):
                folder.mkdir()
                self.created.append(folder)
            _remove_abandoned_staging(path)
            self.staging = Path(_make_staging(path))
        except OSError as exc:
            self._remove_created()
            raise AisimError(
                f"{flag}: cannot write into {path}: {os_error_text(exc)}; give a "
                "folder aisim can create files in"
            ) from None

    def __enter__(self) -> ResultFolder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed:
            self.discard()

    def staged(self, name: str) -> Path:
        return self.staging / name

    def write_error(self, name: str | None, exc: OSError):
        """The one-line error for a failed write of `name` (the caller raises it)."""
        from aisim.errors import AisimError

        target = self.path / name if name else f"the results into {self.path}"
        kept = "the earlier results are kept" if self.had_results else "nothing was written"
        why = os_error_text(exc)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            why += " (the results need more space than the filesystem gives)"
        return AisimError(f"{self.flag}: cannot write {target}: {why}; {kept}")

    def commit(self, names: list[str]) -> None:
        """Move the staged files into the folder (prediction.json last) and remove the earlier
        run's files this run does not replace; no signal stops it halfway."""
        with _signals_held():
            for name in OUTPUT_NAMES:
                if name not in names:
                    (self.path / name).unlink(missing_ok=True)
            for name in sorted(names, key=lambda n: n == "prediction.json"):
                os.replace(self.staging / name, self.path / name)
            self.committed = True
            shutil.rmtree(self.staging, ignore_errors=True)

    def discard(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
            self.staging = None
        self._remove_created()

    def _remove_created(self) -> None:
        for folder in reversed(self.created):
            with contextlib.suppress(OSError):
                folder.rmdir()  # only while empty: never someone else's files
        self.created = []


def _make_staging(path: Path) -> str:
    import tempfile

    return tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=path)


def _remove_abandoned_staging(path: Path) -> None:
    """Staging folders (and the temporary files of older aisim versions) left by processes that
    no longer run: a killed run must not leave them piling up."""
    for entry in path.iterdir():
        name = entry.name
        if name.startswith(STAGING_PREFIX):
            pid = name[len(STAGING_PREFIX) :].split("-", 1)[0]
        elif (
            name.startswith(".") and ".tmp" in name and name[1 : name.index(".tmp")] in OUTPUT_NAMES
        ):
            pid = name.rsplit(".tmp", 1)[1]
        else:
            continue
        if pid.isdigit() and not _alive(int(pid)):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _signals_held():
    """Ctrl-C / SIGTERM arriving inside the block take effect when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    held = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in held}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if pending:
            os.kill(os.getpid(), pending[0])


def write_outputs(
    folder: ResultFolder,
    prediction: dict,
    records,
    provenance: dict,
    passes=None,
    summary: bool = True,
    extra: dict[str, bytes] | None = None,
) -> str:
    """Write a run's result files into `folder` and commit them; returns prediction_sha256.

    `records` (aisim.output.records.RequestRecords, or any iterable of record batches' owner
    with `batches()`) adds requests.jsonl, requests.parquet and prediction.json's per_request;
    `summary` adds summary.parquet (it costs a pyarrow import, ~0.15 s, so a plain CLI
    prediction only writes it when asked or when other parquet files are written anyway).
    """
    names: list[str] = []

    def write_bytes(name: str, data: bytes) -> None:
        with open(folder.staged(name), "wb") as f:
            f.write(data)
        names.append(name)

    try:
        if records is None:
            digest = prediction_sha256(prediction)
            write_bytes(
                "prediction.json",
                (json.dumps(prediction, indent=2, sort_keys=True) + "\n").encode(),
            )
        else:
            digest = _write_with_records(folder, prediction, records, provenance)
            names += ["requests.jsonl", "requests.parquet", "prediction.json"]
        if summary:
            from aisim.output.summary import summary_table

            write_bytes("summary.parquet", table_bytes(summary_table(prediction, provenance)))
        if passes is not None:
            from aisim.output.passes import passes_table

            write_bytes("passes.parquet", table_bytes(passes_table(passes, provenance)))
        for name, data in (extra or {}).items():  # e.g. vllm_bench.json
            write_bytes(name, data)
        write_bytes("prediction.sha256", (digest + "\n").encode())
    except OSError as exc:
        name = Path(exc.filename).name if getattr(exc, "filename", None) else None
        raise folder.write_error(name, exc) from None
    folder.commit(names)
    return digest


def _split_on_placeholder(text: str) -> tuple[str, str]:
    head, sep, tail = text.partition(json.dumps(_PLACEHOLDER))
    assert sep, "per_request placeholder not rendered"
    return head, tail


def _write_with_records(folder: ResultFolder, prediction: dict, records, provenance: dict) -> str:
    """requests.jsonl, requests.parquet and prediction.json in one pass over the records; the
    hash is fed the compact rendering of each record (the jsonl line) as it goes."""
    pretty = dict(prediction, per_request=_PLACEHOLDER)
    head, tail = _split_on_placeholder(json.dumps(pretty, indent=2, sort_keys=True) + "\n")
    det = {k: v for k, v in pretty.items() if k not in UNHASHED}
    c_head, c_tail = _split_on_placeholder(
        json.dumps(det, sort_keys=True, separators=(",", ":"), allow_nan=False)
    )
    digest = hashlib.sha256(c_head.encode() + b"[")
    parquet = RequestsParquet(folder.staged("requests.parquet"), provenance, records.parts)
    try:
        with (
            open(folder.staged("prediction.json"), "w", encoding="utf-8") as pj,
            open(folder.staged("requests.jsonl"), "w", encoding="utf-8") as jl,
        ):
            pj.write(head)
            first = True
            for index, batch in records.indexed_batches():
                compact = [
                    json.dumps(r, sort_keys=True, separators=(",", ":"), allow_nan=False)
                    for r in batch
                ]
                jl.write("".join(c + "\n" for c in compact))
                digest.update(("" if first else ",").encode() + ",".join(compact).encode())
                # prediction.json renders the list at indent level 2: each record's own lines
                # shifted by four spaces (JSON strings hold no raw newline)
                items = ",\n    ".join(
                    json.dumps(r, indent=2, sort_keys=True).replace("\n", "\n    ") for r in batch
                )
                pj.write(("[\n    " if first else ",\n    ") + items)
                parquet.add(batch, index)
                first = False
            pj.write("[]" if first else "\n  ]")
            pj.write(tail)
        parquet.close()
    finally:
        parquet.abort()
    digest.update(b"]" + c_tail.encode())
    return digest.hexdigest()


class RequestsParquet:
    """requests.parquet written a record batch at a time, in row groups of ROW_GROUP rows."""

    def __init__(self, path, provenance: dict, parts=None) -> None:
        self.path = path
        self.provenance = provenance
        self.parts = parts  # the records' latency attribution (RequestRecords.parts)
        self.pending: list = []
        self.rows = 0
        self.writer = None

    def add(self, batch: list[dict], index) -> None:
        self.pending.append(requests_table(batch, index, self.provenance, self.parts))
        self.rows += len(batch)
        if self.rows >= ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.writer is None:
            schema = (
                self.pending[0].schema
                if self.pending
                else empty_requests_table(self.provenance).schema
            )
            self.writer = pq.ParquetWriter(self.path, schema)
        if self.pending:
            # one chunk per column, as a table built whole has: the writer's pages and
            # dictionaries follow the chunks, so chunked input would change the bytes
            self.writer.write_table(pa.concat_tables(self.pending).combine_chunks())
        self.pending, self.rows = [], 0

    def close(self) -> None:
        if self.writer is None and not self.pending:
            self.pending = [empty_requests_table(self.provenance)]
        self._flush()
        self.writer.close()
        self.writer = None

    def abort(self) -> None:
        if self.writer is not None:
            with contextlib.suppress(Exception):
                self.writer.close()
            self.writer = None


def write_file_atomically(path: Path, data: bytes, flag: str) -> None:
    """One file replaced whole or not at all (a temporary sibling, renamed over it)."""
    from aisim.errors import AisimError

    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise AisimError(f"{flag}: cannot write {path}: {os_error_text(exc)}") from None
        raise


def table_bytes(table) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def requests_table(records: list[dict], index, provenance: dict, parts=None):
    """Per-request records -> requests table (declared schema, units, run metadata); `index`
    each record's request index (creation order), `parts` the run's latency attribution by
    request index (null columns without it)."""
    import numpy as np
    import pyarrow as pa

    from aisim.output import attribution
    from aisim.output.schema import REQUESTS_SCHEMA, table_metadata

    derived = {name for name, _ in attribution.PARTS}
    cols: dict = {f.name: [] for f in REQUESTS_SCHEMA if f.name not in derived}
    for r, i in zip(records, np.asarray(index, dtype=np.int64).tolist(), strict=True):
        route = r["routing_history"][0]
        row = dict(r)
        row["request_index"] = i
        row.setdefault("tokenized_ms", None)  # only runs with a tokenizer record it
        row["scheduler_id"] = route["scheduler_id"]
        row["worker_idx"] = route["logical_worker_id"]
        row["dp_rank"] = route["dp_rank"]
        row["tpot_ms"] = r["itl_ms"]
        for name in cols:
            cols[name].append(row[name])
    index = np.asarray(cols["request_index"], dtype=np.int64)
    for name, _ in attribution.PARTS:  # whole columns at once; NaN (no first token) is null
        values = parts[name][index] if parts is not None else np.full(len(index), np.nan)
        cols[name] = pa.array(values, type=pa.float64(), mask=np.isnan(values))
    table = pa.Table.from_pydict(cols, schema=REQUESTS_SCHEMA)
    return table.replace_schema_metadata(table_metadata("requests", provenance))


def empty_requests_table(provenance: dict):
    return requests_table([], [], provenance)


def requests_tables(records, provenance: dict):
    """The requests table of every record, built a batch at a time (one pyarrow Table)."""
    import pyarrow as pa

    parts = records.parts
    tables = [
        requests_table(batch, index, provenance, parts)
        for index, batch in records.indexed_batches()
    ]
    return pa.concat_tables(tables) if tables else empty_requests_table(provenance)


def requests_parquet_bytes(records, provenance: dict) -> bytes:
    """requests.parquet of the records as bytes (a sweep point's table, sent to the leader)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    parquet = RequestsParquet(sink, provenance, records.parts)
    for index, batch in records.indexed_batches():
        parquet.add(batch, index)
    parquet.close()
    return sink.getvalue().to_pybytes()

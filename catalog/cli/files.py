"""The files commands read and write: Parquet, CSV/TSV and Arrow files as
input rows (create, append), and a scan streamed into a Parquet, CSV or
JSON file."""

from __future__ import annotations

import json
import os

import pyarrow as pa

from .. import errors as E
from . import render


def read_files(paths: tuple[str, ...], schema: pa.Schema | None = None) -> pa.Table:
    """The files' rows; CSV/TSV text is read as ``schema``'s column types when
    given (a table's, on append: text has no types of its own), typed files
    (Parquet, Arrow) keep theirs."""
    import pyarrow.csv as pcsv
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    tables = []
    for p in paths:
        ext = os.path.splitext(p)[1].lower()
        kind = {
            ".parquet": "Parquet",
            ".pq": "Parquet",
            ".csv": "CSV",
            ".tsv": "TSV",
            ".arrow": "Arrow",
            ".feather": "Arrow",
            ".ipc": "Arrow",
        }.get(ext)
        if kind is None:
            raise E.InvalidArgumentError(
                f"{p}: unknown file type {ext or '(no suffix)'!r}; use .parquet, .csv, .tsv or .arrow/.feather files"
            )
        try:
            if kind == "Parquet":
                tables.append(pq.read_table(p))
            elif kind in ("CSV", "TSV"):
                types = {f.name: f.type for f in schema or [] if not pa.types.is_nested(f.type)}
                tables.append(
                    pcsv.read_csv(
                        p,
                        parse_options=pcsv.ParseOptions(delimiter="\t" if kind == "TSV" else ","),
                        convert_options=pcsv.ConvertOptions(column_types=types),
                    )
                )
            else:
                tables.append(feather.read_table(p))
        except (pa.ArrowException, OSError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise E.InvalidArgumentError(f"{p}: not a readable {kind} file ({first})") from None
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="default")
    except pa.ArrowException as exc:
        raise E.InvalidArgumentError(f"the input files do not share a schema: {exc}") from None


OUT_FORMATS = {
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}


class _JsonWriter:
    def __init__(self, f, lines: bool):
        self.f, self.lines, self.first = f, lines, True
        if not lines:
            f.write("[")

    def write_batch(self, batch: pa.RecordBatch) -> None:
        for row in batch.to_pylist():
            text = json.dumps(row, default=render.json_default, ensure_ascii=False)
            if self.lines:
                self.f.write(text + "\n")
            else:
                self.f.write(("\n" if self.first else ",\n") + text)
            self.first = False

    def close(self) -> None:
        if not self.lines:
            self.f.write("\n]\n" if not self.first else "]\n")


def write_out(reader: pa.RecordBatchReader, path: str, fmt: str) -> int:
    """Stream the batches to ``path`` (through a temporary file renamed at the
    end: a failed scan leaves no partial file)."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise E.InvalidArgumentError(f"--out {path}: the folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tessera-scan-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    rows = 0
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            with pq.ParquetWriter(tmp, reader.schema) as w:
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
        elif fmt == "csv":
            import pyarrow.csv as pcsv

            with pcsv.CSVWriter(tmp, reader.schema) as w:
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
        else:
            with open(tmp, "w", encoding="utf-8") as f:
                w = _JsonWriter(f, lines=fmt == "jsonl")
                for b in reader:
                    w.write_batch(b)
                    rows += b.num_rows
                w.close()
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return rows

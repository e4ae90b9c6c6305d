"""A pylance client run by another Python (``python lance_client.py JOB.json``):
the interoperability tests drive pylance 13 in its own virtual environment
through it (and pylance 14 too, to check the script itself).  It imports only
pylance and pyarrow, never Tessera.

The job is a JSON object ``{"uri": ..., "out": DIR, "ops": [...]}``; each op
is an object with an ``"op"`` name and its arguments, run in order on the
dataset at ``uri``.  The script prints one JSON line: ``{"lance": version,
"results": [...]}``, one result per op; an op that raises gives
``{"error": type name, "message": text}`` and the ops after it still run.
Tables are written to ``DIR/<name>.arrow`` (Arrow IPC streams) and named in
the result.

Ops:
  ``read``: ``versions`` (list, default the latest), optional ``columns``,
  ``filter``, ``with_row_id`` -> ``{"files": {version: name}}``; each file holds
  the rows of that version.
  ``info``: -> ``version``, ``versions``, ``rows``, ``data_storage_version``,
  ``indices`` (name, type, fields, fragment ids) and ``stable_row_ids``.
  ``nearest``: ``column``, ``q`` (list of floats), ``k``, optional ``filter``,
  ``columns``, ``use_index`` (default true), ``nprobes``, ``refine_factor`` -> a table.
  ``index_stats``: ``name`` -> ``num_indexed_rows`` and ``num_unindexed_rows``.
  ``take_rows``: ``ids``, optional ``columns`` -> a table.
  ``append``: ``rows`` (a column -> values object) -> the new version.
  ``delete``: ``where`` -> the new version.
  ``optimize``: compact_files then optimize_indices -> versions after each.
  ``create_index``: ``column``, ``index_type`` and keyword arguments -> version.
"""

from __future__ import annotations

import json
import os
import sys
import traceback


def _write(out: str, name: str, table) -> str:
    import pyarrow as pa

    path = os.path.join(out, f"{name}.arrow")
    # a stream, not a file: a file allows one dictionary per field, a table read from
    # several fragments may carry one per batch
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return path


def _indices(ds) -> list[dict]:
    out = []
    for ix in ds.describe_indices() if hasattr(ds, "describe_indices") else []:
        out.append({"name": ix.name, "type": str(getattr(ix, "index_type", "")), "fields": list(ix.field_names)})
    if not out:
        for ix in ds.list_indices():
            out.append({"name": ix["name"], "type": str(ix.get("type", "")), "fields": list(ix.get("fields", []))})
    return out


def run(job: dict) -> dict:
    import lance
    import pyarrow as pa

    uri, out = job["uri"], job.get("out") or "."
    results: list = []
    for n, op in enumerate(job["ops"]):
        kind = op["op"]
        try:
            if kind == "read":
                files = {}
                versions = op.get("versions") or [None]
                for v in versions:
                    ds = lance.dataset(uri, version=v)
                    table = ds.to_table(
                        columns=op.get("columns"), filter=op.get("filter"), with_row_id=op.get("with_row_id", False)
                    )
                    files[str(ds.version)] = _write(out, f"op{n}-v{ds.version}", table)
                results.append({"files": files})
            elif kind == "info":
                ds = lance.dataset(uri, version=op.get("version"))
                results.append(
                    {
                        "version": ds.version,
                        "versions": [v["version"] for v in ds.versions()],
                        "rows": ds.count_rows(),
                        "data_storage_version": ds.data_storage_version,
                        "indices": _indices(ds),
                        "stable_row_ids": bool(getattr(ds, "has_stable_row_ids", False)),
                    }
                )
            elif kind == "nearest":
                ds = lance.dataset(uri)
                nearest = {"column": op["column"], "q": op["q"], "k": op["k"], "use_index": op.get("use_index", True)}
                for opt in ("nprobes", "refine_factor"):
                    if op.get(opt):
                        nearest[opt] = op[opt]
                table = ds.to_table(columns=op.get("columns"), filter=op.get("filter"), nearest=nearest)
                results.append({"file": _write(out, f"op{n}-nearest", table)})
            elif kind == "index_stats":
                stats = lance.dataset(uri).stats.index_stats(op["name"])
                results.append(
                    {"num_indexed_rows": stats["num_indexed_rows"], "num_unindexed_rows": stats["num_unindexed_rows"]}
                )
            elif kind == "take_rows":
                ds = lance.dataset(uri)
                table = ds._take_rows(op["ids"], columns=op.get("columns"))
                results.append({"file": _write(out, f"op{n}-take", table)})
            elif kind == "append":
                ds = lance.dataset(uri)
                data = pa.Table.from_pydict(op["rows"]).cast(ds.schema.select(list(op["rows"])))
                ds = lance.write_dataset(data, uri, mode="append")
                results.append({"version": ds.version})
            elif kind == "delete":
                ds = lance.dataset(uri)
                ds.delete(op["where"])
                results.append({"version": lance.dataset(uri).version})
            elif kind == "optimize":
                ds = lance.dataset(uri)
                ds.optimize.compact_files()
                compacted = lance.dataset(uri).version
                ds = lance.dataset(uri)
                ds.optimize.optimize_indices()
                results.append({"compacted": compacted, "version": lance.dataset(uri).version})
            elif kind == "create_index":
                ds = lance.dataset(uri)
                kw = {k: v for k, v in op.items() if k not in ("op", "column", "index_type")}
                if op["index_type"].upper() in ("BTREE", "BITMAP", "ZONEMAP", "LABEL_LIST", "INVERTED"):
                    ds.create_scalar_index(op["column"], index_type=op["index_type"], **kw)
                else:
                    ds.create_index(op["column"], index_type=op["index_type"], **kw)
                results.append({"version": lance.dataset(uri).version})
            else:
                raise ValueError(f"unknown op {kind!r}")
        except Exception as exc:  # noqa: BLE001 - reported to the test, which decides
            results.append(
                {"error": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc(limit=3)}
            )
    return {"lance": lance.__version__, "results": results}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    print(json.dumps(run(job)))


if __name__ == "__main__":
    main()

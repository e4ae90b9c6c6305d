"""Remapping pylance's BTREE index when compaction moves rows.

A BTREE index (``IndexMetadata.index_details`` of type ``BTreeIndexDetails``)
is two Lance files under ``_indices/<uuid>/``:

* ``page_data.lance``: columns ``values`` (the indexed column's type,
  nullable) and ``ids`` (uint64, not null), every row of the index sorted by
  value; page ``n`` is rows ``[n * batch_size, (n + 1) * batch_size)``;
* ``page_lookup.lance``: one row per page, ``min`` and ``max`` (the page's
  first and last value, so NULL when the page starts or ends with NULLs),
  ``null_count`` and ``page_idx`` (uint32, not null), with schema metadata
  ``batch_size`` (rows per page, 4096) and ``range_partitioned``.

``ids`` hold row addresses (``fragment_id << 32 | offset``) on tables without
stable row ids, and also on tables with them when pylance 14 wrote the index
(``index_version`` 1); LanceDB 0.40's core writes ``index_version`` 0 with
stable row ids there.  When compaction moves rows, an index of addresses must
be remapped, as pylance does: every id of a rewritten fragment becomes the
row's new address, a deleted row's id is dropped, other ids are kept.  The
result is a new index (a new uuid) whose pages are cut again every
``batch_size`` rows with their lookup rows recomputed, so the reader's
``page * batch_size`` arithmetic holds however many rows were dropped.
"""

from __future__ import annotations

import io
import uuid as uuidlib
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import CorruptFileError
from ..file.datafile import FileReader, FileWriter
from ..protos import table_pb2
from .store import ObjectWriter

TYPE_URL = "BTreeIndexDetails"
PAGES = "page_data.lance"
LOOKUP = "page_lookup.lance"
DEFAULT_BATCH_SIZE = 4096


def is_btree(meta: table_pb2.IndexMetadata) -> bool:
    return meta.index_details.type_url.endswith(TYPE_URL)


def index_dir(meta: table_pb2.IndexMetadata) -> str:
    return f"_indices/{uuidlib.UUID(bytes=bytes(meta.uuid.uuid))}"


def remappable(meta: table_pb2.IndexMetadata) -> bool:
    """Whether :func:`remap` knows this index's layout: a BTREE of the two
    files above in the table's own ``_indices/`` (not a range-partitioned one,
    which has more files, nor one in another base path)."""
    if not is_btree(meta) or meta.HasField("base_id"):
        return False
    return not meta.files or {f.path for f in meta.files} == {PAGES, LOOKUP}


@dataclass(frozen=True)
class AddressMap:
    """Where compaction moved rows: the rewritten fragments' ids, and each
    live row's old address with its new one (sorted by old address); a row
    of a rewritten fragment that is not in ``old`` was deleted."""

    fragments: np.ndarray  # uint64, sorted
    old: np.ndarray  # uint64, sorted
    new: np.ndarray  # uint64

    @classmethod
    def build(cls, fragments, old_addresses, new_addresses) -> AddressMap:
        old = np.asarray(old_addresses, np.uint64)
        new = np.asarray(new_addresses, np.uint64)
        order = np.argsort(old, kind="stable")
        return cls(np.unique(np.asarray(list(fragments), np.uint64)), old[order], new[order])

    def apply(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(new_ids, keep)``: ids of rewritten fragments mapped (``keep``
        False where the row was deleted), other ids unchanged."""
        ids = np.asarray(ids, np.uint64)
        moved = np.isin(ids >> np.uint64(32), self.fragments)
        out = ids.copy()
        keep = np.ones(ids.size, bool)
        if moved.any() and self.old.size:
            q = ids[moved]
            pos = np.minimum(np.searchsorted(self.old, q), self.old.size - 1)
            hit = self.old[pos] == q
            out[np.flatnonzero(moved)[hit]] = self.new[pos[hit]]
            keep[np.flatnonzero(moved)[~hit]] = False
        elif moved.any():
            keep[moved] = False
        return out, keep


def _write(schema: pa.Schema, table: pa.Table, version: str) -> bytes:
    buf = io.BytesIO()
    with FileWriter(buf, schema, file_version=version) as w:
        w.write(table.cast(schema) if table.num_rows else schema.empty_table())
    return buf.getvalue()


def remap(
    store: ObjectWriter, meta: table_pb2.IndexMetadata, mapping: AddressMap
) -> tuple[table_pb2.IndexMetadata, list[str]]:
    """Write the remapped copy of the BTREE ``meta`` under a new uuid; returns
    its metadata (``meta`` with the new uuid and files; the fragment bitmap is
    the commit's to recompute) and the paths written."""
    src = index_dir(meta)
    pages = FileReader(store.read(f"{src}/{PAGES}"))
    lookup = FileReader(store.read(f"{src}/{LOOKUP}"))
    names = pages.schema.names
    if names != ["values", "ids"] or lookup.schema.names != ["min", "max", "null_count", "page_idx"]:
        raise CorruptFileError(src, f"unexpected BTREE layout: pages {names}, lookup {lookup.schema.names}")
    lookup_meta = {k.decode(): v.decode() for k, v in (lookup.schema.metadata or {}).items()}
    if lookup_meta.get("range_partitioned", "false") != "false":
        raise CorruptFileError(src, "a range-partitioned BTREE cannot be remapped here")
    batch = int(lookup_meta.get("batch_size", DEFAULT_BATCH_SIZE))
    data = pages.read()
    ids, keep = mapping.apply(data.column("ids").to_numpy())
    values = data.column("values").filter(pa.array(keep)) if not keep.all() else data.column("values")
    out = pa.table({"values": values, "ids": pa.array(ids[keep], pa.uint64())})
    col = out.column("values").combine_chunks()
    starts = np.arange(0, out.num_rows, batch, dtype=np.int64)
    ends = np.minimum(starts + batch, out.num_rows) - 1
    if starts.size:
        is_null = col.is_null().to_numpy(zero_copy_only=False).astype(np.int64)
        nulls = np.add.reduceat(is_null, starts)
    else:
        nulls = np.zeros(0, np.int64)
    stats = pa.table(
        {
            "min": col.take(pa.array(starts)),
            "max": col.take(pa.array(ends)),
            "null_count": pa.array(nulls, pa.uint32()),
            "page_idx": pa.array(np.arange(starts.size), pa.uint32()),
        }
    )
    lookup_schema = lookup.schema
    new_uuid = uuidlib.uuid4()
    dst = f"_indices/{new_uuid}"
    written = []
    files = []
    for name, blob in (
        (PAGES, _write(pages.schema, out, pages.version)),
        (LOOKUP, _write(lookup_schema, stats, lookup.version)),
    ):
        store.put(f"{dst}/{name}", blob)
        written.append(f"{dst}/{name}")
        files.append(table_pb2.IndexFile(path=name, size=len(blob)))
    new = table_pb2.IndexMetadata()
    new.CopyFrom(meta)
    new.uuid.uuid = new_uuid.bytes
    del new.files[:]
    new.files.extend(files)
    return new, written

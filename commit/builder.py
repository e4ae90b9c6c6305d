"""Build the next manifest from the previous one plus a transaction.

Fragment ids arrive as 0 in Append, Overwrite and Update transactions and are
assigned here, after ``max_fragment_id``.  With stable row ids, new fragments get
fresh row-id ranges from ``next_row_id``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tessera.format import manifest as mf
from tessera.format.protos import rowids_pb2, table_pb2, transaction_pb2

from .errors import CommitError, IndexReplacedError

#: whether commits also write the transaction to ``_transactions/{read_version}-{uuid}.txn``.
#: No: every manifest Tessera writes carries its transaction inline (Manifest field 23),
#: which is what Tessera's own rebase reads, and pylance 14 rebases its concurrent
#: commits over Tessera's from the inline copy too (a stale pylance delete over a
#: Tessera delete of the same fragment keeps both rows deleted:
#: tests/catalog/test_table_interop.py); the file cost a write and an fsync (a PUT
#: on S3) per commit and nothing read it.
TRANSACTION_FILES = False

WRITER_LIBRARY = "tessera"
WRITER_VERSION = "0.1.0"


def _max_fragment_id(m: table_pb2.Manifest | None) -> int:
    if m is None:
        return -1
    ids = [f.id for f in m.fragments]
    declared = m.max_fragment_id if m.HasField("max_fragment_id") else -1
    return max([declared] + ids)


def row_id_range(start: int, end: int) -> bytes:
    seq = rowids_pb2.RowIdSequence()
    seg = seq.segments.add()
    seg.range.start = start
    seg.range.end = end
    return seq.SerializeToString()


class _Assigner:
    def __init__(self, prev: table_pb2.Manifest | None, stable_row_ids: bool, version: int) -> None:
        self.next_id = _max_fragment_id(prev) + 1
        self.stable = stable_row_ids
        self.version = version
        self.next_row_id = prev.next_row_id if prev is not None else 0

    def new(self, frags: Iterable[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
        out = []
        for f in frags:
            g = table_pb2.DataFragment()
            g.CopyFrom(f)
            g.id = self.next_id
            self.next_id += 1
            if self.stable and not g.HasField("inline_row_ids") and not g.HasField("external_row_ids"):
                g.inline_row_ids = row_id_range(self.next_row_id, self.next_row_id + g.physical_rows)
                self.next_row_id += g.physical_rows
                # rows created (and last updated) by this version, as pylance records them
                from tessera.format.rowids import constant_versions

                seq = constant_versions(g.physical_rows, self.version)
                if g.WhichOneof("created_at_version_sequence") is None:
                    g.inline_created_at_versions = seq
                if g.WhichOneof("last_updated_at_version_sequence") is None:
                    g.inline_last_updated_at_versions = seq
            out.append(g)
        return out


def build_manifest(
    prev: table_pb2.Manifest | None,
    txn: transaction_pb2.Transaction,
    version: int,
    *,
    data_format: str | None = None,
    restore_from: table_pb2.Manifest | None = None,
    stable_row_ids: bool | None = None,
    identity: dict[str, str] | None = None,
) -> table_pb2.Manifest:
    """The manifest of ``version``: ``prev`` (the latest) with ``txn`` applied.

    ``identity`` (the commit handler's config: coordinator, store id,
    incarnation) is written into the config of every manifest, so a table
    from before an identity existed adopts one on its next write."""
    if prev is not None:
        mf.check_flags(prev, writing=True)
    op = txn.WhichOneof("operation")
    stable = bool(prev.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS) if prev is not None else bool(stable_row_ids)
    m = table_pb2.Manifest()
    if prev is not None:
        m.CopyFrom(prev)
    assign = _Assigner(prev, stable, version)
    if op == "overwrite":
        o = txn.overwrite
        del m.fragments[:]
        m.ClearField("fields")
        m.fields.extend(o.schema)
        m.ClearField("schema_metadata")
        for k, v in o.schema_metadata.items():
            m.schema_metadata[k] = v
        for k, v in o.config_upsert_values.items():
            m.config[k] = v
        m.fragments.extend(assign.new(o.fragments))
        m.ClearField("index_section")
    elif op == "append":
        m.fragments.extend(assign.new(txn.append.fragments))
    elif op == "delete":
        _replace(m, txn.delete.updated_fragments, txn.delete.deleted_fragment_ids)
    elif op == "update":
        u = txn.update
        _replace(m, u.updated_fragments, u.removed_fragment_ids)
        m.fragments.extend(assign.new(u.new_fragments))
    elif op == "merge":
        del m.fragments[:]
        m.fragments.extend(txn.merge.fragments)
        m.ClearField("fields")
        m.fields.extend(txn.merge.schema)
        for k, v in txn.merge.schema_metadata.items():
            m.schema_metadata[k] = v
    elif op == "project":
        m.ClearField("fields")
        m.fields.extend(txn.project.schema)
    elif op == "restore":
        if restore_from is None:
            raise CommitError(f"restore to version {txn.restore.version} needs that version's manifest")
        keep_next_row = m.next_row_id
        m.CopyFrom(restore_from)
        m.next_row_id = max(keep_next_row, restore_from.next_row_id)
        m.max_fragment_id = max(_max_fragment_id(prev), _max_fragment_id(restore_from), 0)
    elif op == "update_config":
        uc = txn.update_config
        for k, v in uc.upsert_values.items():
            m.config[k] = v
        for k in uc.delete_keys:
            m.config.pop(k, None)
        _apply_update_map(m.config, uc.config_updates)
        _apply_update_map(m.table_metadata, uc.table_metadata_updates)
    elif op == "rewrite":
        rw = txn.rewrite
        groups = list(rw.groups) or [
            transaction_pb2.Transaction.RewriteGroup(old_fragments=rw.old_fragments, new_fragments=rw.new_fragments)
        ]
        for g in groups:
            old = {f.id for f in g.old_fragments}
            kept = [f for f in m.fragments if f.id not in old]
            # new fragments take the position of the first old one
            pos = next((i for i, f in enumerate(m.fragments) if f.id in old), len(kept))
            del m.fragments[:]
            m.fragments.extend(kept[:pos] + list(g.new_fragments) + kept[pos:])
    elif op == "reserve_fragments":
        assign.next_id += txn.reserve_fragments.num_fragments
    elif op == "create_index":
        pass  # the index section changes (build_index_section), not the fragments
    else:
        raise CommitError(f"Tessera cannot commit a {op!r} transaction")
    m.version = version
    now = time.time()
    m.timestamp.seconds = int(now)
    m.timestamp.nanos = int((now % 1) * 1e9)
    m.writer_version.library = WRITER_LIBRARY
    m.writer_version.version = WRITER_VERSION
    if data_format is not None and op in ("overwrite",) or not m.HasField("data_format"):
        if data_format is None:
            raise CommitError("the first commit must name the data file format")
        m.data_format.file_format = "lance"
        m.data_format.version = data_format
    ids = [f.id for f in m.fragments]
    if len(set(ids)) != len(ids):
        raise CommitError(f"duplicate fragment ids {sorted(i for i in set(ids) if ids.count(i) > 1)}")
    # the assigner started above every id of prev (declared or present) and only grew
    top = max([assign.next_id - 1] + ids)
    if top >= 0:
        m.max_fragment_id = top
    else:
        m.ClearField("max_fragment_id")
    if stable:
        m.next_row_id = assign.next_row_id
    # the transaction travels inline in the manifest only (TRANSACTION_FILES)
    m.transaction_file = mf.transaction_file_name(txn.read_version, txn.uuid) if TRANSACTION_FILES else ""
    for k, v in (identity or {}).items():
        m.config[k] = v
    mf.compute_flags(m, stable)
    return m


def _replace(m: table_pb2.Manifest, updated: Iterable[table_pb2.DataFragment], removed: Iterable[int]) -> None:
    by_id = {f.id: f for f in updated}
    gone = set(removed)
    frags = []
    for f in m.fragments:
        if f.id in gone:
            continue
        frags.append(by_id.pop(f.id, f))
    if by_id:
        raise CommitError(f"transaction updates fragments {sorted(by_id)} that are not in the table")
    del m.fragments[:]
    m.fragments.extend(frags)


def _apply_update_map(target, update) -> None:
    if update is None or not update.ListFields():
        return
    if update.replace:
        target.clear()
    for e in update.update_entries:
        if e.HasField("value"):
            target[e.key] = e.value
        else:
            target.pop(e.key, None)


def build_index_section(
    txn: transaction_pb2.Transaction,
    cur_index: bytes | None,
    restore_from: mf.ManifestFile | None = None,
    *,
    version: int = 0,
) -> bytes | None:
    """The index section of the manifest ``txn`` makes on a version whose section is ``cur_index``.

    Overwrite drops every index, a restore takes the restored version's (``restore_from``), a
    CreateIndex removes its ``removed_indices`` (by uuid) and adds its
    ``new_indices``; everything else carries the section forward unchanged.
    A CreateIndex whose removed index is no longer there (a concurrent writer
    replaced it) raises :class:`IndexReplacedError`: the index must be rebuilt
    on the latest version."""
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        return None
    if op == "restore" and restore_from is not None:
        return restore_from.index_section
    if op != "create_index":
        return cur_index
    section = table_pb2.IndexSection()
    if cur_index:
        section.ParseFromString(cur_index)
    present = {bytes(m.uuid.uuid) for m in section.indices}
    gone = {bytes(m.uuid.uuid) for m in txn.create_index.removed_indices}
    if gone - present:
        raise IndexReplacedError(
            version, "an index this transaction replaces was replaced or dropped by a concurrent commit"
        )
    names = {m.name for m in section.indices if bytes(m.uuid.uuid) not in gone}
    for m in txn.create_index.new_indices:
        if m.name in names:
            raise IndexReplacedError(version, f"a concurrent commit created an index named {m.name!r}")
    kept = [m for m in section.indices if bytes(m.uuid.uuid) not in gone]
    out = table_pb2.IndexSection(indices=[*kept, *txn.create_index.new_indices])
    return out.SerializeToString() if out.indices else None

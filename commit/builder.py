"""Build the next manifest from the previous one plus a transaction.

:func:`build_version` is the one entry: the manifest file a transaction
makes on its base, as bytes.  Fragment ids arrive as 0 in Append, Overwrite and Update transactions and are
assigned here, after ``max_fragment_id``.  With stable row ids, new fragments get
fresh row-id ranges from ``next_row_id``, except the rows an Update moved, which
keep their ids (see :meth:`_Assigner.updated`); the row versions a fragment
records are set here, where the committing version is known.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tessera.format.protos import rowids_pb2, table_pb2, transaction_pb2
from tessera.format.table import manifest as mf

from . import app_txn
from .errors import CommitError, IndexReplacedError

#: whether commits also write the transaction to ``_transactions/{read_version}-{uuid}.txn``
#: (named by the manifest's ``transaction_file``), besides the inline copy (field 23).
#: Yes, as pylance 14 does: Tessera and pylance 14 read the inline copy, but Lance 13
#: cores (LanceDB 0.40) read only the file, and a LanceDB handle cannot rebase over a
#: version without one.  Written unsynced before the manifest (commit/txn_files.py).
TRANSACTION_FILES = True

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

    def _numbered(self, f: table_pb2.DataFragment) -> table_pb2.DataFragment:
        """A copy of ``f`` with the next fragment id."""
        g = table_pb2.DataFragment()
        g.CopyFrom(f)
        g.id = self.next_id
        self.next_id += 1
        return g

    def new(self, frags: Iterable[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
        out = []
        for f in frags:
            g = self._numbered(f)
            if self.stable and not g.HasField("inline_row_ids") and not g.HasField("external_row_ids"):
                g.inline_row_ids = row_id_range(self.next_row_id, self.next_row_id + g.physical_rows)
                self.next_row_id += g.physical_rows
                # rows created (and last updated) by this version, as pylance records them
                from tessera.format.table.rowids import constant_versions

                seq = constant_versions(g.physical_rows, self.version)
                if g.WhichOneof("created_at_version_sequence") is None:
                    g.inline_created_at_versions = seq
                if g.WhichOneof("last_updated_at_version_sequence") is None:
                    g.inline_last_updated_at_versions = seq
            out.append(g)
        return out

    def updated(self, frags: Iterable[table_pb2.DataFragment]) -> list[table_pb2.DataFragment]:
        """Ids for an Update's new fragments.  With stable row ids the rows it
        moved keep their row ids and created-at versions (the fragments carry
        them), the rows it inserted get fresh ids from ``next_row_id``, and
        every row was last updated by this version, as pylance 14 records it."""
        if not self.stable:
            return self.new(frags)
        from tessera.format.table.lineage import carried_lineage

        out = []
        for f in frags:
            g = self._numbered(f)
            if g.HasField("external_row_ids"):
                raise CommitError(f"an update's new fragment of {g.physical_rows} rows names external row ids")
            row_ids, created, updated, fresh = carried_lineage(g, self.version, self.next_row_id)
            if row_ids is not None:
                g.inline_row_ids = row_ids
            self.next_row_id += fresh
            g.inline_created_at_versions = created
            g.inline_last_updated_at_versions = updated
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
        m.fragments.extend(assign.updated(u.new_fragments))
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
        # as pylance: a data file none of whose fields is left is no longer part of its fragment
        left = {f.id for f in txn.project.schema}
        for frag in m.fragments:
            if any(not left.intersection(df.fields) for df in frag.files):
                kept_files = [df for df in frag.files if left.intersection(df.fields)]
                del frag.files[:]
                frag.files.extend(kept_files)
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
    # the transaction travels inline in the manifest and in the file this names (TRANSACTION_FILES)
    m.transaction_file = mf.transaction_file_name(txn.read_version, txn.uuid) if TRANSACTION_FILES else ""
    for k, v in (identity or {}).items():
        m.config[k] = v
    app_txn.record(m, txn)  # an idempotent write's record travels with its rows
    mf.compute_flags(m, stable)
    return m


def build_version(
    base: mf.ManifestFile | None,
    txn: transaction_pb2.Transaction,
    identity: dict[str, str],
    *,
    data_format: str | None = None,
    restore_from: mf.ManifestFile | None = None,
    stable_row_ids: bool | None = None,
) -> tuple[mf.ManifestFile, bytes]:
    """The manifest file ``txn`` makes as the version after ``base`` (version 1
    on None), and its bytes: :func:`build_manifest` and
    :func:`build_index_section` (``identity``: the commit handler's config)."""
    read = base.version if base is not None else 0
    manifest = build_manifest(
        base.manifest if base is not None else None,
        txn,
        read + 1,
        data_format=data_format,
        restore_from=restore_from.manifest if restore_from is not None else None,
        stable_row_ids=stable_row_ids,
        identity=identity,
    )
    index = build_index_section(
        txn, base.index_section if base is not None else None, restore_from, version=read, manifest=manifest
    )
    data = mf.write_manifest(manifest, txn, index)
    return mf.ManifestFile(manifest, txn, index, base.naming if base is not None else None), data


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


#: pylance's system indices: kept whatever their fields are (the fragment-reuse one also whatever it covers)
FRAG_REUSE_INDEX = "__lance_frag_reuse"
SYSTEM_INDICES = (FRAG_REUSE_INDEX, "__lance_mem_wal")


def _covers_live(m: table_pb2.IndexMetadata, fragment_ids: set[int]) -> bool:
    if not m.fragment_bitmap:
        return False  # no bitmap: what it covers is unknown, pylance counts it as empty
    from pyroaring import BitMap

    return not BitMap.deserialize(bytes(m.fragment_bitmap)).isdisjoint(BitMap(fragment_ids))


def retain_relevant_indices(
    indices: Iterable[table_pb2.IndexMetadata], field_ids: set[int], fragment_ids: set[int] | None
) -> list[table_pb2.IndexMetadata]:
    """The indices a schema change (Project: drop, rename; Merge: add columns) keeps, as pylance 14 keeps them.

    * An index goes when any of its fields (at any depth: ``field_ids`` holds
      every field id of the new schema, nested ones too) is no longer in the
      schema; pylance's system indices stay.
    * Among several entries of one name (an index and its deltas), those that
      still cover a live fragment (``fragment_ids``) are kept; when none does,
      only the one built on the oldest version (``dataset_version``; the first
      listed on a tie) is kept.  A name with one entry keeps it, empty or not.
      With ``fragment_ids`` None this second rule is skipped.

    The order of the section is kept."""
    alive = [m for m in indices if m.name in SYSTEM_INDICES or all(f in field_ids for f in m.fields)]
    if fragment_ids is None:
        return alive
    by_name: dict[str, list[table_pb2.IndexMetadata]] = {}
    for m in alive:
        if m.name != FRAG_REUSE_INDEX:
            by_name.setdefault(m.name, []).append(m)
    keep: set[bytes] = set()
    for same in by_name.values():
        live = [m for m in same if len(same) == 1 or _covers_live(m, fragment_ids)]
        if not live:
            live = [min(same, key=lambda m: m.dataset_version)]  # min: the first of equals
        keep.update(bytes(m.uuid.uuid) for m in live)
    return [m for m in alive if m.name == FRAG_REUSE_INDEX or bytes(m.uuid.uuid) in keep]


def _schema_change(
    txn: transaction_pb2.Transaction, manifest: table_pb2.Manifest | None
) -> tuple[set[int], set[int] | None]:
    """(field ids, fragment ids) of the version a Project or Merge makes."""
    if manifest is not None:
        return {f.id for f in manifest.fields}, {f.id for f in manifest.fragments}
    if txn.WhichOneof("operation") == "merge":
        return {f.id for f in txn.merge.schema}, {f.id for f in txn.merge.fragments}
    return {f.id for f in txn.project.schema}, None


def build_index_section(
    txn: transaction_pb2.Transaction,
    cur_index: bytes | None,
    restore_from: mf.ManifestFile | None = None,
    *,
    version: int = 0,
    manifest: table_pb2.Manifest | None = None,
) -> bytes | None:
    """The index section of the manifest ``txn`` makes on a version whose section is ``cur_index``.

    Overwrite drops every index, a restore takes the restored version's (``restore_from``), a
    CreateIndex removes its ``removed_indices`` (by uuid) and adds its
    ``new_indices``; a Rewrite (compaction) moves each index's coverage to the
    new fragments or remaps it as :func:`format.table.indices.rewrite_section`
    says; a schema change (Project: drop or rename columns; Merge:
    add columns) keeps what :func:`retain_relevant_indices` keeps, so no index
    names a field the schema no longer has; everything else carries the
    section forward unchanged.  ``manifest`` is the manifest being built
    (:func:`build_manifest`): its schema and fragments.
    A CreateIndex whose removed index is no longer there (a concurrent writer
    replaced it), or whose new index covers a field the new schema lacks (a
    concurrent commit dropped the column), raises :class:`IndexReplacedError`:
    the index must be rebuilt on the latest version."""
    op = txn.WhichOneof("operation")
    if op == "overwrite":
        return None
    if op == "restore" and restore_from is not None:
        return restore_from.index_section
    if op in ("project", "merge"):
        if not cur_index:
            return cur_index
        field_ids, fragment_ids = _schema_change(txn, manifest)
        indices = table_pb2.IndexSection.FromString(cur_index).indices
        kept = retain_relevant_indices(indices, field_ids, fragment_ids)
        if len(kept) == len(indices):
            return cur_index
        return table_pb2.IndexSection(indices=kept).SerializeToString() if kept else None
    if op == "rewrite":
        # compaction: indices follow the moved rows (format.table.indices)
        from tessera.format.table.indices import rewrite_section

        stable = manifest is not None and bool(manifest.reader_feature_flags & mf.FLAG_STABLE_ROW_IDS)
        return rewrite_section(txn, cur_index, stable)
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
    schema_ids = {f.id for f in manifest.fields} if manifest is not None else None
    for m in txn.create_index.new_indices:
        if m.name in names:
            raise IndexReplacedError(version, f"a concurrent commit created an index named {m.name!r}")
        if schema_ids is not None and m.name not in SYSTEM_INDICES and not set(m.fields) <= schema_ids:
            raise IndexReplacedError(version, f"a concurrent commit dropped a column index {m.name!r} covers")
    kept = [m for m in section.indices if bytes(m.uuid.uuid) not in gone]
    out = table_pb2.IndexSection(indices=[*kept, *txn.create_index.new_indices])
    return out.SerializeToString() if out.indices else None


#: the most rows a fragment can hold (row offsets are 32-bit in row addresses)
MAX_FRAGMENT_ROWS = 2**32


def fragment_live_rows(f: table_pb2.DataFragment) -> int:
    """Rows of ``f`` not deleted; CorruptFileError when the manifest's counts
    cannot be true (more deleted than physical rows, or more rows than a
    fragment can address)."""
    deleted = f.deletion_file.num_deleted_rows if f.HasField("deletion_file") else 0
    if f.physical_rows > MAX_FRAGMENT_ROWS or deleted > f.physical_rows:
        from tessera.format.errors import CorruptFileError

        raise CorruptFileError(
            None, f"fragment {f.id} has physical_rows={f.physical_rows} and {deleted} deleted rows in the manifest"
        )
    return f.physical_rows - deleted

"""What a compaction (a ``Rewrite``) does to the indices of a table, as pylance 14 does it.

Compaction moves rows into new fragments.  An index that names rows by
*stable row id* stays right (the ids move with the rows), so its fragment
bitmap is recomputed: each rewrite group's old fragments are replaced by its
new ones when the index covered all of them.  An index that names rows by
*row address* (``fragment_id << 32 | offset``) is stale for every moved row:
it is either remapped (a new index under a new uuid, named in the Rewrite's
``rewritten_indices``) or no longer covers the rewritten fragments.

Which indices hold which, observed on pylance 14.0.2 and LanceDB 0.40 (Lance
13 core); see ``docs/reference/stable-row-ids.md``:

* without stable row ids every index holds addresses; pylance remaps every
  kind but ZONEMAP and BLOOMFILTER, whose bitmaps it leaves as they were;
* with stable row ids the vector (IVF_*), FTS (INVERTED), BITMAP,
  LABEL_LIST, NGRAM and ``index_version`` 0 BTREE indices hold row ids
  (bitmap recomputed, same uuid); pylance 14's own BTREE (``index_version``
  1) holds addresses and is remapped; ZONEMAP and BLOOMFILTER zones are
  addresses and lose the rewritten fragments.

An index kind or version not in :data:`ROW_ID_KINDS` is treated as holding
addresses: losing coverage only makes a reader scan those fragments, while
keeping coverage of moved addresses would give wrong answers.

One departure from pylance: a ranked index (vector, FTS) that still holds the
ids of rows a group's compaction drops (rows deleted after the index was
built) does not follow that group.  Before compaction those rows are masked
by the old fragments' deletion files; after it nothing would mask them, and
pylance's and LanceDB's top-k queries come back short (pylance 14 moves the
coverage anyway).  Compaction checks the index's row ids and names such
(index, group) pairs in the Rewrite's ``transaction_properties``
(:data:`UNFOLLOWED`), which the commit reads.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from pyroaring import BitMap

from ..errors import FormatError
from ..file.datafile import FileReader
from ..protos import table_pb2, transaction_pb2
from .store import RangeSource

#: index kinds (the ``index_details`` type name) that hold stable row ids on
#: a table with them, up to this ``index_version``
ROW_ID_KINDS = {
    "VectorIndexDetails": 1,
    "InvertedIndexDetails": 2,
    "BitmapIndexDetails": 0,
    "LabelListIndexDetails": 1,
    "NGramIndexDetails": 0,
    "BTreeIndexDetails": 0,
}
#: kinds whose queries rank rows and keep the best k (nearest vectors, full
#: text by score): an id of a row gone from the table takes a place in the top
#: k and is dropped only afterwards, so the answer comes back short
RANKED_KINDS = ("VectorIndexDetails", "InvertedIndexDetails")
#: pylance's system indices, whose coverage is not about rows
SYSTEM_INDICES = ("__lance_frag_reuse", "__lance_mem_wal")
#: Rewrite ``transaction_properties`` key: the (index, group) pairs whose
#: coverage does not follow the group (``uuidhex:group;...``), see :func:`unfollowed`
UNFOLLOWED = "tessera.rewrite.unfollowed"


@dataclass(frozen=True)
class Group:
    """One rewrite group: old fragment ids and new fragment ids."""

    old: Sequence[int]
    new: Sequence[int]


def kind(meta: table_pb2.IndexMetadata) -> str:
    """The index's kind: the type name of its ``index_details`` (``BTreeIndexDetails``)."""
    return meta.index_details.type_url.rsplit("/", 1)[-1].rsplit(".", 1)[-1]


def holds_row_ids(meta: table_pb2.IndexMetadata) -> bool:
    """Whether, on a table with stable row ids, this index names rows by row id."""
    top = ROW_ID_KINDS.get(kind(meta))
    version = meta.index_version if meta.HasField("index_version") else 0
    return top is not None and version <= top


def fragments(meta: table_pb2.IndexMetadata) -> BitMap | None:
    """The fragment ids the index covers (None when it records none)."""
    return BitMap.deserialize(bytes(meta.fragment_bitmap)) if meta.fragment_bitmap else None


def held_row_ids(store: RangeSource, meta: table_pb2.IndexMetadata) -> np.ndarray | None:
    """The row ids a ranked index holds (the ``_rowid`` column of a vector
    index's ``auxiliary.idx``, of an FTS index's ``part_*_docs.lance``); None
    when its files are not laid out so (or cannot be read)."""
    top = f"_indices/{uuidlib.UUID(bytes=bytes(meta.uuid.uuid))}"
    names = [f.path for f in meta.files]
    k = kind(meta)
    if k == "VectorIndexDetails":
        files = ["auxiliary.idx"] if not names or "auxiliary.idx" in names else []
    elif k == "InvertedIndexDetails":
        files = [n for n in names if n.endswith("_docs.lance")]
    else:
        return None
    if not files or meta.HasField("base_id"):
        return None
    parts = []
    try:
        for name in files:
            with FileReader(store.open_reader(f"{top}/{name}")) as r:
                if "_rowid" not in r.schema.names:
                    return None
                parts.append(r.read(["_rowid"]).column(0).to_numpy().astype(np.uint64))
    except (FormatError, OSError):
        return None
    return np.concatenate(parts) if parts else np.zeros(0, np.uint64)


def unfollowed(txn: transaction_pb2.Transaction) -> dict[bytes, set[int]]:
    """Index uuid -> positions of the groups of the Rewrite ``txn`` whose
    coverage that index does not follow (:data:`UNFOLLOWED`)."""
    out: dict[bytes, set[int]] = {}
    for item in filter(None, txn.transaction_properties.get(UNFOLLOWED, "").split(";")):
        uid, _, pos = item.partition(":")
        out.setdefault(bytes.fromhex(uid), set()).add(int(pos))
    return out


def set_unfollowed(txn: transaction_pb2.Transaction, pairs: Iterable[tuple[bytes, int]]) -> None:
    """Record in ``txn`` that index ``uuid`` does not follow group ``pos``, for each pair."""
    text = ";".join(f"{uid.hex()}:{pos}" for uid, pos in sorted(set(pairs)))
    if text:
        txn.transaction_properties[UNFOLLOWED] = text


def recompute_bitmap(bitmap: BitMap, groups: Sequence[Group], move: bool, skip: set[int] | None = None) -> BitMap:
    """``bitmap`` after ``groups`` were rewritten: a group the index covered
    wholly is replaced by its new fragments when ``move`` (the index holds the
    moved rows) and the group's position is not in ``skip``, and dropped
    otherwise; a group covered only in part is dropped."""
    out = BitMap(bitmap)
    for pos, g in enumerate(groups):
        covered = [i in bitmap for i in g.old]
        if not any(covered):
            continue
        out.difference_update(BitMap(g.old))
        if move and all(covered) and pos not in (skip or ()):
            out.update(BitMap(g.new))
    return out


def rewrite_groups(rw: transaction_pb2.Transaction.Rewrite) -> list[Group]:
    """The groups of a Rewrite (the deprecated top-level lists as one group)."""
    groups = list(rw.groups) or [
        transaction_pb2.Transaction.RewriteGroup(old_fragments=rw.old_fragments, new_fragments=rw.new_fragments)
    ]
    return [Group([f.id for f in g.old_fragments], [f.id for f in g.new_fragments]) for g in groups]


def rewrite_section(txn: transaction_pb2.Transaction, cur_index: bytes | None, stable: bool) -> bytes | None:
    """The index section after the Rewrite ``txn`` on a section ``cur_index``.

    A remapped index (``rewritten_indices``) takes its new uuid, details,
    version and files, and covers the new fragments of the groups it covered.
    With stable row ids, an index of row ids covers them too (except the
    groups :func:`unfollowed` names for it), and any other index (addresses)
    no longer covers the rewritten fragments; without them, the bitmaps of
    indices not remapped are kept as they are.  A remapped index no longer in
    the section (dropped meanwhile) is ignored."""
    if not cur_index:
        return cur_index
    rw = txn.rewrite
    groups = rewrite_groups(rw)
    remapped = {bytes(r.old_id.uuid): r for r in rw.rewritten_indices}
    skip = unfollowed(txn)
    section = table_pb2.IndexSection.FromString(cur_index)
    out = table_pb2.IndexSection()
    for meta in section.indices:
        m = out.indices.add()
        m.CopyFrom(meta)
        bitmap = fragments(meta)
        r = remapped.get(bytes(meta.uuid.uuid))
        if r is not None:
            m.uuid.CopyFrom(r.new_id)
            if r.new_index_details:
                m.index_details.ParseFromString(r.new_index_details)
            m.index_version = r.new_index_version
            del m.files[:]
            m.files.extend(r.new_index_files)
        if bitmap is None or meta.name in SYSTEM_INDICES:
            continue
        if r is not None or stable:
            move = r is not None or holds_row_ids(meta)
            new = recompute_bitmap(bitmap, groups, move, skip.get(bytes(meta.uuid.uuid)))
            m.fragment_bitmap = new.serialize()
    return out.SerializeToString()

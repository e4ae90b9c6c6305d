"""Row lineage across an update: the ids and versions of the rows an update moves.

pylance 14 keeps an updated row's stable row id.  An update (or a
merge-insert's matched rows) deletes the row where it was and writes it into
a new fragment whose row id sequence names the same id; the row keeps its
created-at version and its last-updated-at version becomes the version that
commits the update (``docs/reference/stable-row-ids.md``).

The writer knows the moved rows' ids and created-at versions
(:class:`MovedRows`); only the commit knows the committing version and the
next free row id (a rebase changes both), so the commit completes the
sequences (:func:`carried_lineage`).
"""

from __future__ import annotations

import numpy as np

from ..errors import CorruptFileError
from ..protos import table_pb2
from .rowids import (
    CREATED_AT_FIELDS,
    RowIdSequence,
    constant_versions,
    decode_row_ids,
    decode_versions,
    encode_versions,
    read_versions,
)
from .store import ObjectReader


class MovedRows:
    """The stable row ids and created-at versions of the rows an update or a
    merge-insert moves into new fragments, in the order it writes them.

    pylance 14 keeps an updated row's id: the row is deleted where it was and
    written into a new fragment whose row id sequence names it again.  The
    new fragments of the Update transaction carry those ids (the first rows of
    the data written; rows a merge-insert inserts follow them and get fresh
    ids at commit) and their created-at versions, which a row keeps for its
    life; the commit adds the ids of the inserted rows, their created-at, and
    every row's last-updated-at (the committing version, known only then)."""

    def __init__(self, source: ObjectReader | None) -> None:
        self.source = source
        self._ids: list[np.ndarray] = []
        self._created: list[np.ndarray] = []

    def __len__(self) -> int:
        return sum(a.size for a in self._ids)

    def add(self, frag: table_pb2.DataFragment, offsets: np.ndarray) -> None:
        """Rows ``offsets`` (physical, in the order they are written) of ``frag`` move."""
        ids = decode_row_ids(self.source, frag)
        if ids is None:
            raise CorruptFileError(None, f"fragment {frag.id} of a table with stable row ids has no row id sequence")
        created = read_versions(self.source, frag, CREATED_AT_FIELDS)
        offs = np.asarray(offsets, dtype=np.int64)
        self._ids.append(ids[offs])
        # a fragment without a created-at sequence reads as version 1, as pylance reads it
        self._created.append(np.ones(offs.size, np.uint64) if created is None else created[offs])

    def attach(self, frags: list[table_pb2.DataFragment]) -> None:
        """Give the new fragments (in write order) the moved rows' ids and
        created-at versions: whole sequences where every row moved, a leading
        part on the fragment where the moved rows end."""
        ids = np.concatenate(self._ids) if self._ids else np.zeros(0, np.uint64)
        created = np.concatenate(self._created) if self._created else np.zeros(0, np.uint64)
        start = 0
        for frag in frags:
            if start >= ids.size:
                break
            stop = min(ids.size, start + frag.physical_rows)
            frag.inline_row_ids = RowIdSequence.from_values(ids[start:stop]).to_bytes()
            frag.inline_created_at_versions = encode_versions(created[start:stop])
            start = stop
        if start < ids.size:
            raise CorruptFileError(None, f"{ids.size} rows moved but the new fragments hold {start}")


def carried_lineage(
    frag: table_pb2.DataFragment, version: int, next_row_id: int
) -> tuple[bytes | None, bytes, bytes, int]:
    """The row id and version sequences of a new fragment of an update
    committed as ``version``: ``(row_ids, created_at, last_updated_at,
    fresh)``, where ``row_ids`` is None when the fragment's own sequence
    (every row moved) stands, and ``fresh`` ids from ``next_row_id`` on are
    used by its rows that were inserted.

    The rows that moved keep their ids and created-at versions (the first rows
    of the fragment, as :class:`MovedRows` attached them); the inserted rows
    get new ids and were created by ``version``; every row was last updated by
    ``version``."""
    n = frag.physical_rows
    kept = RowIdSequence.from_bytes(frag.inline_row_ids) if frag.HasField("inline_row_ids") else RowIdSequence()
    k = len(kept)
    if k > n:
        raise CorruptFileError(None, f"a new fragment of {n} rows carries {k} row ids")
    created = (
        decode_versions(frag.inline_created_at_versions)
        if frag.HasField("inline_created_at_versions")
        else np.full(k, version, np.uint64)
    )
    if created.size != k:
        raise CorruptFileError(None, f"a new fragment carries {k} row ids but {created.size} created-at versions")
    fresh = n - k
    row_ids = None
    if fresh:
        ids = np.concatenate([kept.values(), np.arange(next_row_id, next_row_id + fresh, dtype=np.uint64)])
        row_ids = RowIdSequence.from_values(ids).to_bytes()
        created = np.concatenate([created, np.full(fresh, version, np.uint64)])
    return row_ids, encode_versions(created), constant_versions(n, version), fresh

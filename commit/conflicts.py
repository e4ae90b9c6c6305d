"""Conflict detection and rebase between concurrent transactions.

For each transaction committed since ours was read, in version order, the
matrix below says whether ours is compatible (rebuild the manifest on the new
latest version), retryable (re-run the operation on the new version) or
incompatible.  Delete and Update against a committed Delete or Update on the
same fragments are rebased by merging deletion vectors, unless the two deleted
some of the same rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import deletion as ldeletion
from tessera.format.table import paths
from tessera.stores.object_store import ObjectStore


class Verdict(Enum):
    COMPATIBLE = "C"
    CHECK = "C/R"  # compatible unless they overlap (fragment-level check)
    RETRYABLE = "R"
    INCOMPATIBLE = "X"


_OPS = [
    "append",
    "delete",
    "update",
    "overwrite",
    "create_index",
    "rewrite",
    "merge",
    "project",
    "data_replacement",
    "update_config",
    "reserve_fragments",
    "restore",
    "update_mem_wal_state",
    "clone",
    "update_bases",
]

# committing (row) x committed (column), after Lance's conflict resolver
_MATRIX_ROWS = {
    "append": "C C C X C C C C C C C X X C C",
    "delete": "C ? ? X C ? R C ? C C X X C C",
    "update": "C ? ? X C ? R C ? C C X X C C",
    "overwrite": "C C C ? C C C C C ? C C X C C",
    "create_index": "C C C X ? ? C C ? C C X X C C",
    "rewrite": "C ? ? X ? ? R C ? C C X C C C",
    "merge": "R R R X C R R X R C C X X C C",
    "project": "C C C X C C R R C C C X X C C",
    "data_replacement": "C C C X ? ? C C ? C C X X C C",
    "update_config": "C C C ? C C C C C ? C C C C C",
    "reserve_fragments": "C C C X C C C C C C C X C C C",
    "restore": "C C C C C C C C C C C C X C C",
}
MATRIX: dict[tuple[str, str], Verdict] = {}
for _ours, _row in _MATRIX_ROWS.items():
    for _theirs, _cell in zip(_OPS, _row.split()):
        MATRIX[(_ours, _theirs)] = {
            "C": Verdict.COMPATIBLE,
            "?": Verdict.CHECK,
            "R": Verdict.RETRYABLE,
            "X": Verdict.INCOMPATIBLE,
        }[_cell]


class RetryableConflict(Exception):
    """Ours must be re-run on the new latest version."""


class Incompatible(Exception):
    """Ours can never be committed on top of what was committed."""


def op_of(txn: transaction_pb2.Transaction | None) -> str | None:
    return txn.WhichOneof("operation") if txn is not None else None


def _touched(txn: transaction_pb2.Transaction) -> set[int]:
    op = op_of(txn)
    if op == "delete":
        return {f.id for f in txn.delete.updated_fragments} | set(txn.delete.deleted_fragment_ids)
    if op == "update":
        return {f.id for f in txn.update.updated_fragments} | set(txn.update.removed_fragment_ids)
    if op == "rewrite":
        groups = list(txn.rewrite.groups) or [txn.rewrite]
        return {f.id for g in groups for f in g.old_fragments}
    if op == "data_replacement":
        return {g.fragment_id for g in txn.data_replacement.replacements}
    if op == "create_index":
        # the fragments the new indices cover (an index without a bitmap covers all)
        from pyroaring import BitMap

        out: set[int] = set()
        for idx in txn.create_index.new_indices:
            if not idx.fragment_bitmap:
                return {-1}
            out |= set(BitMap.deserialize(idx.fragment_bitmap))
        return out
    return set()


def _removed(txn: transaction_pb2.Transaction) -> set[int]:
    op = op_of(txn)
    if op == "delete":
        return set(txn.delete.deleted_fragment_ids)
    if op == "update":
        return set(txn.update.removed_fragment_ids)
    if op == "rewrite":
        return _touched(txn)
    return set()


def _config_keys(txn: transaction_pb2.Transaction) -> set[str]:
    op = op_of(txn)
    if op == "overwrite":
        return set(txn.overwrite.config_upsert_values)
    if op == "update_config":
        uc = txn.update_config
        return set(uc.upsert_values) | set(uc.delete_keys) | {e.key for e in uc.config_updates.update_entries}
    return set()


@dataclass
class Rebase:
    """What a compatible rebase must redo: fragments whose deletion vectors
    must be merged with the latest ones."""

    needs_merge: set[int] = field(default_factory=set)


def check(
    ours: transaction_pb2.Transaction,
    theirs: transaction_pb2.Transaction | None,
    base_fragments: dict[int, table_pb2.DataFragment],
    rebase: Rebase,
) -> None:
    """Raise RetryableConflict / Incompatible, or record what a rebase needs."""
    mine, other = op_of(ours), op_of(theirs)
    if theirs is None or other is None:
        raise RetryableConflict("a concurrent version has no readable transaction")
    verdict = MATRIX.get((mine, other)) if mine is not None else None  # no rule for a transaction without an operation
    if verdict is None:
        raise RetryableConflict(f"no rule for {mine} against a concurrent {other}")
    if verdict is Verdict.INCOMPATIBLE:
        raise Incompatible(f"this {mine} is incompatible with a concurrent {other}")
    if verdict is Verdict.RETRYABLE:
        raise RetryableConflict(f"this {mine} was preempted by a concurrent {other}")
    if verdict is Verdict.COMPATIBLE:
        if mine == "append" and other == "merge":
            _check_fields_kept(ours, theirs)
        return
    # C/R: decide by what they touched
    if mine in ("overwrite", "update_config") or other in ("overwrite", "update_config"):
        if _config_keys(ours) & _config_keys(theirs):
            raise Incompatible(f"this {mine} and a concurrent {other} set the same config keys")
        return
    mine_t, theirs_t = _touched(ours), _touched(theirs)
    if -1 in mine_t and theirs_t or -1 in theirs_t and mine_t:
        raise RetryableConflict(f"this {mine} and a concurrent {other} may touch the same fragments")
    overlap = mine_t & theirs_t
    if not overlap:
        return
    if mine in ("delete", "update") and other in ("delete", "update"):
        if overlap & (_removed(theirs) | _removed(ours)):
            raise RetryableConflict(f"this {mine} and a concurrent {other} removed the same fragments")
        theirs_frags = {
            f.id: f for f in (theirs.delete.updated_fragments if other == "delete" else theirs.update.updated_fragments)
        }
        for fid in overlap:
            before, after = base_fragments.get(fid), theirs_frags.get(fid)
            if before is None or after is None or list(before.files) != list(after.files):
                raise RetryableConflict(f"a concurrent {other} rewrote fragment {fid}")
        rebase.needs_merge |= overlap
        return
    raise RetryableConflict(f"this {mine} and a concurrent {other} touched fragments {sorted(overlap)}")


def _check_fields_kept(ours: transaction_pb2.Transaction, theirs: transaction_pb2.Transaction) -> None:
    """An append after a concurrent Merge that replaced fields: pylance 14
    commits it, and the appended rows then read null in each column whose
    type the Merge changed (``alter_columns`` gives the column a new field id
    the appended files do not hold).  Tessera refuses it instead: the rows
    were written in the old types and must be written again."""
    kept = {f.id for f in theirs.merge.schema}
    written = {i for frag in ours.append.fragments for df in frag.files for i in df.fields}
    if written - kept:
        raise Incompatible(
            "a concurrent alter_columns changed the type of columns this append wrote (their field ids "
            f"{sorted(written - kept)} are gone): nothing was appended; append the rows again"
        )


def merge_deletions(
    store: ObjectStore,
    ours: transaction_pb2.Transaction,
    latest: table_pb2.Manifest,
    affected: dict[int, np.ndarray],
    fragment_ids: set[int],
) -> None:
    """Rebase our deletion files onto the latest ones for ``fragment_ids``."""
    if not fragment_ids:
        return
    current = {f.id: f for f in latest.fragments}
    op = op_of(ours)
    body = ours.delete if op == "delete" else ours.update
    removed = body.deleted_fragment_ids if op == "delete" else body.removed_fragment_ids
    keep = []
    for frag in body.updated_fragments:
        if frag.id not in fragment_ids:
            keep.append(frag)
            continue
        cur = current.get(frag.id)
        if cur is None or frag.id not in affected:
            raise RetryableConflict(f"fragment {frag.id} changed concurrently")
        if cur.HasField("deletion_file"):
            d = cur.deletion_file
            path = paths.deletion_file_path(cur.id, d)
            existing = ldeletion.decode(store.read(path), d.file_type, path).astype(np.int64)
        else:
            existing = np.zeros(0, np.int64)
        mine = affected[frag.id].astype(np.int64)
        clash = np.intersect1d(existing, mine)
        if len(clash):
            raise RetryableConflict(f"rows {clash[:5].tolist()} of fragment {frag.id} were changed concurrently")
        merged = np.union1d(existing, mine)
        if len(merged) >= cur.physical_rows:
            removed.append(frag.id)
            continue
        meta, data = ldeletion.encode(merged, latest.version)
        store.put(paths.deletion_file_path(frag.id, meta), data)
        out = table_pb2.DataFragment()
        out.CopyFrom(cur)
        out.deletion_file.CopyFrom(meta)
        keep.append(out)
    del body.updated_fragments[:]
    body.updated_fragments.extend(keep)

"""``commit.lineage.foreign_base``: whether a staged manifest can have been
built on a version, told by its fragments (for tables without an
incarnation).  Hand-made manifests for each rule; pylance's own operations
are run through the namespace in tests/catalog/test_namespace_recreated.py."""

from __future__ import annotations

import itertools

from tessera.commit.lineage import SAMPLE, foreign_base, fragment_sample
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf

_names = (f"data/{i:032x}.lance" for i in itertools.count())


def _manifest(fragments: list[tuple[int, list[str]]], max_id: int | None = None) -> table_pb2.Manifest:
    m = table_pb2.Manifest()
    for fid, files in fragments:
        f = m.fragments.add()
        f.id = fid
        for path in files:
            f.files.add().path = path
    if max_id is not None:
        m.max_fragment_id = max_id
    return m


def _staged(m: table_pb2.Manifest, txn: transaction_pb2.Transaction) -> mf.ManifestFile:
    txn.uuid = "t"
    return mf.read_manifest(mf.write_manifest(m, txn))


def _append(new: list[str]) -> transaction_pb2.Transaction:
    txn = transaction_pb2.Transaction()
    frag = txn.append.fragments.add()
    frag.id = 0  # pylance's placeholder
    for path in new:
        frag.files.add().path = path
    return txn


def test_an_append_on_its_own_version_passes_and_on_another_table_is_refused():
    a0, a1, new = next(_names), next(_names), next(_names)
    mine = _manifest([(0, [a0]), (1, [a1])], max_id=1)
    staged = _staged(_manifest([(0, [a0]), (1, [a1]), (2, [new])]), _append([new]))
    assert foreign_base(staged, fragment_sample(mine)) is None
    other = _manifest([(0, [next(_names)]), (1, [next(_names)])], max_id=1)  # recreated: same ids, other files
    assert "fragment 0 has other data files" in (foreign_base(staged, fragment_sample(other)) or "")


def test_a_new_fragment_numbered_inside_the_version_is_refused_unless_the_transaction_names_it():
    a0, new = next(_names), next(_names)
    base = _manifest([(0, [a0])], max_id=3)  # ids up to 3 were used (1..3 removed since)
    staged = _staged(_manifest([(0, [a0]), (2, [new])]), _append([new]))
    assert "fragment 2 is not in that version" in (foreign_base(staged, fragment_sample(base)) or "")
    rewrite = transaction_pb2.Transaction()  # a compaction numbers its fragments with ids reserved before
    group = rewrite.rewrite.groups.add()
    group.old_fragments.add().id = 1
    group.new_fragments.add().id = 2
    assert foreign_base(_staged(_manifest([(0, [a0]), (2, [new])]), rewrite), fragment_sample(base)) is None


def test_files_replaced_by_the_transaction_pass_and_replaced_by_nobody_are_refused():
    a0, a1, b1 = next(_names), next(_names), next(_names)
    base = _manifest([(0, [a0]), (1, [a1])], max_id=1)
    update = transaction_pb2.Transaction()  # columns rewritten in place: fragment 1's only file replaced
    changed = update.update.updated_fragments.add()
    changed.id = 1
    changed.files.add().path = b1
    staged = _staged(_manifest([(0, [a0]), (1, [b1])]), update)
    assert foreign_base(staged, fragment_sample(base)) is None
    delete = transaction_pb2.Transaction()  # names fragment 0 only: fragment 1's files changed unexplained
    delete.delete.deleted_fragment_ids.append(0)
    assert "fragment 1" in (foreign_base(_staged(_manifest([(1, [b1])]), delete), fragment_sample(base)) or "")


def test_overwrites_and_restores_replace_the_fragments_and_are_not_compared():
    base = _manifest([(0, [next(_names)])], max_id=0)
    overwrite = transaction_pb2.Transaction()
    overwrite.overwrite.fragments.add().id = 0
    assert foreign_base(_staged(_manifest([(0, [next(_names)])]), overwrite), fragment_sample(base)) is None


def test_the_work_is_bounded_to_the_first_fragments():
    """A table of many fragments: only the first SAMPLE staged fragments are
    compared (a recreated table differs from its first one), so a foreign
    fragment beyond them is not seen: the bound, pinned."""
    n = 4 * SAMPLE
    files = [next(_names) for _ in range(n)]
    base = _manifest([(i, [files[i]]) for i in range(n)], max_id=n - 1)
    sample = fragment_sample(base)
    assert len(sample.files) == 2 * SAMPLE and not sample.complete
    late = [(i, [files[i] if i != n - 1 else next(_names)]) for i in range(n)]
    assert foreign_base(_staged(_manifest(late), _append([])), sample) is None
    early = [(i, [files[i] if i != SAMPLE - 1 else next(_names)]) for i in range(n)]
    assert f"fragment {SAMPLE - 1}" in (foreign_base(_staged(_manifest(early), _append([])), sample) or "")

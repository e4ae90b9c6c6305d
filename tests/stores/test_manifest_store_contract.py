"""One contract, every manifest store: SQLite, PostgreSQL, MariaDB, Redis and
DynamoDB (moto over HTTP).  Each test uses fresh table keys and deletes them."""

from __future__ import annotations

import uuid

import pytest
from tessera_test_store_fixtures import (  # noqa: F401
    Tables,
    dynamodb_table,
    kind_of,
    store,
    store_url,
    tables,
)

from tessera.stores.errors import IncarnationMismatchError, InvalidURIError, VersionExistsError
from tessera.stores.manifest_store import ManifestStore, VersionRecord
from tessera.stores.registry import open_manifest_store
from tessera.stores.uri import normalize_table_uri


def staged(version: int) -> str:
    return f"_versions/{2**64 - 1 - version:020d}.manifest-{uuid.uuid4()}"


def final_of(path: str) -> str:
    return path[: path.rindex(".manifest-") + len(".manifest")]


def rec(key: str, version: int, incarnation: str, *, size: int = 1234, path: str | None = None) -> VersionRecord:
    return VersionRecord(key, version, path or staged(version), size, str(uuid.uuid4()), incarnation)


def commit_chain(store: ManifestStore, key: str, versions, incarnation: str) -> list[VersionRecord]:
    out = []
    for v in versions:
        r = rec(key, v, incarnation)
        store.reserve(r)
        out.append(r)
    return out


def test_store_follows_the_protocol(store):
    assert isinstance(store, ManifestStore)
    assert store.kind in ("sql", "redis", "dynamodb")
    store.check()


def test_reserve_then_get_latest(store, tables: Tables):
    key = tables.new(path="wh/ns/tåble ü")  # non-ASCII key survives every backend
    inc = uuid.uuid4().hex
    assert store.latest(key) is None
    assert store.get(key, 1) is None
    assert store.versions_after(key, 0) == []
    r1 = rec(key, 1, inc, size=2**40 + 7)
    store.reserve(r1)
    assert store.get(key, 1) == r1
    assert store.latest(key) == r1
    assert store.get(key, 2) is None
    assert not store.get(key, 1).is_final


def test_latest_and_versions_after(store, tables: Tables):
    key, inc = tables.new(), uuid.uuid4().hex
    recs = commit_chain(store, key, range(1, 6), inc)
    assert store.latest(key) == recs[-1]
    assert store.versions_after(key, 2) == recs[2:]
    assert store.versions_after(key, 0) == recs
    assert store.versions_after(key, -1) == recs
    assert store.versions_after(key, 5) == []
    assert store.versions_after(key, 99) == []
    # ordering is numeric, not lexicographic ("10" < "9")
    more = commit_chain(store, key, range(6, 12), inc)
    assert store.latest(key) == more[-1]
    assert [r.version for r in store.versions_after(key, 8)] == [9, 10, 11]


def test_versions_are_dense_a_gap_is_refused(store, tables: Tables):
    """Beyond version 1 a reservation needs its predecessor's row: a writer
    cannot skip versions (nor, below, write past a purged table)."""
    key, inc = tables.new(), uuid.uuid4().hex
    recs = commit_chain(store, key, range(1, 4), inc)
    with pytest.raises(IncarnationMismatchError, match="version 4 is not in the store"):
        store.reserve(rec(key, 5, inc))
    assert store.get(key, 5) is None and store.latest(key) == recs[-1]
    fresh = tables.new()
    with pytest.raises(IncarnationMismatchError):  # a table's first row is version 1
        store.reserve(rec(fresh, 2, inc))
    assert store.latest(fresh) is None


def test_duplicate_reserve_raises_version_exists(store, tables: Tables):
    key, inc = tables.new(), uuid.uuid4().hex
    first = rec(key, 1, inc)
    store.reserve(first)
    with pytest.raises(VersionExistsError):
        store.reserve(rec(key, 1, inc))
    with pytest.raises(VersionExistsError):  # even from another incarnation without a predecessor
        store.reserve(rec(key, 1, uuid.uuid4().hex))
    assert store.get(key, 1) == first
    assert store.versions_after(key, 0) == [first]


def test_reserve_of_the_same_transaction_is_idempotent(store, tables: Tables):
    """A retry of a reservation whose response was lost finds its own row: success."""
    key, inc = tables.new(), uuid.uuid4().hex
    r = rec(key, 1, inc)
    store.reserve(r)
    store.reserve(r)
    assert store.get(key, 1) == r


def test_flip_only_from_the_staged_path(store, tables: Tables):
    key, inc = tables.new(), uuid.uuid4().hex
    r = rec(key, 1, inc)
    store.reserve(r)
    final = final_of(r.path)
    other_uuid = f"{final}-{uuid.uuid4()}"
    case_changed = r.path[:-36] + r.path[-36:].upper()  # MySQL's default collations ignore case...
    trailing_space = r.path + " "  # ...and trailing spaces
    for wrong in (other_uuid, case_changed, trailing_space):
        assert store.flip(key, 1, wrong, final) is False
        assert store.get(key, 1) == r, f"flip from {wrong!r} changed the row"
    assert store.flip(key, 1, r.path, final) is True
    after = store.get(key, 1)
    assert after.path == final and after.is_final
    assert (after.size, after.transaction_uuid, after.incarnation) == (r.size, r.transaction_uuid, r.incarnation)
    # idempotent: the row already holds the final path
    assert store.flip(key, 1, r.path, final) is True
    # a flipped row is never flipped again: a different staged path finds the final one
    assert store.flip(key, 1, other_uuid, final) is True  # holds final already: reported, unchanged
    assert store.get(key, 1).path == final
    # missing rows and other tables are never created by a flip
    assert store.flip(key, 2, r.path, final) is False
    other = tables.new()
    assert store.flip(other, 1, r.path, final) is False
    assert store.get(key, 2) is None and store.get(other, 1) is None


def test_flip_refuses_paths_that_are_not_staged_to_final(store, tables: Tables):
    key, inc = tables.new(), uuid.uuid4().hex
    r = rec(key, 1, inc)
    store.reserve(r)
    final = final_of(r.path)
    for staged_path, final_path in (
        (final, "_versions/elsewhere.manifest"),  # final -> another final
        (r.path, final + ".other"),  # not a manifest name
        (r.path, "_versions/00000000000000000009.manifest"),  # another version's manifest
        (r.path, r.path),
    ):
        with pytest.raises(ValueError):
            store.flip(key, 1, staged_path, final_path)
    assert store.get(key, 1) == r


def test_delete_table(store, tables: Tables):
    key, keep, inc = tables.new(), tables.new(), uuid.uuid4().hex
    commit_chain(store, key, range(1, 4), inc)
    kept = commit_chain(store, keep, range(1, 3), inc)
    assert store.delete_table(key) == 3
    assert store.latest(key) is None
    assert store.get(key, 2) is None
    assert store.versions_after(key, 0) == []
    assert store.delete_table(key) == 0
    assert store.versions_after(keep, 0) == kept
    again = rec(key, 1, uuid.uuid4().hex)
    store.reserve(again)
    assert store.latest(key) == again


def test_same_path_in_different_buckets_never_collides(store, tables: Tables):
    """Lance's DynamoDB key omits the bucket (its case E); ours is the full URI."""
    suffix = uuid.uuid4().hex[:10]
    a = normalize_table_uri(f"s3://a-{suffix}/warehouse/t")
    b = normalize_table_uri(f"s3a://b-{suffix}/warehouse/t/")
    assert normalize_table_uri(f"s3://a-{suffix}/warehouse/t/") == a
    assert a != b
    tables.keys += [a, b]
    ra, rb = rec(a, 1, uuid.uuid4().hex), rec(b, 1, uuid.uuid4().hex)
    store.reserve(ra)
    store.reserve(rb)
    assert store.get(a, 1) == ra and store.get(b, 1) == rb
    assert store.latest(a) == ra and store.latest(b) == rb
    assert store.delete_table(a) == 1
    assert store.get(b, 1) == rb


def test_incarnation_mismatch_after_drop_and_recreate(store, tables: Tables):
    key = tables.new()
    old, new = uuid.uuid4().hex, uuid.uuid4().hex
    commit_chain(store, key, (1, 2), old)
    store.delete_table(key)
    recreated = commit_chain(store, key, (1, 2), new)
    # a writer still holding the dropped table's identity read v2 and tries v3
    with pytest.raises(IncarnationMismatchError):
        store.reserve(rec(key, 3, old))
    assert store.get(key, 3) is None
    assert store.latest(key) == recreated[-1]
    # also when the new table is shorter than the old one was
    key2 = tables.new()
    commit_chain(store, key2, (1,), new)
    with pytest.raises(IncarnationMismatchError):
        store.reserve(rec(key2, 2, old))
    assert store.get(key2, 2) is None
    # the rightful incarnation goes on
    r3 = rec(key, 3, new)
    store.reserve(r3)
    assert store.latest(key) == r3


def test_a_stale_writer_cannot_write_past_a_dropped_or_shorter_recreated_table(store, tables: Tables):
    """The old table reached v5; it is purged (rows deleted) and recreated with
    two versions.  A writer that read the old v5 must not land v6 - neither
    before the recreate (no rows at all) nor after it (the new table is shorter,
    so v5 has no row) - or the new table's latest would be the dead table's."""
    key = tables.new()
    old, new = uuid.uuid4().hex, uuid.uuid4().hex
    commit_chain(store, key, range(1, 6), old)
    store.delete_table(key)
    with pytest.raises(IncarnationMismatchError, match="version 5 is not in the store"):
        store.reserve(rec(key, 6, old))
    assert store.latest(key) is None
    recreated = commit_chain(store, key, (1, 2), new)
    with pytest.raises(IncarnationMismatchError):
        store.reserve(rec(key, 6, old))
    with pytest.raises(IncarnationMismatchError, match=f"belongs to incarnation {new}"):
        store.reserve(rec(key, 3, old))
    assert store.latest(key) == recreated[-1]
    assert store.versions_after(key, 0) == recreated


def test_unnormalised_keys_and_bad_values_are_refused(store, tables: Tables):
    key, inc = tables.new(), uuid.uuid4().hex
    for bad_key in (key + "/", key.replace("s3://", "S3://"), "", "s3://no-path-normalisation//x"):
        with pytest.raises(InvalidURIError):
            store.reserve(rec(bad_key, 1, inc))
    with pytest.raises(InvalidURIError):
        store.latest(key + "/")
    for bad in (-1, True, "1", 1.0):
        with pytest.raises(ValueError):
            store.reserve(VersionRecord(key, bad, staged(1), 1, "t", inc))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.reserve(VersionRecord(key, 1, "", 1, "t", inc))
    with pytest.raises(ValueError):
        store.reserve(VersionRecord(key, 1, staged(1), -5, "t", inc))
    assert store.latest(key) is None


def test_long_key_round_trips(store, tables: Tables):
    key = tables.new(path="/".join(["segment-" + "x" * 40] * 30))  # ~1.5 KB
    assert len(key) > 1400
    r = rec(key, 1, uuid.uuid4().hex)
    store.reserve(r)
    assert store.get(key, 1) == r
    assert store.latest(key) == r


SECRET = "s3cr3t-Pa55"


def test_identity_has_no_credentials(store_url, request):
    kind = kind_of(store_url)
    if kind == "sqlite":
        url, options = store_url, {"create": False, "check": False}
        expect = "sqlite:///"
    elif kind == "postgresql":
        url, options = store_url.replace("postgres@", f"postgres:{SECRET}@"), {"check": False}
        expect = "postgresql://127.0.0.1:5432/"
    elif kind == "mysql":
        url, options = store_url.replace("root@", f"root:{SECRET}@"), {"check": False}
        expect = "mysql://127.0.0.1:3306/"
    elif kind == "redis":
        url, options = store_url.replace("redis://", f"redis://user:{SECRET}@"), {"check": False}
        expect = "redis://127.0.0.1:6379/15"
    else:
        url = store_url
        options = {
            "aws_access_key_id": "AKIA" + SECRET,
            "aws_secret_access_key": SECRET,
            "aws_session_token": SECRET,
            "check": False,
        }
        expect = "dynamodb:///"
    s = open_manifest_store(url, **options)
    try:
        ident = s.identity()
        assert SECRET not in ident and "testing" not in ident
        assert "@" not in ident
        assert ident.startswith(expect), ident
    finally:
        s.close()

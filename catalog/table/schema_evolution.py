"""Schema evolution as pylance 14 does it: ``alter_columns`` (rename,
nullability, type widening at any depth), nested drops, all-null columns and
struct children added by schema (``add_columns(pa.field(...))``), and the
schema merge of an append (``schema_mode="merge"``).

What each writes, as pylance writes it (docs/reference/schema-evolution.md):

* a rename or a nullability change is a Project: the schema only, field ids
  unchanged (a nested field keeps its id, so every data file still maps);
* a type change is a Merge: the altered field takes a new field id (the
  table's largest plus one), every fragment gets one new data file holding
  the altered fields (under their ancestors, for a struct child) cast to the
  new type, and a data file left without any field of the new schema leaves
  its fragment; older versions still name the old id and read the old file;
* an all-null column or struct child is a Merge of the same fragments with a
  new field id no data file holds: it reads as null in every older row.

A type change of an indexed column is refused (pylance refuses it for every
index), except that Tessera's own zone maps are dropped with the old field id
and built again on the new one, in a commit of their own.

Tessera allows only the type changes that lose nothing (:func:`widens`:
integers to wider integers, floats to wider floats, string/binary to their
large forms, decimals to more precision at the same scale, date32 to date64,
lists of such); pylance also accepts narrowing casts (checked row by row) and
lossy float narrowing, which Tessera refuses before writing anything.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import TypedDict

import pyarrow as pa

from tessera.commit import new_transaction
from tessera.format.file import schema as lschema
from tessera.format.protos import table_pb2, transaction_pb2
from tessera.format.table import manifest as mf
from tessera.format.table import zonemap as zm
from tessera.format.table.fragments import FragmentReader, write_fragments
from tessera.format.table.write_types import check_nulls, check_write_schema

from ..errors import (
    IncompatibleTransactionError,
    InvalidArgumentError,
    SchemaMismatchError,
    TypeChangeError,
    UnknownColumnError,
)
from . import data as ldata
from . import writes
from .indexes import create_index
from .snapshot import TableSnapshot
from .writes import DeletedRows, Stage, check_writable, run


class AlterColumn(TypedDict, total=False):
    """One alteration, pylance's shape: ``path`` (required; ``"s.b"`` for a
    struct child) and any of ``name``, ``nullable``, ``data_type``."""

    path: str
    name: str
    nullable: bool
    data_type: pa.DataType


SCHEMA_MODES = ("merge",)

_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]


def widens(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every value of type ``src`` is a value of type ``dst`` (the
    type changes Tessera's ``alter_columns`` accepts; pylance's and Iceberg's
    widenings are among them)."""
    if src.equals(dst):
        return True
    for order in (_SIGNED, _UNSIGNED, _FLOATS):
        if src in order and dst in order:
            return order.index(dst) > order.index(src)
    if src in _UNSIGNED and dst in _SIGNED:
        return dst.bit_width > src.bit_width
    if (src, dst) in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary()), (pa.date32(), pa.date64())):
        return True
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return dst.scale == src.scale and dst.precision >= src.precision and dst.bit_width >= src.bit_width
    if pa.types.is_fixed_size_list(src) and pa.types.is_fixed_size_list(dst):
        return src.list_size == dst.list_size and widens(src.value_type, dst.value_type)
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(src) for f in lists) and any(f(dst) for f in lists):
        return not (pa.types.is_large_list(src) and pa.types.is_list(dst)) and widens(src.value_type, dst.value_type)
    return False


# -- paths ------------------------------------------------------------------------------


def resolve(fields: Sequence[lschema.LanceField], path: str) -> list[lschema.LanceField]:
    """The fields from the top-level one down to the one ``path`` names
    (``"s.b"``: child ``b`` of struct ``s``; a name holding a dot is matched
    whole first); UnknownColumnError when there is none."""
    if not isinstance(path, str) or not path:
        raise InvalidArgumentError(f"a column path must be a non-empty string, got {path!r}")

    def find(level: Sequence[lschema.LanceField], rest: str) -> list[lschema.LanceField] | None:
        for f in level:
            if f.name == rest:
                return [f]
        for f in level:
            if rest.startswith(f.name + ".") and f.children:
                below = find(f.children, rest[len(f.name) + 1 :])
                if below is not None:
                    return [f, *below]
        return None

    chain = find(fields, path)
    if chain is None:
        raise UnknownColumnError(f"no column {path!r} in the table (columns: {[f.name for f in fields]})")
    return chain


def _by_id(fields: list[lschema.LanceField], fid: int) -> tuple[list[lschema.LanceField], int]:
    """The list holding field ``fid`` (the top level or a parent's children) and its position."""
    for i, f in enumerate(fields):
        if f.id == fid:
            return fields, i
        if f.children:
            try:
                return _by_id(f.children, fid)
            except KeyError:
                pass
    raise KeyError(fid)


def _fresh(f: pa.Field, next_id: int, parent_id: int) -> lschema.LanceField:
    """A Lance field for ``f`` with ids from ``next_id`` (pre-order) under ``parent_id``."""
    node = lschema.fields_from_arrow(pa.schema([f.with_name("x")]), start_id=next_id)[0]
    node.name, node.parent_id = f.name, parent_id
    return node


def _size(f: lschema.LanceField) -> int:
    return sum(1 for _ in f.walk())


def next_field_id(table: TableSnapshot) -> int:
    """One above every field id the table's schema or data files use."""
    ids = [n.id for f in table.fields for n in f.walk()]
    ids += [i for frag in table.manifest.fragments for df in frag.files for i in df.fields]
    return max(ids + [-1]) + 1


def _schema_txn(
    table: TableSnapshot, fields: list[lschema.LanceField], fragments: Sequence[table_pb2.DataFragment] | None
) -> transaction_pb2.Transaction:
    """A Project (``fragments`` None) or a Merge carrying ``fields`` as the new schema."""
    txn = new_transaction(table.version)
    protos = lschema.fields_to_protos(fields)
    if fragments is None:
        txn.project.schema.extend(protos)
        return txn
    txn.merge.fragments.extend(fragments)
    txn.merge.schema.extend(protos)
    for k, v in table.manifest.schema_metadata.items():
        txn.merge.schema_metadata[k] = v
    return txn


# -- alter_columns ----------------------------------------------------------------------


def _parse(alt: object) -> tuple[str, str | None, bool | None, pa.DataType | None]:
    if not isinstance(alt, Mapping):
        raise InvalidArgumentError(f"an alteration is a dict: path and any of name, nullable, data_type; got {alt!r}")
    unknown = set(alt) - {"path", "name", "nullable", "data_type"}
    if unknown or "path" not in alt:
        raise InvalidArgumentError(
            f"alteration {dict(alt)!r}: keys are 'path' (required), 'name', 'nullable', 'data_type'"
            + (f"; unknown {sorted(unknown)}" if unknown else "")
        )
    name, nullable, dtype = alt.get("name"), alt.get("nullable"), alt.get("data_type")
    if name is not None and (not isinstance(name, str) or not name):
        raise InvalidArgumentError(f"alteration of {alt['path']!r}: 'name' must be a non-empty string, got {name!r}")
    if nullable is not None and not isinstance(nullable, bool):
        raise InvalidArgumentError(f"alteration of {alt['path']!r}: 'nullable' must be True or False, got {nullable!r}")
    if dtype is not None and not isinstance(dtype, pa.DataType):
        raise InvalidArgumentError(
            f"alteration of {alt['path']!r}: 'data_type' must be a pyarrow DataType (pa.int64()), got {dtype!r}"
        )
    return alt["path"], name, nullable, dtype


def _check_no_nulls(table: TableSnapshot, chain: list[lschema.LanceField], path: str) -> None:
    """Refuse making ``path`` non-nullable while a live row holds a null there
    (a null under a null parent is no value), as pylance 14 refuses it."""
    top = chain[0]
    target = copy.deepcopy(top)
    node = target
    for f in chain[1:]:
        node = next(c for c in node.children if c.id == f.id)
    node.nullable = False
    arrow = target.to_arrow()
    for frag in table.manifest.fragments:
        reader = FragmentReader(table.store, frag, [top])
        try:
            arr = reader.read(0, frag.physical_rows)[0]
            mask = reader.live_mask(0, frag.physical_rows)
        finally:
            reader.close()
        if mask is not None:
            arr = arr.filter(pa.array(mask))
        try:
            check_nulls(arr, arrow)
        except SchemaMismatchError:
            raise InvalidArgumentError(
                f"column {path!r} holds nulls, so it cannot be made non-nullable (pylance refuses it too); "
                "fill them first (Table.update) or keep nullable=True; nothing was changed"
            ) from None


def _cast_array(arr: pa.Array, old: lschema.LanceField, new: lschema.LanceField, old_of: dict[int, int]) -> pa.Array:
    """``arr`` (the table's array of ``old``) as the pruned new field ``new``:
    the altered fields cast, their ancestors rebuilt around them."""
    if new.id in old_of:
        try:
            return arr.cast(new.arrow_type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
            raise TypeChangeError(f"cannot cast column {old.name!r} to {new.arrow_type}: {exc}") from exc
    kids = []
    for nc in new.children:
        j = next(i for i, oc in enumerate(old.children) if oc.id == old_of.get(nc.id, nc.id))
        kids.append(_cast_array(arr.field(j), old.children[j], nc, old_of))
    mask = arr.is_null() if arr.null_count else None
    return pa.StructArray.from_arrays(kids, fields=[c.to_arrow() for c in new.children], mask=mask)


def _prune(f: lschema.LanceField, keep: set[int]) -> lschema.LanceField | None:
    """``f`` with only the fields in ``keep`` (whole) and their ancestors."""
    if f.id in keep:
        return f
    kids = [k for k in (_prune(c, keep) for c in f.children) if k is not None]
    if not kids:
        return None
    out = copy.copy(f)
    out.children = kids
    return out


def _indexed(table: TableSnapshot, ids: set[int], rebuild: list[tuple[str, str]]) -> None:
    """Zone maps on the fields ``ids`` whose type changes go into ``rebuild``
    as (name, column): the Merge drops them, Tessera builds them again.  Any
    other index refuses the change, as pylance 14 refuses it for every index."""
    if not table.index_section:
        return
    names = {f.id: f.name for f in table.fields}
    other = []
    for m in table_pb2.IndexSection.FromString(table.index_section).indices:
        if not ids.intersection(m.fields):
            continue
        if m.index_details.type_url.endswith(zm.TYPE_URL) and len(m.fields) == 1 and m.fields[0] in names:
            rebuild.append((m.name, names[m.fields[0]]))
        else:
            other.append(m.name)
    if other:
        raise TypeChangeError(
            f"cannot change the type of an indexed column: indices {sorted(other)} cover it and a type change "
            "rewrites its data (pylance refuses it too); drop them first (pylance's drop_index), then rebuild "
            "them; nothing was changed"
        )


def build_alter_columns(
    table: TableSnapshot, alterations: Sequence[object], rebuild: list[tuple[str, str]] | None = None
) -> transaction_pb2.Transaction:
    """The Project (renames, nullability) or Merge (type changes: new data
    files written here) that applies ``alterations`` to ``table``'s version;
    the zone maps a type change drops go into ``rebuild`` (see :func:`_indexed`)."""
    if not alterations:
        raise InvalidArgumentError("alter_columns needs at least one alteration")
    fields = copy.deepcopy(table.fields)
    next_id = next_field_id(table)
    old_of: dict[int, int] = {}  # new field id -> the id it replaces
    casts: list[lschema.LanceField] = []  # the top-level (original) fields holding a cast
    parsed = [_parse(a) for a in alterations]
    has_cast = any(d is not None for *_, d in parsed)
    for path, name, nullable, dtype in parsed:
        chain = resolve(table.fields, path)  # paths name the version's fields, as pylance resolves them
        orig = chain[-1]
        siblings, pos = _by_id(fields, orig.id)
        node = siblings[pos]
        if name is not None and name != node.name:
            if orig.parent_id == -1:
                lschema.check_column_name(name)
            if any(s.name == name for s in siblings):
                raise InvalidArgumentError(f"cannot rename {path!r} to {name!r}: a field of that name exists there")
            node.name = name
        if nullable is not None and nullable != node.nullable:
            if not nullable:
                if has_cast:
                    raise InvalidArgumentError(
                        "cannot make a column non-nullable and change a type in the same call (pylance refuses "
                        "it too): call alter_columns for the type change first, then for the nullability"
                    )
                _check_no_nulls(table, chain, path)
            node.nullable = nullable
        if dtype is None or dtype.equals(orig.arrow_type):
            continue
        if orig.id in old_of.values():
            raise InvalidArgumentError(f"column {path!r} is altered twice in one call")
        if any(a.is_list or a.is_packed_struct or a.blob for a in chain[:-1]) or orig.blob or orig.is_struct:
            raise TypeChangeError(
                f"cannot change the type of {path!r}: only a top-level column or a struct child's type changes "
                "(change a struct's children one by one; a list's item with the list: data_type=pa.list_(...))"
            )
        if not widens(orig.arrow_type, dtype):
            raise TypeChangeError(
                f"cannot change column {path!r} from {orig.arrow_type} to {dtype}: it could lose values; Tessera "
                "changes a type only to a wider one (int8 -> int16 -> int32 -> int64, uint to a wider int, "
                "float16 -> float32 -> float64, string -> large_string, binary -> large_binary, decimal to more "
                "precision, date32 -> date64, lists of these); nothing was changed"
            )
        new = _fresh(pa.field(node.name, dtype, node.nullable, node.to_arrow().metadata), next_id, node.parent_id)
        next_id += _size(new)
        siblings[pos] = new
        old_of[new.id] = orig.id
        if chain[0] not in casts:
            casts.append(chain[0])
    if not old_of:
        return _schema_txn(table, fields, None)
    _indexed(table, set(old_of.values()), [] if rebuild is None else rebuild)
    tops = [next(f for f in fields if f.id == c.id) if c.id not in old_of.values() else None for c in casts]
    pruned: list[lschema.LanceField] = []
    for c, top in zip(casts, tops):
        if top is None:  # the top-level column itself was cast
            top = next(f for f in fields if old_of.get(f.id) == c.id)
        p = _prune(top, set(old_of))
        assert p is not None
        pruned.append(p)
    schema = pa.schema([p.to_arrow() for p in pruned])
    keep_ids = {n.id for f in fields for n in f.walk()}
    frags = []
    for frag in table.manifest.fragments:
        reader = FragmentReader(table.store, frag, casts)
        try:
            arrays = reader.read(0, frag.physical_rows)
        finally:
            reader.close()
        cols = [_cast_array(a, c, p, old_of) for a, c, p in zip(arrays, casts, pruned)]
        written = write_fragments(
            table.store,
            [pa.RecordBatch.from_arrays(cols, schema=schema)],
            schema,
            pruned,
            table.file_version,
            max_rows_per_file=max(frag.physical_rows, 1),
        )
        out = table_pb2.DataFragment()
        out.CopyFrom(frag)
        out.files.append(written[0].files[0])
        # as pylance: a data file holding no field of the new schema leaves the fragment
        kept = [df for df in out.files if keep_ids.intersection(df.fields)]
        del out.files[:]
        out.files.extend(kept)
        frags.append(out)
    return _schema_txn(table, fields, frags)


def alter_columns(
    table: TableSnapshot, alterations: Sequence[object], stage: Stage | None = None
) -> mf.ManifestFile | None:
    """Apply ``alterations`` (pylance's :class:`AlterColumn` dicts) in one
    commit, then rebuild the zone maps of columns whose type changed (one
    commit each)."""
    alterations = list(alterations)
    rebuild: list[tuple[str, str]] = []

    def build(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction:
        rebuild.clear()
        return build_alter_columns(view, alterations, rebuild)

    mfile = run(table, build, stage)
    for name, column in rebuild:
        assert mfile is not None  # a type change commits
        mfile = create_index(table.at(mfile), column, name, None, stage) or mfile
    return mfile


# -- nested drops -----------------------------------------------------------------------


def drop_fields(fields: list[lschema.LanceField], paths: Sequence[str]) -> list[lschema.LanceField]:
    """``fields`` without the fields ``paths`` name (top-level or nested); a
    struct left without children goes too, as pylance drops it."""
    out = copy.deepcopy(fields)
    for path in paths:
        chain = resolve(out, path)
        for depth in range(len(chain) - 1, -1, -1):
            siblings = chain[depth - 1].children if depth else out
            siblings.remove(chain[depth])
            if siblings or not depth:
                break
    if not out:
        raise InvalidArgumentError("cannot drop every column of a table")
    return out


# -- all-null columns and schema merge --------------------------------------------------


def merge_fields(
    fields: list[lschema.LanceField], schema: pa.Schema, next_id: int, *, existing: str
) -> tuple[list[lschema.LanceField], int]:
    """``fields`` with the fields of ``schema`` they lack added (new ids from
    ``next_id``, nullable: older rows hold none), struct children merged by
    name at any depth.  A field both have: ``existing="refuse"`` raises
    InvalidArgumentError (``add_columns``), ``"keep"`` keeps the table's
    (the append's type check comes later).  Returns (fields, next id)."""
    out = copy.deepcopy(fields)

    def merge(have: list[lschema.LanceField], want: Sequence[pa.Field], parent: int, path: str) -> None:
        nonlocal next_id
        for f in want:
            name = f"{path}{f.name}"
            cur = next((h for h in have if h.name == f.name), None)
            if cur is None:
                if parent == -1:
                    lschema.check_column_name(f.name)
                node = _fresh(f.with_nullable(True), next_id, parent)
                next_id += _size(node)
                have.append(node)
            elif cur.is_struct and not cur.is_packed_struct and pa.types.is_struct(f.type):
                merge(cur.children, list(f.type), cur.id, name + ".")
            elif existing == "refuse":
                raise InvalidArgumentError(f"column {name!r} already exists")

    merge(out, list(schema), -1, "")
    return out, next_id


def _null_columns_schema(columns: object) -> pa.Schema:
    if isinstance(columns, pa.Schema):
        return columns
    if isinstance(columns, pa.Field):
        return pa.schema([columns])
    return pa.schema(list(columns))  # type: ignore[call-overload]


def build_add_null_columns(table: TableSnapshot, columns: object) -> transaction_pb2.Transaction:
    """A Merge adding the all-null columns (or struct children) of ``columns``
    (a pa.Field, a list of them or a pa.Schema): metadata only."""
    schema = _null_columns_schema(columns)
    if not len(schema):
        raise InvalidArgumentError("add_columns needs at least one field")
    for f in schema:
        if not f.nullable:
            raise InvalidArgumentError(
                f"column {f.name!r} is not nullable, but every existing row would hold a null there (pylance refuses "
                "it too): add it nullable, or add it with values (add_columns(data))"
            )
    fields, _ = merge_fields(table.fields, schema, next_field_id(table), existing="refuse")
    return _schema_txn(table, fields, [_copy(f) for f in table.manifest.fragments])


def _copy(frag: table_pb2.DataFragment) -> table_pb2.DataFragment:
    out = table_pb2.DataFragment()
    out.CopyFrom(frag)
    return out


def is_null_columns(columns: object) -> bool:
    """Whether ``add_columns`` was given fields (all-null columns), not data or expressions."""
    if isinstance(columns, (pa.Field, pa.Schema)):
        return True
    return isinstance(columns, (list, tuple)) and bool(columns) and all(isinstance(c, pa.Field) for c in columns)


def append(
    snap: TableSnapshot,
    data: ldata.Data,
    stage: Stage | None = None,
    progress: object = None,
    app: tuple[str, int] | None = None,
    schema_mode: str | None = None,
) -> mf.ManifestFile | None:
    """``Table.append``: :func:`.writes.append`, or :func:`append_merging`
    with ``schema_mode="merge"``."""
    if schema_mode is None:
        return writes.append(snap, data, stage, progress, app)
    if schema_mode not in SCHEMA_MODES:
        raise InvalidArgumentError(
            f"schema_mode={schema_mode!r}: an append takes schema_mode='merge' (add the data's new columns) or "
            "None (the data's columns must be the table's); to replace the schema, use Table.overwrite"
        )
    return append_merging(snap, data, stage, progress, app)


def append_merging(
    snap: TableSnapshot,
    data: ldata.Data,
    stage: Stage | None = None,
    progress: object = None,
    app: tuple[str, int] | None = None,
) -> mf.ManifestFile | None:
    """Append with ``schema_mode="merge"`` (delta-rs's name; Spark's
    ``mergeSchema``): the data's columns and struct children the table lacks
    are added first, as all-null columns (a Merge commit, metadata only, as
    pylance's ``add_columns(pa.field(...))``), then the rows are appended as
    any append (an Append commit); columns the data lacks are written as
    nulls.  A column whose type is not the table's is refused
    (SchemaMismatchError naming it) before anything is written."""
    check_writable(snap)
    if (done := writes.already_applied(snap, app)) is not None:
        return done  # an idempotent write the table holds: no schema commit either
    reader = ldata.to_reader(data)
    base = lschema.fields_to_protos(snap.fields)
    fields, _ = merge_fields(snap.fields, reader.schema, next_field_id(snap), existing="keep")
    if lschema.fields_to_protos(fields) == base:
        return writes.append(snap, reader, stage, progress, app)
    check_write_schema(reader.schema, lschema.to_arrow_schema(fields))
    evolved = commit_schema(snap, fields, stage)
    return writes.append(snap.at(evolved), reader, stage, progress, app) or evolved


def commit_schema(snap: TableSnapshot, fields: list[lschema.LanceField], stage: Stage | None = None) -> mf.ManifestFile:
    """Commit ``fields`` (``snap``'s fields with all-null columns or struct
    children added: :func:`merge_fields`) as a Merge of the latest version's
    fragments, metadata only; re-run over concurrent appends.  ``snap``'s
    version when ``fields`` are its own (nothing to commit).

    Raises:
        IncompatibleTransactionError: the schema changed since ``snap``'s
            version (the new field ids may be taken): nothing was committed.
    """
    base = lschema.fields_to_protos(snap.fields)
    if lschema.fields_to_protos(fields) == base:
        return snap.mfile

    def evolve(view: TableSnapshot, deleted: DeletedRows) -> transaction_pb2.Transaction:
        if lschema.fields_to_protos(view.fields) != base:
            raise IncompatibleTransactionError(
                f"{view.uri}: the table's schema changed at version {view.version} while new columns were being "
                "merged in; nothing was committed: write again"
            )
        return _schema_txn(view, fields, [_copy(f) for f in view.manifest.fragments])

    evolved = run(snap, evolve, stage)
    assert evolved is not None  # a Merge always commits
    return evolved

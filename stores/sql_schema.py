"""Tessera's SQL manifest-store tables: the typed mappings, their statements
and the schema check.

The tables are created and upgraded only by the Alembic migrations in
``migrations/`` (revision 0001 mirrors :class:`ManifestVersionRow`, revision
0003 :class:`StoreMetaRow`; a test checks that autogenerate finds no
difference).  The statements are built once; SQLAlchemy caches their compiled
form per dialect.

:func:`schema_problems` compares a reflected table with its mapping by type
affinity per backend (an integer column must be an integer type, a string
column a string type long enough to hold what Tessera writes, byte-exact on
MySQL/MariaDB), nullability, server defaults and the primary key.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.engine.interfaces import ReflectedColumn
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .manifest_checks import MAX_KEY_BYTES

TABLE_NAME = "tessera_manifest_versions"
#: the store's own facts (its id), one row per name; created by migration 0003
META_TABLE_NAME = "tessera_store_meta"
#: the row of :data:`META_TABLE_NAME` holding the store id
STORE_ID_NAME = "store_id"
MAX_ID_CHARS = 64
_MYSQL = ("mysql", "mariadb")


class ExactString(sa.types.TypeDecorator[str]):
    """A string compared byte for byte: VARCHAR, or VARBINARY on MySQL/MariaDB
    (whose default collations ignore case and trailing spaces)."""

    impl = sa.String
    cache_ok = True

    def __init__(self, length: int) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine[Any]:
        if dialect.name in _MYSQL:
            return dialect.type_descriptor(mysql.VARBINARY(self.length))
        return dialect.type_descriptor(sa.String(self.length))

    def process_bind_param(self, value: str | None, dialect: sa.Dialect) -> Any:
        if value is not None and dialect.name in _MYSQL:
            return value.encode("utf-8")
        return value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> str | None:
        if isinstance(value, (bytes, bytearray, memoryview)):
            return bytes(value).decode("utf-8")
        return value


class Base(DeclarativeBase):
    """Declarative base of Tessera's SQL tables (Alembic's target metadata)."""


class ManifestVersionRow(Base):
    """One (table, version) reservation; mirrors migration 0001."""

    __tablename__ = TABLE_NAME

    table_hash: Mapped[str] = mapped_column(ExactString(64), primary_key=True)
    version: Mapped[int] = mapped_column(sa.BigInteger, primary_key=True, autoincrement=False)
    table_key: Mapped[str] = mapped_column(ExactString(MAX_KEY_BYTES))
    path: Mapped[str] = mapped_column(ExactString(MAX_KEY_BYTES))
    size: Mapped[int] = mapped_column(sa.BigInteger)
    transaction_uuid: Mapped[str] = mapped_column(ExactString(MAX_ID_CHARS))
    incarnation: Mapped[str] = mapped_column(ExactString(MAX_ID_CHARS))
    created_at: Mapped[datetime] = mapped_column(sa.DateTime(timezone=True), server_default=sa.func.now())


class StoreMetaRow(Base):
    """One fact about the store itself (``store_id`` -> a uuid4 hex); mirrors migration 0003."""

    __tablename__ = META_TABLE_NAME

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    value: Mapped[str] = mapped_column(sa.String(255))


# the mapped Tables (``__table__`` is declared as any FromClause; the metadata holds them as Tables)
_T = Base.metadata.tables[TABLE_NAME]
_M = Base.metadata.tables[META_TABLE_NAME]
EXPECTED_COLUMNS = frozenset(c.name for c in _T.columns)
RECORD_COLUMNS = (_T.c.table_key, _T.c.version, _T.c.path, _T.c.size, _T.c.transaction_uuid, _T.c.incarnation)


def _p(name: str, type_: sa.types.TypeEngine[Any]) -> sa.BindParameter[Any]:
    return sa.bindparam(name, type_=type_)


#: reserve: insert when the version is the first, or the predecessor exists
#: with the same incarnation (one statement)
RESERVE = (
    sa.insert(_T)
    .from_select(
        ["table_hash", "version", "table_key", "path", "size", "transaction_uuid", "incarnation"],
        sa.select(
            _p("h", ExactString(64)),
            _p("v", sa.BigInteger()),
            _p("key", ExactString(MAX_KEY_BYTES)),
            _p("path", ExactString(MAX_KEY_BYTES)),
            _p("size", sa.BigInteger()),
            _p("txn", ExactString(MAX_ID_CHARS)),
            _p("inc", ExactString(MAX_ID_CHARS)),
        ).where(
            sa.or_(
                _p("pv2", sa.BigInteger()) < 1,
                sa.select(sa.literal(1))
                .where(
                    _T.c.table_hash == _p("h2", ExactString(64)),
                    _T.c.version == _p("pv", sa.BigInteger()),
                    _T.c.incarnation == _p("inc2", ExactString(MAX_ID_CHARS)),
                )
                .exists(),
            )
        ),
    )
    .execution_options(preserve_rowcount=True)
)
#: flip: staged -> final, only while the row holds the staged path
FLIP = (
    sa.update(_T)
    .where(_T.c.table_hash == sa.bindparam("h"), _T.c.version == sa.bindparam("v"), _T.c.path == sa.bindparam("staged"))
    .values(path=sa.bindparam("final"))
)
#: the flip on PostgreSQL: the same UPDATE, committed without waiting for its
#: WAL flush (``synchronous_commit`` off for this statement's own transaction,
#: set by the statement itself: no extra round trip).  A flip lost to a server
#: crash is a flip that failed: the row still holds the staged path, the final
#: manifest is in place and the next reader finishes it (the reservation,
#: which decides the version, stays synchronous)
FLIP_ASYNC_WAL = FLIP.where(sa.func.set_config("synchronous_commit", "off", True) == "off")
GET = sa.select(*RECORD_COLUMNS).where(_T.c.table_hash == sa.bindparam("h"), _T.c.version == sa.bindparam("v"))
LATEST = sa.select(*RECORD_COLUMNS).where(_T.c.table_hash == sa.bindparam("h")).order_by(_T.c.version.desc()).limit(1)
AFTER = (
    sa.select(*RECORD_COLUMNS)
    .where(_T.c.table_hash == sa.bindparam("h"), _T.c.version > sa.bindparam("v"))
    .order_by(_T.c.version.asc())
)
DELETE = sa.delete(_T).where(_T.c.table_hash == sa.bindparam("h"))
#: the value of one meta row (``n``), and its insert (a duplicate name raises an integrity error)
GET_META = sa.select(_M.c.value).where(_M.c.name == sa.bindparam("n"))
PUT_META = sa.insert(_M).values(name=sa.bindparam("n"), value=sa.bindparam("val"))

#: every table Tessera's manifest store needs, by name
TABLES: dict[str, sa.Table] = {TABLE_NAME: _T, META_TABLE_NAME: _M}


def table_hash(table_key: str) -> str:
    """The primary-key column derived from a table key."""
    return hashlib.sha256(table_key.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------- schema check
def schema_problems(backend: str, table: sa.Table, columns: list[ReflectedColumn], pk: list[str]) -> list[str]:
    """What is wrong with a reflected table (``Inspector.get_columns`` and the
    primary key's columns, in order) compared with ``table``, one sentence per
    problem naming the column, what was found and what Tessera expects (empty
    when it matches).  ``backend`` is the URL's backend name."""
    problems: list[str] = []
    found = {c["name"]: c for c in columns}
    for col in table.columns:
        got = found.get(col.name)
        if got is None:
            problems.append(f"column {col.name!r} is missing (expected {expected_type(backend, col.type)})")
            continue
        why = type_problem(backend, col.type, got["type"])
        if why:
            problems.append(f"column {col.name!r} is {render_type(got['type'])}, expected {why}")
        if not col.nullable and got.get("nullable", True):
            problems.append(f"column {col.name!r} allows NULL, expected NOT NULL")
        if col.server_default is not None and got.get("default") is None and not got.get("nullable", True):
            problems.append(f"column {col.name!r} has no default, expected DEFAULT {_render_default(col)}")
    extra = sorted(set(found) - set(table.columns.keys()))
    if extra:
        problems.append(f"unexpected column(s) {extra}")
    want_pk = [c.name for c in table.primary_key.columns]
    if list(pk) != want_pk:
        problems.append(f"primary key is {list(pk)}, expected {want_pk}")
    return problems


def type_problem(backend: str, expected: sa.types.TypeEngine[Any], found: sa.types.TypeEngine[Any]) -> str | None:
    """None when a column reflected as ``found`` holds what Tessera stores in a
    column mapped as ``expected`` and compares it the way Tessera relies on;
    otherwise what is expected instead (for an error message)."""
    mysql_like = backend in _MYSQL
    if isinstance(expected, sa.Integer):
        if backend == "sqlite":  # any type with INTEGER affinity stores 64-bit integers
            ok = isinstance(found, sa.Integer)
        elif isinstance(expected, sa.BigInteger):
            ok = isinstance(found, sa.BigInteger)
        else:
            ok = isinstance(found, sa.Integer)
        return None if ok else expected_type(backend, expected)
    if isinstance(expected, sa.DateTime):
        ok = isinstance(found, sa.DateTime) or (backend == "sqlite" and isinstance(found, sa.String))
        return None if ok else expected_type(backend, expected)
    if isinstance(expected, (ExactString, sa.String)):
        length = expected.length
        if isinstance(expected, ExactString) and mysql_like:
            # byte-exact comparisons: VARBINARY (BINARY pads with zero bytes) or a BLOB type
            if isinstance(found, sa.VARBINARY):
                ok = found.length is None or length is None or found.length >= length
            else:
                ok = type(found).__name__ in ("BLOB", "MEDIUMBLOB", "LONGBLOB")
            return None if ok else expected_type(backend, expected)
        if not isinstance(found, sa.String) or isinstance(found, (sa.CHAR, sa.NCHAR)) or isinstance(found, sa.Enum):
            return expected_type(backend, expected)
        if backend == "sqlite":  # TEXT affinity; SQLite does not enforce declared lengths
            return None
        if length is not None and found.length is not None and found.length < length:
            return expected_type(backend, expected)
        return None
    return None if type(found) is type(expected) else expected_type(backend, expected)  # pragma: no cover


def expected_type(backend: str, expected: sa.types.TypeEngine[Any]) -> str:
    """How to declare a column of type ``expected`` on ``backend`` (for messages)."""
    if isinstance(expected, sa.Integer):
        if backend == "sqlite":
            return "an integer type (INTEGER or BIGINT)"
        return "BIGINT" if isinstance(expected, sa.BigInteger) else "an integer type"
    if isinstance(expected, sa.DateTime):
        return "a timestamp type (TIMESTAMP WITH TIME ZONE / DATETIME)"
    length = getattr(expected, "length", None)
    if isinstance(expected, ExactString) and backend in _MYSQL:
        return f"VARBINARY({length}) (byte-exact: the default collations ignore case and trailing spaces)"
    if backend == "sqlite":
        return f"a text type (VARCHAR({length}) or TEXT)"
    return f"VARCHAR({length}) or TEXT" if length else "a text type"


def render_type(found: sa.types.TypeEngine[Any]) -> str:
    """A reflected type as SQL (``VARCHAR(32)``), or its class name."""
    try:
        text = str(found)
    except Exception:  # noqa: BLE001 - types that do not compile on the default dialect
        text = ""
    if not text or text == "NULL":
        return "untyped" if isinstance(found, sa.types.NullType) else type(found).__name__
    return text


def _render_default(col: sa.Column[Any]) -> str:
    arg = getattr(col.server_default, "arg", None)
    return "CURRENT_TIMESTAMP" if arg is not None and "now" in str(arg).lower() else str(arg)

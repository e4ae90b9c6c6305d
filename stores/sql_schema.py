"""Tessera's SQL manifest-store table: the typed mapping and its statements.

The table is created and upgraded only by the Alembic migrations in
``migrations/`` (revision 0001 mirrors :class:`ManifestVersionRow`; a test
checks that autogenerate finds no difference).  The statements are built once;
SQLAlchemy caches their compiled form per dialect.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from .manifest_checks import MAX_KEY_BYTES

TABLE_NAME = "tessera_manifest_versions"
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


_T = ManifestVersionRow.__table__  # type: ignore[attr-defined]
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
GET = sa.select(*RECORD_COLUMNS).where(_T.c.table_hash == sa.bindparam("h"), _T.c.version == sa.bindparam("v"))
LATEST = sa.select(*RECORD_COLUMNS).where(_T.c.table_hash == sa.bindparam("h")).order_by(_T.c.version.desc()).limit(1)
AFTER = (
    sa.select(*RECORD_COLUMNS)
    .where(_T.c.table_hash == sa.bindparam("h"), _T.c.version > sa.bindparam("v"))
    .order_by(_T.c.version.asc())
)
DELETE = sa.delete(_T).where(_T.c.table_hash == sa.bindparam("h"))


def table_hash(table_key: str) -> str:
    """The primary-key column derived from a table key."""
    return hashlib.sha256(table_key.encode("utf-8")).hexdigest()

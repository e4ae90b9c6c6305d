"""Manifest store table: one row per (table, version).

Revision ID: 0001_manifest_versions
Revises:
Create Date: 2026-11-22

The primary key is (table_hash, version), where table_hash is the SHA-256 hex
digest of the full table key: MySQL/MariaDB cannot index a long VARCHAR, and a
fixed 64-character key keeps the index small everywhere.  The full key is kept
in table_key.

On MySQL/MariaDB the text columns are VARBINARY so that comparisons
(``path = :staged``, ``incarnation <> :inc``) are byte for byte: the default
collations there ignore case and trailing spaces.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision: str = "0001_manifest_versions"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "tessera_manifest_versions"


def _text(length: int) -> sa.types.TypeEngine:
    return sa.String(length).with_variant(mysql.VARBINARY(length), "mysql", "mariadb")


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("table_hash", _text(64), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("table_key", _text(2048), nullable=False),
        sa.Column("path", _text(2048), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("transaction_uuid", _text(64), nullable=False),
        sa.Column("incarnation", _text(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("table_hash", "version", name="pk_tessera_manifest_versions"),
    )


def downgrade() -> None:
    op.drop_table(TABLE)

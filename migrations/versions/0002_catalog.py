"""Catalog tables: namespaces and tables.

Revision ID: 0002_catalog
Revises: 0001_manifest_versions
Create Date: 2026-11-22

Namespaces are dotted names ("sales.eu") with JSON properties; a table row
maps (namespace, name) to its location and its commit coordinator
("native", "catalog" for the catalog database's own manifest store, or a
store URL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_catalog"
down_revision: str | Sequence[str] | None = "0001_manifest_versions"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tessera_namespaces",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("properties", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "tessera_tables",
        sa.Column("namespace", sa.String(255), primary_key=True),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("uri", sa.String(1024), nullable=False),
        sa.Column("commit_store", sa.String(1024), nullable=False),
        sa.Column("properties", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tessera_tables")
    op.drop_table("tessera_namespaces")

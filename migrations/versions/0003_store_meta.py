"""The store's own facts: its id.

Revision ID: 0003_store_meta
Revises: 0002_catalog
Create Date: 2026-11-23

``tessera_store_meta`` maps a name to a value; the row ``store_id`` holds a
random id (uuid4 hex) that tables record as their commit coordinator, so the
same database reached through another address is recognised and an empty
database answering at a recorded address is not.

An online upgrade creates the id row here (the migration lock serialises
concurrent upgrades).  Offline (``--sql``) scripts do not: one script applied
to several databases would give them all the same id; the store then creates
the row on first use (an insert that only one process can win).

Downgrading below this revision drops the id: upgrading again creates a new
one, and tables that recorded the old id will refuse this store.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

revision: str = "0003_store_meta"
down_revision: str | Sequence[str] | None = "0002_catalog"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "tessera_store_meta"


def upgrade() -> None:
    meta = op.create_table(
        TABLE,
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.String(255), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_tessera_store_meta"),
    )
    if not context.is_offline_mode():
        op.bulk_insert(meta, [{"name": "store_id", "value": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table(TABLE)

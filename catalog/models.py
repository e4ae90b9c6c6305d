"""SQL rows of the catalog (SQLAlchemy 2.0 typed mappings).

The schema is created and upgraded by the Alembic migrations in
``migrations/``; these classes only map it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import DateTime, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class CatalogBase(DeclarativeBase):
    pass


class NamespaceRow(CatalogBase):
    __tablename__ = "tessera_namespaces"

    # dotted name, e.g. "sales.eu"
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    properties: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class TableRow(CatalogBase):
    __tablename__ = "tessera_tables"

    namespace: Mapped[str] = mapped_column(String(255), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    uri: Mapped[str] = mapped_column(String(1024))
    # "native", "catalog" (the catalog database's manifest store) or a store URL
    commit_store: Mapped[str] = mapped_column(String(1024), default="native")
    properties: Mapped[str] = mapped_column(Text, default="{}")
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))

"""A table: ``Table`` (open, create, time travel, one line per operation) and
the modules its operations live in, each taking a :class:`TableSnapshot`.

See ARCHITECTURE.md ("A table's operations") for which module does what."""

from .table import Data, Table

__all__ = ["Data", "Table"]

"""The named statements about the database's own health (PostgreSQL only: postgresql_health.py), as
``queuelog.ops.db_health`` calls them. Re-exported by ``queuelog.sql``, which callers use."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Connection

from .runner import run
from .values import HeldTransaction, TableHealth


def table_health(conn: Connection, tables: Sequence[str]) -> list[TableHealth]:
    """TABLE_HEALTH: the dead rows and the size on disk of each of ``tables``, by name."""
    return run(conn, "TABLE_HEALTH", {"tables": list(tables)}, make=TableHealth, times_at=())


def oldest_transaction(conn: Connection) -> HeldTransaction | None:
    """OLDEST_TRANSACTION: the transaction of another session holding back vacuum longest, or None."""
    rows = run(conn, "OLDEST_TRANSACTION", {}, make=HeldTransaction, times_at=())
    return rows[0] if rows else None

"""The database's health on PostgreSQL, for years of running: what vacuum has left to do, and what stops it.

A queue deletes and updates rows all day; PostgreSQL keeps each old version of a row until vacuum removes
it, and vacuum may remove one only once no open transaction could still see it. One session left "idle in
transaction" (a console, a report, a stuck client) therefore holds back vacuum in every table: dead rows
pile up, tables and indexes grow, and claims, which walk the pending jobs, slow down.

- ``families``: the gauges ``/metrics`` adds on PostgreSQL (``queuelog_db_dead_tuples``,
  ``queuelog_db_table_bytes`` per table, ``queuelog_db_oldest_transaction_seconds``), read by the scrape in
  its own connection (metrics.DatabaseCollector). On SQLite there are none: not zeros, absent.
- ``long_transaction``: that oldest transaction, when it has been open longer than DB_XACT_WARN_SECONDS,
  for the dashboard's warning and ``/readyz``'s ``warnings``; None on SQLite and when there is none.

The tables are the models' (``db.metadata``): the app's own. ``alembic_version`` is not among them: one row,
written only by a migration, it has nothing to show.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from flask import current_app
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.engine import Connection

from .. import sql
from ..database.transactions import single_statement_read
from ..extensions import db


class Health(NamedTuple):
    """What one scrape read: each app table's dead rows and size, and the oldest transaction holding vacuum."""

    tables: list[sql.TableHealth]
    oldest: sql.HeldTransaction | None


def read(conn: Connection) -> Health:
    """Both reads, on ``conn`` (PostgreSQL): each one round trip over the catalog, no table row read."""
    return Health(sql.table_health(conn, sorted(db.metadata.tables)), sql.oldest_transaction(conn))


def families(health: Health) -> Iterator[GaugeMetricFamily]:
    """The three gauge families of ``health``."""
    dead = GaugeMetricFamily(
        "queuelog_db_dead_tuples",
        "Dead rows in each of queuelog's tables that vacuum has not removed yet, as PostgreSQL's statistics "
        "last counted them (pg_stat_user_tables.n_dead_tup). PostgreSQL only.",
        labels=["table"],
    )
    size = GaugeMetricFamily(
        "queuelog_db_table_bytes",
        "Size on disk of each of queuelog's tables with its indexes and TOAST, in bytes "
        "(pg_total_relation_size). PostgreSQL only.",
        labels=["table"],
    )
    for table in health.tables:
        dead.add_metric([table.table], table.dead_tuples)
        size.add_metric([table.table], table.total_bytes)
    yield dead
    yield size
    yield GaugeMetricFamily(
        "queuelog_db_oldest_transaction_seconds",
        "Seconds the oldest transaction holding back vacuum in queuelog's database has been open (another "
        "session's snapshot or transaction id, or a prepared transaction); 0 when none. While it stays open, "
        "dead rows pile up in every table. PostgreSQL only.",
        value=health.oldest.seconds if health.oldest else 0.0,
    )


def long_transaction() -> sql.HeldTransaction | None:
    """The oldest transaction holding back vacuum, if it has been open longer than DB_XACT_WARN_SECONDS."""
    if db.engine.dialect.name != "postgresql":
        return None
    with single_statement_read() as conn:
        oldest = sql.oldest_transaction(conn)
    if oldest is None or oldest.seconds <= current_app.config["DB_XACT_WARN_SECONDS"]:
        return None
    return oldest


def readiness_warning(held: sql.HeldTransaction) -> dict:
    """``held`` as an entry of /readyz's ``warnings``."""
    return {
        "kind": "long_transaction",
        "seconds": round(held.seconds, 1),
        "application_name": held.application_name,
        "client_addr": held.client_addr,
        "pid": held.pid,
        "prepared_gid": held.prepared_gid,
    }

"""What PostgreSQL's statistics counted for a table, once the sessions that did the work have reported it.

A session reports its counts to the statistics as it ends, so each reader here closes the app's pooled
connections and waits until none of its sessions (they say no application_name) is left, but for sessions idle
long enough to have reported already. Used by the
heartbeat and held-snapshot tests and by ``python -m bench.heartbeats``.
"""

from __future__ import annotations

import time

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

READER_NAME = "queuelog-stats-reader"
#: A session idle this long has reported its counts (PostgreSQL 15 reports an idle session's within a second,
#: or, when the statistics are busy, within ten): one left open by an earlier test's app is not waited for.
REPORTED_WHEN_IDLE_SECONDS = 15
_APP_SESSIONS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
    " AND application_name = '' AND backend_type = 'client backend'"
    f" AND (state IS DISTINCT FROM 'idle' OR state_change > now() - interval '{REPORTED_WHEN_IDLE_SECONDS} seconds')"
)
# A partitioned table (jobs, job_events: docs/storage.md) counts what its partitions counted.
_TABLE_AND_PARTITIONS = (
    "relid IN (SELECT to_regclass(:table) UNION SELECT relid FROM pg_partition_tree(to_regclass(:table)))"
)
_UPDATES = text(
    f"SELECT sum(n_tup_upd)::bigint, sum(n_tup_hot_upd)::bigint FROM pg_stat_user_tables WHERE {_TABLE_AND_PARTITIONS}"
)
_WRITES = text(
    "SELECT sum(n_tup_ins)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_del)::bigint"
    f" FROM pg_stat_user_tables WHERE {_TABLE_AND_PARTITIONS}"
)
_ENTRIES_READ = text(f"SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE {_TABLE_AND_PARTITIONS}")
_SCANS_BY_INDEX = text(f"SELECT indexrelname, idx_scan FROM pg_stat_user_indexes WHERE {_TABLE_AND_PARTITIONS}")


def updates_of(app_engine: Engine, table: str = "jobs", timeout: float = 30.0) -> tuple[int, int]:
    """(rows updated, of them HOT) in ``table`` since the server started, with every update the app made so far.

    The caller ends what holds a connection of ``app_engine`` first (an ORM session); the pool's are closed here.
    """
    return tuple(_once_reported(app_engine, _UPDATES, table, timeout)[0])


def writes_of(app_engine: Engine, table: str, timeout: float = 30.0) -> tuple[int, int, int]:
    """(rows inserted, updated, deleted) in ``table`` since the server started, with every write the app made so far."""
    return tuple(_once_reported(app_engine, _WRITES, table, timeout)[0])


def index_entries_read(app_engine: Engine, table: str = "jobs", timeout: float = 30.0) -> int:
    """Index entries that scans of ``table``'s indexes have read since the server started, live or dead: an entry
    of a row version that a held snapshot keeps is read, and its row looked at, before it is passed over."""
    return int(_once_reported(app_engine, _ENTRIES_READ, table, timeout)[0][0])


def scans_by_index(app_engine: Engine, table: str = "jobs", timeout: float = 30.0) -> dict[str, int]:
    """Scans of each of ``table``'s indexes since the server started, by the index's name."""
    return dict(_once_reported(app_engine, _SCANS_BY_INDEX, table, timeout))


def _once_reported(app_engine: Engine, query, table: str, timeout: float):
    app_engine.dispose()
    reader = create_engine(app_engine.url, connect_args={"application_name": READER_NAME})
    deadline = time.monotonic() + timeout
    try:
        while True:
            with reader.connect() as conn:
                left = conn.execute(_APP_SESSIONS).scalar_one()
                if not left:
                    return conn.execute(query, {"table": table}).all()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{left} sessions of the app still open after {timeout} s")
            time.sleep(0.05)
    finally:
        reader.dispose()

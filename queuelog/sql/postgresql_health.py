"""PostgreSQL's statements about the database's own health (ops/db_health.py): what vacuum has left to do and
what keeps it from doing it. SQLite has no such thing to ask, so these two are PostgreSQL's alone;
postgresql.py names them with the rest (the runner looks them up there).

Both read the catalog and the statistics views only, never a row of the app's tables, in one round trip each.
"""

from __future__ import annotations

#: Each of the app's tables (``tables``: names resolved on the search path, as the app's own queries resolve
#: them): its dead rows as the statistics last counted them (they arrive a moment after the write that made
#: them), and its size on disk with its indexes and TOAST. A partitioned table (``jobs``, its ``jobs_live``
#: and ``jobs_done``, ``job_events``) counts the sum of its partitions, which hold its rows. pg_total_relation_size
#: takes each table's ACCESS SHARE lock, as any read of it does: it waits only behind what would stop the
#: claim too (VACUUM FULL, a migration's ALTER TABLE).
TABLE_HEALTH = (
    "SELECT t.name, sum(s.n_dead_tup)::bigint, sum(pg_total_relation_size(s.relid))::bigint"
    " FROM unnest(%(tables)s::text[]) AS t(name)"
    " CROSS JOIN LATERAL (SELECT to_regclass(t.name) UNION"
    " SELECT relid FROM pg_partition_tree(to_regclass(t.name)) WHERE isleaf) AS p(relid)"
    " JOIN pg_stat_user_tables s ON s.relid = p.relid GROUP BY t.name ORDER BY t.name"
)

#: The transaction of the app's database that has been open longest while holding a snapshot or a
#: transaction id (backend_xmin, backend_xid): vacuum cannot remove a row that any of them might still see,
#: in any table. Other databases' sessions do not hold back this one's tables. The scraping session itself is
#: left out, as are autovacuum and other background processes (a VACUUM's own snapshot holds back no other
#: vacuum). A prepared transaction holds the horizon as long as nobody commits or rolls it back, and has no
#: session left to end: counted from when it was prepared. No row: nothing holds it back.
#: A session of another role shows its xact_start only to a role with pg_read_all_stats (or a superuser):
#: without it, such a session cannot be timed and is left out (docs/operations.md says so).
OLDEST_TRANSACTION = """
SELECT seconds, pid, application_name, client_addr, gid FROM (
  SELECT extract(epoch FROM clock_timestamp() - xact_start)::float8 AS seconds, pid, application_name,
         host(client_addr) AS client_addr, NULL::text AS gid
    FROM pg_stat_activity
   WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
     AND (backend_xid IS NOT NULL OR backend_xmin IS NOT NULL) AND xact_start IS NOT NULL
  UNION ALL
  SELECT extract(epoch FROM clock_timestamp() - prepared)::float8, NULL, NULL, NULL, gid
    FROM pg_prepared_xacts
   WHERE database = current_database()
) held
ORDER BY seconds DESC
LIMIT 1"""

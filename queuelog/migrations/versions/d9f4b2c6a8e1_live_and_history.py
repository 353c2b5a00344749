"""Live jobs apart from history (PostgreSQL): ``jobs`` and ``job_events`` become partitioned tables

docs/storage.md says why this layout and how retention uses it. In short:

- ``jobs`` is partitioned by status. ``jobs_live`` holds the waiting, pending and running jobs: the enqueue,
  the claim, heartbeats and the finishing statement read and write only it (and its partial indexes). A
  job that finishes moves, in the statement that finishes it, into ``jobs_done``, which is partitioned by
  ``updated_at`` (when it finished) into one table a day; an admin's retry moves it back.
- ``job_events`` is partitioned by ``bucket`` (the day its row was written) into one table a day.
- Retention drops whole days of both (ops/retention.py), so history never leaves dead rows behind, in the
  live table or anywhere else.

No history is copied. The old tables become the first partitions as they are, with their indexes:
``jobs_before`` (every finished job up to now) and ``job_events_before``. Only the live jobs move, into
``jobs_live``. The one long step is PostgreSQL checking that ``jobs_before`` holds finished jobs only
(a read of the table while it is locked); docs/storage.md gives its time per million rows.

The foreign keys to ``jobs(id)`` go: PostgreSQL cannot point one at a table partitioned on another column.
What their ON DELETE CASCADE did, deleting and purging now do themselves (sql/common.py, FORGET_*).

SQLite keeps its one ``jobs`` table: nothing changes there.

Revision ID: d9f4b2c6a8e1
Revises: c7e2b5d8a4f1
Create Date: 2026-12-06 03:00:00

"""

from datetime import timedelta

from alembic import op

from queuelog.states import FINAL, JobStatus, names

revision = "d9f4b2c6a8e1"
down_revision = "c7e2b5d8a4f1"
branch_labels = None
depends_on = None


def _listed(statuses) -> str:
    return ", ".join(f"'{name}'" for name in names(statuses))


LIVE = _listed(set(JobStatus) - FINAL)
FINISHED = _listed(FINAL)

#: The live jobs' indexes, under the names ``jobs`` gave them (models/jobs.py says what each is for): the claim's
#: partial indexes, and the unique keys (PostgreSQL holds a unique index to one partition; sql/enqueueing.py
#: says how an idempotency key stays unique across history).
LIVE_INDEXES = (
    "CREATE UNIQUE INDEX uq_jobs_producer_idempotency ON jobs_live (producer_key_id, idempotency_key)",
    "CREATE INDEX ix_jobs_claim_order ON jobs_live (priority DESC, fair_tag, id) WHERE status = 'pending'",
    "CREATE INDEX ix_jobs_type_claim_order ON jobs_live (type, priority DESC, fair_tag, id) WHERE status = 'pending'",
    "CREATE INDEX ix_jobs_backlog_producer ON jobs_live (producer_key_id) WHERE status IN ('waiting', 'pending')",
    "CREATE INDEX ix_jobs_pending_expiry ON jobs_live (expires_at) WHERE status = 'pending' AND expires_at IS NOT NULL",
    "CREATE UNIQUE INDEX uq_jobs_schedule_tick ON jobs_live (schedule, scheduled_for)",
)

#: Indexes of every job, live or finished: made on ``jobs`` (so on each partition, and on each day of
#: history as it is made). Each is defined as ``jobs`` had it, so an attached ``jobs_before`` keeps its own.
SHARED_INDEXES = (
    "CREATE INDEX ix_jobs_key_turns ON jobs (concurrency_key, priority, fair_tag)",
    "CREATE INDEX ix_jobs_status_id ON jobs (status, id)",
    "CREATE INDEX ix_jobs_type_status_priority ON jobs (type, status, priority, run_at)",
    "CREATE INDEX ix_jobs_producer_id ON jobs (producer_key_id, id)",
    "CREATE INDEX ix_jobs_worker_status ON jobs (worker_id, status)",
    "CREATE INDEX ix_jobs_status_updated ON jobs (status, updated_at)",
    "CREATE INDEX ix_jobs_error_groups ON jobs (status, error_group, type, updated_at, id)"
    " WHERE error_group IS NOT NULL",
    "CREATE INDEX ix_jobs_process_status ON jobs (process_id, status, updated_at) WHERE process_id IS NOT NULL",
)

#: The live table's storage settings (a4c8e2f6b1d3 set them on ``jobs``; docs/storage.md says why each).
LIVE_STORAGE = (
    "fillfactor = 80, autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 500,"
    " autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 1000,"
    " autovacuum_analyze_scale_factor = 0.0, autovacuum_analyze_threshold = 1000"
)


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("LOCK TABLE jobs, job_events, job_dependencies, unique_slots IN ACCESS EXCLUSIVE MODE")
    _drop_foreign_keys_to_jobs()
    bound = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT greatest(now() AT TIME ZONE 'utc', (SELECT max(updated_at) FROM jobs) + interval '1 microsecond')"
        )
        .scalar()
    )
    _partition_jobs(bound)
    _partition_events(bound)
    _first_days(bound)


def _drop_foreign_keys_to_jobs():
    keys = op.get_bind().exec_driver_sql(
        "SELECT conrelid::regclass::text, conname FROM pg_constraint"
        " WHERE contype = 'f' AND confrelid = 'jobs'::regclass"
    )
    for table, name in keys.all():
        op.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')


def _set_aside(table: str) -> None:
    """Rename ``table`` to ``<table>_before`` and its indexes and constraints likewise: their names go to the new
    table's."""
    bind = op.get_bind()
    indexes = bind.exec_driver_sql(
        "SELECT i.relname, c.conname IS NOT NULL FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid"
        " LEFT JOIN pg_constraint c ON c.conindid = x.indexrelid AND c.conrelid = x.indrelid"
        f" WHERE x.indrelid = '{table}'::regclass"
    ).all()
    for name, is_constraint in indexes:
        if is_constraint:
            op.execute(f'ALTER TABLE {table} RENAME CONSTRAINT "{name}" TO "{name}_before"')
        else:
            op.execute(f'ALTER INDEX "{name}" RENAME TO "{name}_before"')
    op.execute(f"ALTER TABLE {table} RENAME TO {table}_before")


def _attach_or_drop(parent: str, table: str, upper: str) -> None:
    """``table`` (set aside) becomes ``parent``'s first partition, up to ``upper``; an empty one (a new
    database) is dropped instead."""
    if op.get_bind().exec_driver_sql(f"SELECT EXISTS (SELECT 1 FROM {table})").scalar():
        op.execute(f"ALTER TABLE {parent} ATTACH PARTITION {table} FOR VALUES FROM (MINVALUE) TO ({upper})")
    else:
        op.execute(f"DROP TABLE {table}")


def _partition_jobs(bound):
    _set_aside("jobs")
    op.execute(
        "CREATE TABLE jobs (LIKE jobs_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY LIST (status)"
    )
    op.execute("ALTER SEQUENCE jobs_id_seq OWNED BY jobs.id")
    op.execute(f"CREATE TABLE jobs_live PARTITION OF jobs FOR VALUES IN ({LIVE}) WITH ({LIVE_STORAGE})")
    op.execute("ALTER TABLE jobs_live ADD PRIMARY KEY (id)")
    for statement in LIVE_INDEXES:
        op.execute(statement)
    op.execute(f"CREATE TABLE jobs_done PARTITION OF jobs FOR VALUES IN ({FINISHED}) PARTITION BY RANGE (updated_at)")
    for statement in SHARED_INDEXES:
        # The live table's own copy first, under a name that says what it is (claims' plans show it): the
        # index on jobs then takes it in rather than making one under a name of PostgreSQL's choosing.
        name = statement.split()[2]
        op.execute(statement.replace(f"{name} ON jobs ", f"{name}_live ON jobs_live ", 1))
        op.execute(statement)
    op.execute(
        "ALTER TABLE jobs ADD CONSTRAINT jobs_producer_key_id_fkey"
        " FOREIGN KEY (producer_key_id) REFERENCES api_keys (id)"
    )
    op.execute("CREATE TABLE jobs_done_default PARTITION OF jobs_done DEFAULT")
    op.execute("ALTER TABLE jobs_done_default ADD PRIMARY KEY (id)")
    op.execute("CREATE INDEX ix_jobs_done_default_idempotency ON jobs_done_default (producer_key_id, idempotency_key)")
    op.execute("CREATE INDEX ix_jobs_done_default_schedule_tick ON jobs_done_default (schedule, scheduled_for)")
    # The live jobs move; what stays is history, and becomes its first day as it is.
    op.execute(f"INSERT INTO jobs SELECT * FROM jobs_before WHERE status IN ({LIVE})")
    op.execute(f"DELETE FROM jobs_before WHERE status IN ({LIVE})")
    # History is written once and read: the live table's settings (a4c8e2f6b1d3) have no use there.
    op.execute(
        "ALTER TABLE jobs_before RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,"
        " autovacuum_analyze_scale_factor)"
    )
    _attach_or_drop("jobs_done", "jobs_before", _literal(bound))


def _partition_events(bound):
    _set_aside("job_events")
    # A constant default: PostgreSQL adds the column without rewriting the table.
    op.execute(f"ALTER TABLE job_events_before ADD COLUMN bucket timestamp NOT NULL DEFAULT {_literal(bound)}")
    op.execute(
        "CREATE TABLE job_events (LIKE job_events_before INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        " PARTITION BY RANGE (bucket)"
    )
    op.execute("ALTER TABLE job_events ALTER COLUMN bucket SET DEFAULT (now() AT TIME ZONE 'utc')")
    op.execute("ALTER SEQUENCE job_events_id_seq OWNED BY job_events.id")
    op.execute("CREATE INDEX ix_job_events_job_id ON job_events (job_id, id)")
    op.execute("CREATE INDEX ix_job_events_event_at ON job_events (event, at)")
    op.execute("CREATE TABLE job_events_default PARTITION OF job_events DEFAULT")
    op.execute("ALTER TABLE job_events_default ADD PRIMARY KEY (id)")
    op.execute("ALTER TABLE job_events_before ALTER COLUMN bucket DROP DEFAULT")
    _attach_or_drop("job_events", "job_events_before", _literal_after(bound))


#: Days made at once, so that history has its days before the first retention step (ops/retention.py makes the
#: next ones as they come): the rest of today from ``bound``, and the next three.
FIRST_DAYS = 4


def _first_days(bound) -> None:
    lower = bound
    midnight = bound.replace(hour=0, minute=0, second=0, microsecond=0)
    for day in range(1, FIRST_DAYS + 1):
        upper = midnight + timedelta(days=day)
        for parent, extra in (("jobs_done", _JOB_DAY_EXTRA), ("job_events", ())):
            name = (
                f"{parent}_{lower:%Y%m%d}"
                if lower == lower.replace(hour=0, minute=0, second=0, microsecond=0)
                else f"{parent}_{lower:%Y%m%d_%H%M%S}"
            )
            first = _literal_after(lower) if parent == "job_events" and day == 1 else _literal(lower)
            op.execute(
                f"CREATE TABLE {name} PARTITION OF {parent} FOR VALUES FROM ({first}) TO ({_literal(upper)})"
                " WITH (autovacuum_vacuum_insert_scale_factor = 0.02)"
            )
            op.execute(f"ALTER TABLE {name} ADD PRIMARY KEY (id)")
            for statement in extra:
                op.execute(statement.format(name=name))
        lower = upper


_JOB_DAY_EXTRA = (
    "CREATE INDEX {name}_idempotency ON {name} (producer_key_id, idempotency_key)",
    "CREATE INDEX {name}_schedule_tick ON {name} (schedule, scheduled_for)",
)


def _literal(moment) -> str:
    return f"'{moment.isoformat(sep=' ')}'::timestamp"


def _literal_after(moment) -> str:
    return f"('{moment.isoformat(sep=' ')}'::timestamp + interval '1 microsecond')"


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    raise NotImplementedError(
        "d9f4b2c6a8e1 cannot be undone in place: restore the backup taken before upgrading (docs/storage.md)"
    )

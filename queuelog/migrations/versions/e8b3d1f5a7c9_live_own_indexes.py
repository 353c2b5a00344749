"""The live table's own copies of two indexes of every job (PostgreSQL): ix_jobs_producer_id, ix_jobs_status_id

Both hold ``id`` after their first column, so a statement that names its jobs by id can walk either one whole,
checking each entry's id, instead of seeking the primary key. The planner does so when it believes the live
table empty: autovacuum analyzes ``jobs_live`` at moments when it holds only a handful of jobs, and then a walk
of either index costs, on paper, as little as a seek. While a long transaction holds vacuum back, each such walk
reads an entry of every job run since it began (docs/operations.md).

On ``jobs_live`` each becomes partial, on a condition that the lists and pages which use it state, and that a
write naming its jobs by id does not: such a write can no longer use it at all. History (``jobs_done`` and its
days) keeps the indexes it has, untouched.

An index made on ``jobs`` must be the same on every partition, so the two leave ``jobs``: ``jobs_done`` is
detached meanwhile, which keeps its own. The attach that follows need not read history to know that it holds
only finished jobs: a check constraint says so, validated first without blocking writes. The rest of the step
holds ``jobs`` locked for as long as it takes to index the live jobs.

Revision ID: e8b3d1f5a7c9
Revises: a3c5e7f9b1d2
Create Date: 2026-12-06 22:00:00

"""

from contextlib import contextmanager

from alembic import op

from queuelog.states import FINAL, LIVE, names

revision = "e8b3d1f5a7c9"
down_revision = "a3c5e7f9b1d2"  # after closed_day_sums
branch_labels = None
depends_on = None


def _listed(statuses) -> str:
    return ", ".join(f"'{name}'" for name in names(statuses))


FINISHED = _listed(FINAL)
CHECK = "jobs_done_finished"

#: (the index on ``jobs``, its definition there, and the live table's own). A producer's jobs are listed by
#: ``producer_key_id = …``, jobs of some statuses by ``status IN (…)`` or ``=``: each implies its condition.
OWN_INDEXES = (
    (
        "ix_jobs_producer_id",
        "(producer_key_id, id)",
        "(producer_key_id, id) WHERE producer_key_id IS NOT NULL",
    ),
    ("ix_jobs_status_id", "(status, id)", f"(status, id) WHERE status IN ({_listed(LIVE)})"),
)


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    _history_checked()
    with _history_detached():
        for name, _shared, own in OWN_INDEXES:
            op.execute(f"DROP INDEX {name}")
            op.execute(f"CREATE INDEX {name}_live ON jobs_live {own}")


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    with _history_detached():
        for name, shared, _own in OWN_INDEXES:
            op.execute(f"DROP INDEX {name}_live")
            op.execute(f"CREATE INDEX {name}_live ON jobs_live {shared}")
            op.execute(f"CREATE INDEX {name} ON jobs {shared}")  # takes in the live table's, just made
    op.execute(f"ALTER TABLE jobs_done DROP CONSTRAINT {CHECK}")


def _history_checked() -> None:
    """The check constraint, proven over history outside the migration's transaction: VALIDATE reads every day
    under a lock that lets the queue write meanwhile. A run of this step that stopped after either part is taken
    up where it stopped."""
    validated = op.get_bind().exec_driver_sql(
        f"SELECT convalidated FROM pg_constraint WHERE conname = '{CHECK}' AND conrelid = 'jobs_done'::regclass"
    )
    state = validated.scalar()
    if state:
        return
    with op.get_context().autocommit_block():
        if state is None:
            op.execute(f"ALTER TABLE jobs_done ADD CONSTRAINT {CHECK} CHECK (status IN ({FINISHED})) NOT VALID")
        op.execute(f"ALTER TABLE jobs_done VALIDATE CONSTRAINT {CHECK}")


@contextmanager
def _history_detached():
    """``jobs_done`` out of ``jobs`` while the indexes on ``jobs`` change, so that they reach only the live table;
    ``jobs`` locked first, as every write takes it, before any partition."""
    op.execute("LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE")
    op.execute("ALTER TABLE jobs DETACH PARTITION jobs_done")
    yield
    op.execute(f"ALTER TABLE jobs ATTACH PARTITION jobs_done FOR VALUES IN ({FINISHED})")

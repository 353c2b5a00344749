"""error groups: each job's error cause (masked first line) stored and indexed, for the Top errors page

jobs.error_group holds the error's group (queuelog/error_groups.py), written with the error whenever a
failure is recorded; ix_jobs_error_groups (status, error_group, type, updated_at, id), partial on jobs with a
group, lets the page group failed jobs without reading their errors. Jobs that already carry an error are
given their group here, a batch of ids at a time.

Revision ID: c4e19a7d2b61
Revises: c3d9e7a41b52
Create Date: 2026-12-03 09:00:00

"""

import sqlalchemy as sa
from alembic import op

from queuelog.core.error_groups import error_group

# revision identifiers, used by Alembic.
revision = "c4e19a7d2b61"
down_revision = "c3d9e7a41b52"
branch_labels = None
depends_on = None

HAS_GROUP = sa.text("error_group IS NOT NULL")
BATCH = 5000


def upgrade():
    # Plain ALTER TABLE, not a batch: on SQLite a batch would copy the jobs table.
    op.add_column("jobs", sa.Column("error_group", sa.String(length=200), nullable=True))
    _backfill(op.get_bind())
    op.create_index(
        "ix_jobs_error_groups",
        "jobs",
        ["status", "error_group", "type", "updated_at", "id"],
        unique=False,
        sqlite_where=HAS_GROUP,
        postgresql_where=HAS_GROUP,
    )


def _backfill(conn) -> None:
    """Every job with an error gets its group, in id order, BATCH jobs per statement."""
    jobs = sa.table("jobs", sa.column("id"), sa.column("error"), sa.column("error_group"))
    last = 0
    while True:
        rows = conn.execute(
            sa.select(jobs.c.id, jobs.c.error)
            .where(jobs.c.id > last, jobs.c.error.is_not(None))
            .order_by(jobs.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        conn.execute(
            jobs.update().where(jobs.c.id == sa.bindparam("job_id")).values(error_group=sa.bindparam("group")),
            [{"job_id": row.id, "group": error_group(row.error)} for row in rows],
        )
        last = rows[-1].id


def downgrade():
    op.drop_index("ix_jobs_error_groups", table_name="jobs")
    op.drop_column("jobs", "error_group")

"""Heartbeats that touch no index, and PostgreSQL storage settings for tables that churn

A heartbeat now writes only heartbeat_at, lease_expires_at and progress (updated_at is the time of the job's
last move). ix_jobs_running_lease was the one index holding any of them: without it PostgreSQL can keep a
heartbeat's new row version on the same page and write no index entry (a HOT update). The reaper reads the
running jobs through ix_jobs_status_id instead.

On PostgreSQL, per-table storage settings (docs/operations.md, "Vacuum-friendly tables", says why for each):
room on the jobs table's pages for those row versions, and autovacuum that starts after a fixed number of dead
rows rather than a fifth of the table, which on a table holding months of finished jobs would be hundreds of
thousands. The settings take a SHARE UPDATE EXCLUSIVE lock, which lets reads and writes go on; fillfactor
applies to pages written from now.

Revision ID: a4c8e2f6b1d3
Revises: f3a1c7e9b2d5
Create Date: 2026-12-05 16:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "a4c8e2f6b1d3"
down_revision = "f3a1c7e9b2d5"
branch_labels = None
depends_on = None

#: The settings as they stand at this revision (a later migration changes them with its own copy).
STORAGE = {
    "jobs": {
        "fillfactor": 80,
        "autovacuum_vacuum_scale_factor": 0.01,
        "autovacuum_vacuum_threshold": 1000,
        "autovacuum_vacuum_insert_scale_factor": 0.02,
        "autovacuum_analyze_scale_factor": 0.02,
    },
    "job_events": {"autovacuum_vacuum_insert_scale_factor": 0.02},
    "type_claims": {"autovacuum_vacuum_scale_factor": 0.0, "autovacuum_vacuum_threshold": 500},
}


def upgrade():
    op.drop_index("ix_jobs_running_lease", table_name="jobs")
    if op.get_bind().dialect.name == "postgresql":
        for table, settings in STORAGE.items():
            listed = ", ".join(f"{name} = {value}" for name, value in settings.items())
            op.execute(f"ALTER TABLE {table} SET ({listed})")


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        for table, settings in STORAGE.items():
            op.execute(f"ALTER TABLE {table} RESET ({', '.join(settings)})")
    op.create_index(
        "ix_jobs_running_lease",
        "jobs",
        ["lease_expires_at"],
        unique=False,
        sqlite_where=sa.text("status = 'running'"),
        postgresql_where=sa.text("status = 'running'"),
    )

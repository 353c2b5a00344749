"""job time limits: dedupe windows (unique_slots), expiry, and run timeouts

Jobs gain unique_key (the dedupe window they hold, if any), expires_at (not claimed by then, never run),
timeout_seconds (how long a run may take) and timeout_at (set by the claim; it caps the lease). The reaper
finds pending jobs past their expires_at with ix_jobs_pending_expiry, a partial index on the jobs that have
one. unique_slots holds one row per (type, unique key): the job that holds its window and when it was
enqueued; its primary key is what makes concurrent enqueues of one key create exactly one job.

Revision ID: c4e2a9d1f7b3
Revises: b7c41e2f9d10
Create Date: 2026-12-03 10:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "c4e2a9d1f7b3"
down_revision = "b7c41e2f9d10"
branch_labels = None
depends_on = None

PENDING_WITH_EXPIRY = sa.text("status = 'pending' AND expires_at IS NOT NULL")


def upgrade():
    # Plain ALTER TABLE, not a batch: on SQLite a batch would copy the jobs table.
    op.add_column("jobs", sa.Column("unique_key", sa.String(length=200), nullable=True))
    op.add_column("jobs", sa.Column("expires_at", sa.DateTime(), nullable=True))
    op.add_column("jobs", sa.Column("timeout_seconds", sa.Integer(), nullable=True))
    op.add_column("jobs", sa.Column("timeout_at", sa.DateTime(), nullable=True))
    op.create_index(
        "ix_jobs_pending_expiry",
        "jobs",
        ["expires_at"],
        unique=False,
        sqlite_where=PENDING_WITH_EXPIRY,
        postgresql_where=PENDING_WITH_EXPIRY,
    )
    op.create_table(
        "unique_slots",
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("unique_key", sa.String(length=200), nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("type", "unique_key"),
    )
    op.create_index("ix_unique_slots_job_id", "unique_slots", ["job_id"], unique=False)


def downgrade():
    op.drop_index("ix_unique_slots_job_id", table_name="unique_slots")
    op.drop_table("unique_slots")
    op.drop_index("ix_jobs_pending_expiry", table_name="jobs")
    op.drop_column("jobs", "timeout_at")
    op.drop_column("jobs", "timeout_seconds")
    op.drop_column("jobs", "expires_at")
    op.drop_column("jobs", "unique_key")

"""schedules: jobs enqueued on a cron expression or at a fixed interval, exactly once per tick

Jobs get the schedule that enqueued them and the tick they were enqueued for, with a unique index on the
pair so that one tick can never make two jobs.

Revision ID: c4e8a1d2f7b3
Revises: c4e2a9d1f7b3
Create Date: 2026-11-30 18:40:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "c4e8a1d2f7b3"
down_revision = "c4e2a9d1f7b3"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("every_seconds", sa.Integer(), nullable=True),
        sa.Column("timezone", sa.String(length=64), nullable=False),
        sa.Column("job_type", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("catch_up", sa.String(length=8), nullable=False),
        sa.Column("next_run_at", sa.DateTime(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(), nullable=True),
        sa.Column("last_job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_schedules_due", "schedules", ["paused", "next_run_at"], unique=False)
    # Plain ALTER TABLE and CREATE INDEX, not a batch: on SQLite a batch would copy the jobs table.
    op.add_column("jobs", sa.Column("schedule", sa.String(length=100), nullable=True))
    op.add_column("jobs", sa.Column("scheduled_for", sa.DateTime(), nullable=True))
    op.create_index("uq_jobs_schedule_tick", "jobs", ["schedule", "scheduled_for"], unique=True)


def downgrade():
    op.drop_index("uq_jobs_schedule_tick", table_name="jobs")
    op.drop_column("jobs", "scheduled_for")
    op.drop_column("jobs", "schedule")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")

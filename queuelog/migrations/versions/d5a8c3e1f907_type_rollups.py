"""type rollups: per-minute and per-hour counts and wait/run histograms per job type

type_rollups holds, per (span, metric, period, type, bucket, shard), a count folded from job_events by
the rollup step (queuelog/queue/rollups.py; shard is always 0 since the step became the only writer). The
dashboard's chart (last hour, 24 hours, 7 days) and the types page's wait/run percentiles read it by its
primary key, never the jobs.
The rollup step backfills from the events still stored (rollup_marks, the next revision).

Revision ID: d5a8c3e1f907
Revises: d5a7c3e9f1b2
Create Date: 2026-11-30 22:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "d5a8c3e1f907"
down_revision = "d5a7c3e9f1b2"  # after worker_processes
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "type_rollups",
        sa.Column("span", sa.Integer(), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("period", sa.BigInteger(), nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("bucket", sa.Integer(), nullable=False),
        sa.Column("shard", sa.Integer(), nullable=False),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("span", "metric", "period", "type", "bucket", "shard"),
    )


def downgrade():
    op.drop_table("type_rollups")

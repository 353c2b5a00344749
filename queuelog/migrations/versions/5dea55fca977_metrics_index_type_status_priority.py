"""metrics: widen ix_jobs_type_status to (type, status, priority, run_at)

The /metrics gauges count jobs by status × type × priority and find the oldest claimable job per type.
With priority and run_at in the index the count reads the index only (no table rows), and MIN(run_at) for
one (type, 'pending', priority) is a single seek. Everything ix_jobs_type_status served, this serves too.

Revision ID: 5dea55fca977
Revises: 67e517ba2dd3
Create Date: 2026-11-29 12:00:00

"""

from alembic import op

# revision identifiers, used by Alembic.
revision = "5dea55fca977"
down_revision = "67e517ba2dd3"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_type_status_priority", ["type", "status", "priority", "run_at"], unique=False)
        batch_op.drop_index("ix_jobs_type_status")


def downgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index("ix_jobs_type_status", ["type", "status"], unique=False)
        batch_op.drop_index("ix_jobs_type_status_priority")

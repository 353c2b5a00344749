"""max-pending counts waiting jobs too: the partial index of a producer's jobs covers waiting and pending

A key's max-pending quota now counts its waiting jobs (children whose parents have not finished) besides
its pending ones: a waiting job becomes pending without any enqueue, so a quota that let waiting jobs in
uncounted did not bound the pending jobs at all. ix_jobs_pending_producer (pending only) gives way to
ix_jobs_backlog_producer (waiting and pending), which the count reads.

Revision ID: f1c3a5e7b9d2
Revises: f2a7c5e1d9b4
Create Date: 2026-12-05 09:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "f1c3a5e7b9d2"
down_revision = "f2a7c5e1d9b4"  # after unique_scope
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_pending_producer")
        batch_op.create_index(
            "ix_jobs_backlog_producer",
            ["producer_key_id"],
            unique=False,
            sqlite_where=sa.text("status IN ('waiting', 'pending')"),
            postgresql_where=sa.text("status IN ('waiting', 'pending')"),
        )


def downgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_backlog_producer")
        batch_op.create_index(
            "ix_jobs_pending_producer",
            ["producer_key_id"],
            unique=False,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )

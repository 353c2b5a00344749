"""producer quotas: a key's enqueue rate and max pending, the enqueue ledger, pending jobs per producer

A producer key may be limited to N jobs in any S seconds and to M pending jobs (NULL: no limit). The
rate is judged from enqueue_ledger (one row per enqueue of a rate-limited key, with the key's running
total); the pending count reads ix_jobs_pending_producer, a partial index on pending jobs only.

Revision ID: 0adc5838fbaa
Revises: 85f8a7377da7
Create Date: 2026-12-02 09:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "0adc5838fbaa"
down_revision = "85f8a7377da7"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(sa.Column("enqueue_rate_limit", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("enqueue_rate_seconds", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("max_pending", sa.Integer(), nullable=True))

    op.create_table(
        "enqueue_ledger",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("running_total", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("enqueue_ledger", schema=None) as batch_op:
        batch_op.create_index("ix_enqueue_ledger_key_at", ["key_id", "at", "running_total"], unique=False)

    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_jobs_pending_producer",
            ["producer_key_id"],
            unique=False,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )


def downgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_pending_producer")

    with op.batch_alter_table("enqueue_ledger", schema=None) as batch_op:
        batch_op.drop_index("ix_enqueue_ledger_key_at")

    op.drop_table("enqueue_ledger")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_column("max_pending")
        batch_op.drop_column("enqueue_rate_seconds")
        batch_op.drop_column("enqueue_rate_limit")

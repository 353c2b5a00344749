"""flow control per job type: pause, concurrency, rate and per-key limits, and fair turns between keys

Jobs get a concurrency key ('' for none) and a fair_tag, their turn among the jobs of their priority; the
claim goes by (priority, fair_tag, id), so ix_jobs_claim_order gains fair_tag. Jobs already in the database
keep fair_tag 0: among themselves they are claimed by id, as before, and before any job enqueued later.
type_settings holds each type's settings, type_changes the history of every change, type_claims the claims
a rate limit counts.

Revision ID: b7c41e2f9d10
Revises: 0adc5838fbaa
Create Date: 2026-12-02 10:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "b7c41e2f9d10"
down_revision = "0adc5838fbaa"
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade():
    op.create_table(
        "type_settings",
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("paused", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("concurrency_limit", sa.Integer(), nullable=True),
        sa.Column("rate_limit_jobs", sa.Integer(), nullable=True),
        sa.Column("rate_limit_seconds", sa.Integer(), nullable=True),
        sa.Column("key_concurrency_limit", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("type"),
    )
    op.create_table(
        "type_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("actor", sa.String(length=120), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("changes", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_type_changes_type_id", "type_changes", ["type", "id"], unique=False)
    op.create_table(
        "type_claims",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("jobs", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_type_claims_type_expires", "type_claims", ["type", "expires_at"], unique=False)

    # Plain ALTER TABLE and CREATE INDEX, not a batch: on SQLite a batch would copy the jobs table (and an
    # index on an expression, priority DESC, cannot be copied by name).
    op.add_column(
        "jobs", sa.Column("concurrency_key", sa.String(length=200), server_default=sa.text("''"), nullable=False)
    )
    op.add_column("jobs", sa.Column("fair_tag", sa.BigInteger(), server_default=sa.text("0"), nullable=False))
    op.drop_index("ix_jobs_claim_order", table_name="jobs")
    op.create_index(
        "ix_jobs_claim_order",
        "jobs",
        [sa.text("priority DESC"), "fair_tag", "id"],
        unique=False,
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.create_index(
        "ix_jobs_type_claim_order",
        "jobs",
        ["type", sa.text("priority DESC"), "fair_tag", "id"],
        unique=False,
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.create_index("ix_jobs_key_turns", "jobs", ["concurrency_key", "priority", "fair_tag"], unique=False)


def downgrade():
    op.drop_index("ix_jobs_key_turns", table_name="jobs")
    op.drop_index("ix_jobs_type_claim_order", table_name="jobs")
    op.drop_index("ix_jobs_claim_order", table_name="jobs")
    op.create_index(
        "ix_jobs_claim_order",
        "jobs",
        [sa.text("priority DESC"), "id"],
        unique=False,
        sqlite_where=PENDING,
        postgresql_where=PENDING,
    )
    op.drop_column("jobs", "fair_tag")
    op.drop_column("jobs", "concurrency_key")
    op.drop_index("ix_type_claims_type_expires", table_name="type_claims")
    op.drop_table("type_claims")
    op.drop_index("ix_type_changes_type_id", table_name="type_changes")
    op.drop_table("type_changes")
    op.drop_table("type_settings")

"""initial schema: jobs, their event log, API keys, admin users, login attempts

Revision ID: 67e517ba2dd3
Revises:
Create Date: 2026-11-29 10:29:36.408962

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "67e517ba2dd3"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("max_priority", sa.Integer(), nullable=False),
        sa.Column("allowed_types", sa.Text(), nullable=True),
        sa.Column("prefix", sa.String(length=16), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_used_at", sa.DateTime(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "login_attempts",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=100), nullable=False),
        sa.Column("remote_addr", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("login_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_login_attempts_addr_at", ["remote_addr", "at"], unique=False)
        batch_op.create_index("ix_login_attempts_username_at", ["username", "at"], unique=False)

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("username", sa.String(length=100), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("username"),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("retry_count", sa.Integer(), nullable=False),
        sa.Column("max_retries", sa.Integer(), nullable=False),
        sa.Column("stall_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("request_digest", sa.String(length=64), nullable=True),
        sa.Column("producer_key_id", sa.Integer(), nullable=True),
        sa.Column("producer", sa.String(length=100), nullable=True),
        sa.Column("run_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=True),
        sa.Column("worker_id", sa.String(length=100), nullable=True),
        sa.Column("claim_token", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=True),
        sa.Column("completed_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(
            ["producer_key_id"],
            ["api_keys.id"],
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("producer_key_id", "idempotency_key", name="uq_jobs_producer_idempotency"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        # The claim reads this index in claim order (priority DESC, oldest first) and stops at the
        # first due job, so claiming stays O(log n) however deep the queue grows.
        batch_op.create_index(
            "ix_jobs_claim_order",
            [sa.text("priority DESC"), "id"],
            unique=False,
            sqlite_where=sa.text("status = 'pending'"),
            postgresql_where=sa.text("status = 'pending'"),
        )
        batch_op.create_index("ix_jobs_producer_id", ["producer_key_id", "id"], unique=False)
        batch_op.create_index(
            "ix_jobs_running_lease",
            ["lease_expires_at"],
            unique=False,
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.create_index("ix_jobs_status_id", ["status", "id"], unique=False)
        batch_op.create_index("ix_jobs_status_updated", ["status", "updated_at"], unique=False)
        batch_op.create_index("ix_jobs_type_status", ["type", "status"], unique=False)
        batch_op.create_index("ix_jobs_worker_status", ["worker_id", "status"], unique=False)

    op.create_table(
        "job_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("event", sa.String(length=20), nullable=False),
        sa.Column("from_status", sa.String(length=16), nullable=True),
        sa.Column("to_status", sa.String(length=16), nullable=False),
        sa.Column("actor", sa.String(length=120), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.create_index("ix_job_events_event_at", ["event", "at"], unique=False)
        batch_op.create_index("ix_job_events_job_id", ["job_id", "id"], unique=False)


def downgrade():
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_index("ix_job_events_job_id")
        batch_op.drop_index("ix_job_events_event_at")

    op.drop_table("job_events")
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index("ix_jobs_worker_status")
        batch_op.drop_index("ix_jobs_type_status")
        batch_op.drop_index("ix_jobs_status_updated")
        batch_op.drop_index("ix_jobs_status_id")
        batch_op.drop_index(
            "ix_jobs_running_lease",
            sqlite_where=sa.text("status = 'running'"),
            postgresql_where=sa.text("status = 'running'"),
        )
        batch_op.drop_index("ix_jobs_producer_id")
        batch_op.drop_index("ix_jobs_claim_order")

    op.drop_table("jobs")
    op.drop_table("users")
    with op.batch_alter_table("login_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_login_attempts_username_at")
        batch_op.drop_index("ix_login_attempts_addr_at")

    op.drop_table("login_attempts")
    op.drop_table("api_keys")

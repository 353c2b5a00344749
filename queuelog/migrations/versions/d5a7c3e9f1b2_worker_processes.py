"""worker processes: each running worker registers itself, beats, and hears quiet/stop from its beat

worker_processes holds one row per process a worker key registered (host, pid, version, concurrency, types,
started_at, heartbeat_at) and the command an admin gave it (run, quiet, stop). jobs.process_id names the
process that claimed the job, so the Workers page can show what each process holds and what it finished,
read from ix_jobs_process_status (partial: jobs claimed without naming a process are not in it).

Revision ID: d5a7c3e9f1b2
Revises: c4e19a7d2b61
Create Date: 2026-11-30 22:10:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "d5a7c3e9f1b2"
down_revision = "c4e19a7d2b61"
branch_labels = None
depends_on = None

NAMED = sa.text("process_id IS NOT NULL")


def upgrade():
    op.create_table(
        "worker_processes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("key_id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("types", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.Column("command", sa.String(length=8), server_default=sa.text("'run'"), nullable=False),
        sa.Column("command_by", sa.String(length=120), nullable=True),
        sa.Column("command_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["key_id"], ["api_keys.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_worker_processes_key_id", "worker_processes", ["key_id", "id"], unique=False)
    op.create_index("ix_worker_processes_heartbeat_at", "worker_processes", ["heartbeat_at"], unique=False)
    # Plain ALTER TABLE, not a batch: on SQLite a batch would copy the jobs table.
    op.add_column("jobs", sa.Column("process_id", sa.Integer(), nullable=True))
    op.create_index(
        "ix_jobs_process_status",
        "jobs",
        ["process_id", "status", "updated_at"],
        unique=False,
        sqlite_where=NAMED,
        postgresql_where=NAMED,
    )


def downgrade():
    op.drop_index("ix_jobs_process_status", table_name="jobs")
    op.drop_column("jobs", "process_id")
    op.drop_index("ix_worker_processes_heartbeat_at", table_name="worker_processes")
    op.drop_index("ix_worker_processes_key_id", table_name="worker_processes")
    op.drop_table("worker_processes")

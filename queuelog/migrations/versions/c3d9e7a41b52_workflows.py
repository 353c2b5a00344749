"""workflows: job dependencies, waiting jobs, watched jobs and progress

job_dependencies holds a workflow's edges (child runs after parent), indexed both ways: by child (its
primary key) to decide a child, by parent to find the children a finishing job may promote. Jobs get
run_when (NULL without parents), has_dependents and watched (so a finishing job costs an extra read or a
wake-up only when something depends on it or waits for it), and progress (a worker's last report).

Revision ID: c3d9e7a41b52
Revises: c4e8a1d2f7b3
Create Date: 2026-11-30 19:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "c3d9e7a41b52"
down_revision = "c4e8a1d2f7b3"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade():
    op.create_table(
        "job_dependencies",
        sa.Column("child_id", BIG_ID, nullable=False),
        sa.Column("parent_id", BIG_ID, nullable=False),
        sa.ForeignKeyConstraint(["child_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["parent_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("child_id", "parent_id"),
    )
    op.create_index("ix_job_dependencies_parent_child", "job_dependencies", ["parent_id", "child_id"], unique=False)
    # Plain ALTER TABLE, not a batch: on SQLite a batch would copy the jobs table.
    op.add_column("jobs", sa.Column("run_when", sa.String(length=16), nullable=True))
    op.add_column("jobs", sa.Column("has_dependents", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    op.add_column("jobs", sa.Column("watched", sa.Boolean(), server_default=sa.text("false"), nullable=False))
    op.add_column("jobs", sa.Column("progress", sa.Text(), nullable=True))


def downgrade():
    op.drop_column("jobs", "progress")
    op.drop_column("jobs", "watched")
    op.drop_column("jobs", "has_dependents")
    op.drop_column("jobs", "run_when")
    op.drop_index("ix_job_dependencies_parent_child", table_name="job_dependencies")
    op.drop_table("job_dependencies")

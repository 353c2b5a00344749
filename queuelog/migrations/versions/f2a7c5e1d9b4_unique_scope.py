"""unique scope: a producer's dedupe windows are its own; a type may share one window among its producers

unique_slots gains scope, part of its primary key: the id of the key whose window it is, or 0 for the one
window of a type whose producers share it (type_settings.unique_scope 'type'; the default, 'producer', gives
each key its own, as its idempotency keys are). Until now every window was shared by the type's producers,
so a hit answered with another producer's job.

The windows already in the database become the windows of the producer that enqueued their job: that
producer's next enqueue of the key within the window is still answered with its job, another producer's
makes its own. A type set to 'type' afterwards starts its shared windows empty. A slot with no job, or a
job with no producer key, held no window that could be met (a slot without a job is free), and is dropped.

Revision ID: f2a7c5e1d9b4
Revises: e6b9d4f2a018
Create Date: 2026-12-05 09:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "f2a7c5e1d9b4"
down_revision = "e6b9d4f2a018"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column(
        "type_settings",
        sa.Column("unique_scope", sa.String(length=16), server_default=sa.text("'producer'"), nullable=False),
    )
    op.add_column("unique_slots", sa.Column("scope", sa.Integer(), nullable=True))
    op.execute("UPDATE unique_slots SET scope = (SELECT producer_key_id FROM jobs WHERE jobs.id = unique_slots.job_id)")
    op.execute("DELETE FROM unique_slots WHERE scope IS NULL")
    _primary_key(["type", "scope", "unique_key"], scope_nullable=False)


def downgrade():
    # Back to one window per (type, key): of the windows one key holds in several scopes, the newest stays.
    op.execute(
        "DELETE FROM unique_slots WHERE EXISTS (SELECT 1 FROM unique_slots newer"
        " WHERE newer.type = unique_slots.type AND newer.unique_key = unique_slots.unique_key"
        " AND (newer.enqueued_at, newer.scope) > (unique_slots.enqueued_at, unique_slots.scope))"
    )
    _primary_key(["type", "unique_key"], scope_nullable=True)
    op.drop_column("unique_slots", "scope")
    op.drop_column("type_settings", "unique_scope")


def _primary_key(columns: list[str], scope_nullable: bool) -> None:
    """unique_slots' primary key on ``columns``: PostgreSQL drops and adds it in place; SQLite cannot change a
    primary key but by copying the table into a new one (its documented way for any change of a table)."""
    if op.get_context().dialect.name != "sqlite":
        op.drop_constraint("unique_slots_pkey", "unique_slots", type_="primary")
        op.alter_column("unique_slots", "scope", existing_type=sa.Integer(), nullable=scope_nullable)
        op.create_primary_key("unique_slots_pkey", "unique_slots", columns)
        return
    op.create_table(
        "unique_slots_copy",
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("scope", sa.Integer(), nullable=scope_nullable),
        sa.Column("unique_key", sa.String(length=200), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("enqueued_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint(*columns),
    )
    op.execute(
        "INSERT INTO unique_slots_copy (type, scope, unique_key, job_id, enqueued_at)"
        " SELECT type, scope, unique_key, job_id, enqueued_at FROM unique_slots"
    )
    op.drop_index("ix_unique_slots_job_id", table_name="unique_slots")
    op.drop_table("unique_slots")
    op.rename_table("unique_slots_copy", "unique_slots")
    op.create_index("ix_unique_slots_job_id", "unique_slots", ["job_id"], unique=False)

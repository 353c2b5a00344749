"""closed_days, closed_day_errors: the failed jobs of each closed day of history, summed by cause (PostgreSQL)

Top errors groups every failed job by its cause. Over days of history that read grows with the retention
kept, although a day that has ended hardly ever changes again. Retention now sums each closed day's failed
jobs once (queuelog/sql/closed_days.py), and the page adds those sums to its grouping of the days not summed.

``closed_day_changed`` moves a day's change counter (a sequence of its own) on at any write to the day; the
trigger that calls it is put on each day when the day is first summed, not here. SQLite keeps no days: nothing
changes there.

Revision ID: a3c5e7f9b1d2
Revises: d9f4b2c6a8e1
Create Date: 2026-12-06 16:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "a3c5e7f9b1d2"
down_revision = "d9f4b2c6a8e1"  # after live_and_history
branch_labels = None
depends_on = None

# A BEFORE trigger, so that the counter has moved before the write can be seen. Per row for INSERT, UPDATE and
# DELETE (a statement on ``jobs`` fires the row triggers of the days it touches, but not their statement
# triggers), per statement for TRUNCATE. TG_ARGV[0]: the day's sequence.
_FUNCTION = """
CREATE FUNCTION closed_day_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval(TG_ARGV[0]::regclass);
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END $$"""


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_table(
        "closed_days",
        sa.Column("day", sa.String(length=63), nullable=False),
        sa.Column("lower", sa.DateTime(), nullable=True),
        sa.Column("upper", sa.DateTime(), nullable=False),
        sa.Column("changes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("day"),
    )
    op.create_table(
        "closed_day_errors",
        sa.Column("day", sa.String(length=63), nullable=False),
        sa.Column("error_group", sa.String(length=200), nullable=False),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("failed", sa.BigInteger(), nullable=False),
        sa.Column("first_seen", sa.DateTime(), nullable=False),
        sa.Column("last_seen", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("day", "error_group", "type"),
    )
    op.execute(_FUNCTION)


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    days = op.get_bind().exec_driver_sql(
        "SELECT DISTINCT tgrelid::regclass::text FROM pg_trigger WHERE tgname = 'closed_day_changed'"
    )
    for day in days.scalars().all():
        op.execute(f"DROP TRIGGER closed_day_changed ON {day}")
        op.execute(f"DROP TRIGGER IF EXISTS closed_day_truncated ON {day}")
        op.execute(f"DROP SEQUENCE IF EXISTS {day}_changes")
    op.execute("DROP FUNCTION closed_day_changed()")
    op.drop_table("closed_day_errors")
    op.drop_table("closed_days")

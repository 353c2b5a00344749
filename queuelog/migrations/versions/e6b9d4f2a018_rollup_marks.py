"""rollup marks: how far the type rollups are rolled up (one row per rollup; today only 'type_rollups')

The type rollups are no longer written by each state change (that deadlocked on PostgreSQL and slowed the
claim): a rollup step folds closed minutes of job_events into them (queuelog/queue/rollups.py), and this row
says up to which minute it has. The step also replaces each minute it rolls, so rows the old write path
left in type_rollups are simply overwritten when their minute is rolled again.

Revision ID: e6b9d4f2a018
Revises: d5a8c3e1f907
Create Date: 2026-12-01 01:20:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "e6b9d4f2a018"
down_revision = "d5a8c3e1f907"  # after type_rollups
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "rollup_marks",
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("through", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade():
    op.drop_table("rollup_marks")

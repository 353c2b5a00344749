"""users: a role, admin or viewer

A viewer may open every page but change nothing. Every user made before this migration was an admin
and stays one: the column's server default fills their rows.

Revision ID: 85f8a7377da7
Revises: 3afa1fd883bf
Create Date: 2026-12-02 09:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "85f8a7377da7"
down_revision = "3afa1fd883bf"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("role", sa.String(length=16), server_default=sa.text("'admin'"), nullable=False))


def downgrade():
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("role")

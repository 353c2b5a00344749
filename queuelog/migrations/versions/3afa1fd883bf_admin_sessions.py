"""admin sessions, kept on the server

A session was only a signed cookie, so a copy of it outlived sign-out. Each sign-in now has a row here
(the cookie carries a random token, the row its SHA-256 digest and the session's times); deleting the
row ends the session wherever the cookie went.

Revision ID: 3afa1fd883bf
Revises: 0a8b0dc1f6c5
Create Date: 2026-12-01 10:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "3afa1fd883bf"
down_revision = "0a8b0dc1f6c5"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "admin_sessions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("digest"),
    )
    with op.batch_alter_table("admin_sessions", schema=None) as batch_op:
        batch_op.create_index("ix_admin_sessions_user_id", ["user_id"], unique=False)


def downgrade():
    with op.batch_alter_table("admin_sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_admin_sessions_user_id")

    op.drop_table("admin_sessions")

"""login attempts: index failed sign-ins per (username, address)

The sign-in throttle no longer refuses a username from every address (that let anyone lock a named admin
out); it refuses an address, and a (username, address) pair, so it looks failures up by that pair.

Revision ID: 0a8b0dc1f6c5
Revises: 5dea55fca977
Create Date: 2026-12-01 09:00:00

"""

from alembic import op

# revision identifiers, used by Alembic.
revision = "0a8b0dc1f6c5"
down_revision = "5dea55fca977"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("login_attempts", schema=None) as batch_op:
        batch_op.create_index("ix_login_attempts_username_addr_at", ["username", "remote_addr", "at"], unique=False)


def downgrade():
    with op.batch_alter_table("login_attempts", schema=None) as batch_op:
        batch_op.drop_index("ix_login_attempts_username_addr_at")

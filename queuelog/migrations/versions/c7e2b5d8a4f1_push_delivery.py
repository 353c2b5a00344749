"""Push delivery: a type's push target, its signing secrets, its last delivery, and each delivery's HTTP status

- ``type_settings`` gains the push target (url, mode, timeout): a change of it renews the settings' version like
  any other (the trigger of f3a1c7e9b2d5), so every claim sees at once which types are delivered by the server.
- ``push_secrets``: the Standard Webhooks secrets a type's deliveries are signed with; a rotated one keeps
  signing until ``retires_at``.
- ``push_status``: the last delivery of each type, for the Types page.
- ``job_events.http_status``: the status a delivery was answered with (null for every other event).

Nullable columns and new tables only: no table is rewritten on either database.

Revision ID: c7e2b5d8a4f1
Revises: b8d4f1a6c2e9
Create Date: 2026-12-05 21:00:00

"""

import sqlalchemy as sa
from alembic import op

revision = "c7e2b5d8a4f1"
down_revision = "b8d4f1a6c2e9"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column("type_settings", sa.Column("push_url", sa.String(length=2048), nullable=True))
    op.add_column("type_settings", sa.Column("push_mode", sa.String(length=8), nullable=True))
    op.add_column("type_settings", sa.Column("push_timeout_seconds", sa.Integer(), nullable=True))
    op.add_column("job_events", sa.Column("http_status", sa.Integer(), nullable=True))
    op.create_table(
        "push_secrets",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("type", sa.String(length=100), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("retires_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_push_secrets_type", "push_secrets", ["type"])
    op.create_table(
        "push_status",
        sa.Column("type", sa.String(length=100), primary_key=True),
        sa.Column("job_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=True),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )


def downgrade():
    op.drop_table("push_status")
    op.drop_index("ix_push_secrets_type", table_name="push_secrets")
    op.drop_table("push_secrets")
    with op.batch_alter_table("job_events", schema=None) as batch_op:
        batch_op.drop_column("http_status")
    with op.batch_alter_table("type_settings", schema=None) as batch_op:
        batch_op.drop_column("push_timeout_seconds")
        batch_op.drop_column("push_mode")
        batch_op.drop_column("push_url")

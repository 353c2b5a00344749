"""Jobs carry the W3C trace context they were enqueued in: traceparent and tracestate

Two nullable columns, added in place (no table rewrite on either database): a job enqueued before has none,
and the API shows null for it.

Revision ID: b8d4f1a6c2e9
Revises: a4c8e2f6b1d3
Create Date: 2026-12-05 18:30:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "b8d4f1a6c2e9"
down_revision = "a4c8e2f6b1d3"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column("jobs", sa.Column("traceparent", sa.String(length=256), nullable=True))
    op.add_column("jobs", sa.Column("tracestate", sa.String(length=512), nullable=True))


def downgrade():
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_column("tracestate")
        batch_op.drop_column("traceparent")

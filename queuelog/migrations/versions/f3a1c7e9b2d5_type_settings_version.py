"""type_settings_version: a new random version with every change of type_settings, written by a trigger

Each server process keeps a copy of which types are paused or limited, to shape its claims; the claim checks
in its own statement that the copy's version is still the current one (queuelog/queue/flow.py). The version
is written by a trigger, so that every change bumps it in the changing transaction, whoever makes it (an
older server during an upgrade, an admin by hand).

Revision ID: f3a1c7e9b2d5
Revises: f1c3a5e7b9d2
Create Date: 2026-12-05 09:00:00

"""

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision = "f3a1c7e9b2d5"
down_revision = "f1c3a5e7b9d2"  # after the backlog index
branch_labels = None
depends_on = None

# PostgreSQL: once per statement. random() has 53 bits; + 1 keeps 0 for "no row yet".
_PG_FUNCTION = """
CREATE FUNCTION type_settings_new_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO type_settings_version (id, version) VALUES (1, (random() * 9007199254740991)::bigint + 1)
    ON CONFLICT (id) DO UPDATE SET version = excluded.version;
    RETURN NULL;
END $$"""
_PG_TRIGGER = """
CREATE TRIGGER type_settings_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON type_settings
FOR EACH STATEMENT EXECUTE FUNCTION type_settings_new_version()"""
# SQLite: triggers are per row; each row changed draws a number.
_SQLITE_EVENTS = ("INSERT", "UPDATE", "DELETE")
_SQLITE_TRIGGER = """
CREATE TRIGGER type_settings_after_{name} AFTER {event} ON type_settings BEGIN
    INSERT OR REPLACE INTO type_settings_version (id, version) VALUES (1, random());
END"""


def upgrade():
    op.create_table(
        "type_settings_version",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        op.execute(_PG_TRIGGER)
    else:
        for event in _SQLITE_EVENTS:
            op.execute(_SQLITE_TRIGGER.format(event=event, name=event.lower()))


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER type_settings_changed ON type_settings")
        op.execute("DROP FUNCTION type_settings_new_version()")
    else:
        for event in _SQLITE_EVENTS:
            op.execute(f"DROP TRIGGER type_settings_after_{event.lower()}")
    op.drop_table("type_settings_version")

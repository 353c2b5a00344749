"""A pooled PostgreSQL connection that the server cut (a restart, an admin's pg_terminate_backend) is
tested and replaced before a request gets it: whether it sat idle or was used a moment ago, since the
server's goodbye waits on its socket. A connection in constant use whose server said nothing is not
tested (that would cost a round trip per request).
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.support.database import WIPING_CONNECTION, test_db_kind

pytestmark = pytest.mark.skipif(
    test_db_kind() != "postgresql", reason="a SQLite file cannot be cut from under an open connection"
)

IDLE_SECONDS = 0.3
TEST_AFTER_IDLE = {"DATABASE_PING_AFTER_IDLE_SECONDS": IDLE_SECONDS}
# Long enough that no slow machine lets the connection count as idle within the test.
NEVER_IDLE = {"DATABASE_PING_AFTER_IDLE_SECONDS": 3600}


def _cut_every_connection_of_the_app(database_url: str) -> int:
    """What a database restart does to the pool: every server-side session of this database ends."""
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            cut = conn.execute(
                text(
                    # With a timeout, pg_terminate_backend returns once the session has ended, as after a restart.
                    "SELECT count(pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name <> :wipe"
                ),
                {"wipe": WIPING_CONNECTION},
            ).scalar_one()
    finally:
        engine.dispose()
    return cut


@pytest.mark.parametrize("config_overrides", [TEST_AFTER_IDLE], indirect=True)
def test_a_connection_that_idled_is_tested_and_replaced_before_a_request_gets_it(client, producer, database_url):
    assert client.get("/jobs", headers=producer).status_code == 200
    assert _cut_every_connection_of_the_app(database_url) >= 1
    time.sleep(IDLE_SECONDS * 2)
    assert client.get("/jobs", headers=producer).status_code == 200


@pytest.mark.parametrize("config_overrides", [NEVER_IDLE], indirect=True)
def test_a_connection_the_server_cut_is_replaced_even_when_it_was_used_a_moment_ago(client, producer, database_url):
    assert client.get("/jobs", headers=producer).status_code == 200
    assert _cut_every_connection_of_the_app(database_url) >= 1
    assert client.get("/jobs", headers=producer).status_code == 200
    assert client.post("/jobs", json={"type": "email"}, headers=producer).status_code == 201

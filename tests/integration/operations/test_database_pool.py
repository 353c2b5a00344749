"""The connection pool of a server process: which of its idle connections the next request gets."""

from __future__ import annotations

from queuelog import create_app
from queuelog.extensions import db
from tests.support.database import app_config


def _two_returned_then_one_taken() -> tuple[object, object, object]:
    """(the connection returned first, the one returned last, the one the next checkout gets)."""
    with db.engine.connect() as first, db.engine.connect() as second:  # "second" goes back first
        returned_first, returned_last = second.connection.driver_connection, first.connection.driver_connection
    with db.engine.connect() as next_one:
        return returned_first, returned_last, next_one.connection.driver_connection


def test_the_connection_returned_last_serves_the_next_request(app):
    returned_first, returned_last, taken = _two_returned_then_one_taken()
    assert returned_first is not returned_last
    assert taken is returned_last


def test_the_pool_can_be_told_to_hand_out_its_oldest_connection_first(database_url, monkeypatch):
    monkeypatch.setenv("QUEUELOG_SQLALCHEMY_ENGINE_OPTIONS", '{"pool_use_lifo": false}')
    made = create_app(app_config(database_url))
    with made.app_context():
        try:
            returned_first, returned_last, taken = _two_returned_then_one_taken()
        finally:
            db.engine.dispose()
    assert returned_first is not returned_last
    assert taken is returned_first


def test_a_running_server_adds_no_pool_listener_while_requests_may_be_checking_connections_in(client, producer, worker):
    """Adding a listener while another thread's check-in walks the listeners is an error in that thread (a 500):
    everything the pool calls on check-in is in place once the app is built."""
    listeners_when_built = len(list(db.engine.pool.dispatch.checkin))
    job = client.post("/jobs", json={"type": "email"}, headers=producer).get_json()
    claimed = client.post("/jobs/claim", json={}, headers=worker).get_json()
    completed = client.post(f"/jobs/{job['id']}/complete", json={"claim_token": claimed["claim_token"]}, headers=worker)
    assert completed.status_code == 200
    assert len(list(db.engine.pool.dispatch.checkin)) == listeners_when_built

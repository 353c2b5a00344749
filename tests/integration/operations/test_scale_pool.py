"""Connection pool sizing: the limits come from configuration, and an exhausted pool is a 503.

How many connections the server really holds under load is measured in test_scale_throughput.py.
"""

from __future__ import annotations

import contextlib

import pytest

from queuelog import create_app
from queuelog.extensions import db
from tests.support.database import app_config


@pytest.fixture
def config_overrides():
    return {"DATABASE_POOL_SIZE": 1, "DATABASE_MAX_OVERFLOW": 1, "DATABASE_POOL_TIMEOUT": 0.5}


def test_the_pool_limits_come_from_the_configuration(app):
    assert db.engine.pool.size() == 1
    assert db.engine.pool._max_overflow == 1


def test_a_request_that_finds_the_pool_exhausted_gets_503_problem_json(client, producer):
    with contextlib.ExitStack() as held:
        for _ in range(2):  # every connection the pool may open is now taken
            held.enter_context(db.engine.connect())
        response = client.get("/jobs", headers=producer)
    assert response.status_code == 503
    assert response.headers["Content-Type"] == "application/problem+json"
    assert response.headers["Retry-After"]
    assert response.get_json()["status"] == 503
    assert client.get("/jobs", headers=producer).status_code == 200


def test_a_pool_of_one_connection_is_refused_at_start_up(database_url):
    with pytest.raises(ValueError, match="at least 2"):
        create_app(app_config(database_url, DATABASE_POOL_SIZE=1, DATABASE_MAX_OVERFLOW=0))

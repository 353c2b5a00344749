"""GET /healthz (alive, no database) and GET /readyz (database answers, schema current) for load balancers."""

from __future__ import annotations

import pytest

from queuelog import create_app
from queuelog.extensions import db
from tests.support.database import app_config
from tests.support.pg_cluster import free_port


@pytest.fixture
def app_on():
    """app_on(url) → a test client of an app on ``url`` that does not migrate (or touch) it at start."""
    made = []

    def _make(url: str):
        application = create_app(app_config(url, AUTO_MIGRATE=False))
        made.append(application)
        return application.test_client()

    yield _make
    for application in made:
        with application.app_context():
            db.engine.dispose()


def unreachable_urls(tmp_path) -> list[str]:
    return [
        f"sqlite:///{tmp_path / 'no-such-directory' / 'queuelog.db'}",
        f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres",  # nothing listens there
    ]


def test_healthz_answers_ok_without_a_key(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_answers_ok_when_the_database_is_current(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


@pytest.mark.parametrize("which", ["sqlite-missing-directory", "postgresql-closed-port"])
def test_readyz_is_503_problem_when_the_database_is_unreachable(app_on, tmp_path, which):
    url = unreachable_urls(tmp_path)[0 if which.startswith("sqlite") else 1]
    response = app_on(url).get("/readyz")
    assert response.status_code == 503
    assert response.content_type == "application/problem+json"
    body = response.get_json()
    assert body["status"] == 503 and "database" in body["detail"]
    assert "Traceback" not in response.get_data(as_text=True)


@pytest.mark.parametrize("which", ["sqlite-missing-directory", "postgresql-closed-port"])
def test_healthz_stays_ok_when_the_database_is_unreachable(app_on, tmp_path, which):
    url = unreachable_urls(tmp_path)[0 if which.startswith("sqlite") else 1]
    response = app_on(url).get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok"}


def test_readyz_is_503_when_the_schema_is_not_migrated(app_on, tmp_path):
    response = app_on(f"sqlite:///{tmp_path / 'empty.db'}").get("/readyz")
    assert response.status_code == 503
    assert "migration" in response.get_json()["detail"]


def test_health_answers_are_not_cached(client):
    for path in ("/healthz", "/readyz"):
        assert client.get(path).headers["Cache-Control"] == "no-store"

"""Schemathesis, run as its CLI runs it (``--checks all``, every phase), against the production server: gunicorn
started from the repository root as the README's command starts it, so with gunicorn.conf.py and gthread workers.

One run per role (an admin, a producer and a worker key, and no key at all), each on a database holding jobs in
every state (so that small job ids mostly exist); any failure fails the test, and its report is the run's output.
What the document cannot say (a time in the past, a cursor this server did not issue, the caller's own key name)
is told to the run per operation in tests/support/schemathesis_hooks.py, and nothing else.
"""

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.api import bearer
from tests.support.database import JOB_TYPES, test_db_kind
from tests.support.schemathesis_hooks import operation_settings
from tests.support.server import REPO_ROOT, running_server

pytestmark = pytest.mark.shared_server  # the roles' runs share one server; each test empties its database

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
# Test cases per operation and phase: 30 keeps a role's run under a minute; raise it for a deeper hunt.
MAX_EXAMPLES = int(os.environ.get("QUEUELOG_SCHEMATHESIS_EXAMPLES", "30"))
# Without a key every request is answered 401 before any of it is read: a few generated cases per operation show
# that, and the coverage phase's boundary values and the stateful phase's sequences would reach nothing more.
MAX_EXAMPLES_WITHOUT_KEY = min(MAX_EXAMPLES, 5)
PHASES_WITHOUT_KEY = "fuzzing"
# A claim or GET /jobs/{id}?wait is cut to (near) 0 by the hooks; anything slower than this is a hang.
REQUEST_TIMEOUT_SECONDS = 40


@pytest.fixture
def shared_server_settings():
    """The test app sees the server's settings: the suite's defaults (tests/conftest.py's app_config)."""
    return {}


@pytest.fixture(scope="module")
def production_server(shared_database_url):
    """`gunicorn --workers 4 --threads 8 app:app` from the repository root, on the module's database."""
    env = {
        "QUEUELOG_DATABASE_URL": shared_database_url,
        "QUEUELOG_JOB_TYPES": ",".join(JOB_TYPES),
        "QUEUELOG_SECRET_KEY": "test-secret-key",
        "QUEUELOG_RETRY_BACKOFF_BASE": "0",
    }
    with running_server(env, workers=4, extra_args=("--threads", "8")) as server:
        yield server


@pytest.fixture
def seeded_jobs(make_job):
    """A few jobs in every state, some held by the test worker key (worker-a)."""
    for status in ("pending", "running", "completed", "failed", "cancelled") * 2:
        make_job(status=status, payload={"n": 1}, error="boom" if status == "failed" else None)


def run_schemathesis(
    server, headers: dict, max_examples: int, tmp_path: Path, phases: str = "examples,coverage,fuzzing,stateful"
) -> subprocess.CompletedProcess:
    """`schemathesis run --checks all` against the server's document; its hooks and settings are ours."""
    settings = tmp_path / "schemathesis.toml"
    settings.write_text(operation_settings())
    header_args = [arg for name, value in headers.items() for arg in ("-H", f"{name}: {value}")]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks", "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [
            SCHEMATHESIS,
            "--config-file",
            str(settings),
            "run",
            f"{server.url}/openapi.json",
            "--checks",
            "all",
            "--phases",
            phases,
            "--max-examples",
            str(max_examples),
            "--request-timeout",
            str(REQUEST_TIMEOUT_SECONDS),
            "--generation-database",
            "none",
            "--no-color",
            *header_args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("role", ["admin", "producer", "worker"])
def test_schemathesis_finds_nothing_with_a_key_of_each_role(production_server, seeded_jobs, make_key, role, tmp_path):
    headers = bearer(make_key(role, f"{role}-a"))
    run = run_schemathesis(production_server, headers, MAX_EXAMPLES, tmp_path)
    assert run.returncode == 0, f"schemathesis ({role} key, {test_db_kind()}):\n{run.stdout}\n{run.stderr}"


def test_schemathesis_finds_nothing_without_a_key(production_server, seeded_jobs, tmp_path):
    run = run_schemathesis(production_server, {}, MAX_EXAMPLES_WITHOUT_KEY, tmp_path, PHASES_WITHOUT_KEY)
    assert run.returncode == 0, f"schemathesis (no key, {test_db_kind()}):\n{run.stdout}\n{run.stderr}"


def test_a_url_too_long_for_the_server_is_the_documented_problem_json_414(production_server):
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(f"{production_server.url}/jobs?type={'a' * 5000}", timeout=30)
    assert answer.value.code == 414
    assert answer.value.headers["Content-Type"] == "application/problem+json"
    assert json.loads(answer.value.read())["status"] == 414


# Inputs on which the server and the document used to disagree (each was accepted, or a 500, where
# the document says 422); pinned here so they stay fixed.
DOCUMENTED_AS_INVALID = [
    pytest.param("/jobs", "producer", {"type": "email", "idempotency_key": "key\n"}, id="key-trailing-newline"),
    pytest.param("/jobs", "producer", {"type": "email", "priority": " low "}, id="priority-with-spaces"),
    pytest.param("/jobs", "admin", {"type": "email", "priority": "h\u0131gh"}, id="priority-dotless-i"),
    pytest.param("/jobs/claim", "worker", {"types": ["email\n"]}, id="claim-type-trailing-newline"),
    pytest.param("/jobs/1/complete", "worker", {"claim_token": "\ud800"}, id="token-lone-surrogate"),
    pytest.param(
        "/schedules",
        "admin",
        {"name": "n", "cron": "0 3 * * *\n", "job": {"type": "email"}},
        id="cron-trailing-newline",
    ),
]


@pytest.mark.parametrize("path, who, body", DOCUMENTED_AS_INVALID)
def test_input_the_document_calls_invalid_is_refused_with_422(client, producer, worker, admin, path, who, body):
    headers = {"producer": producer, "worker": worker, "admin": admin}[who]
    response = client.post(path, json=body, headers=headers)
    assert response.status_code == 422, response.get_json()
    assert response.mimetype == "application/problem+json"


def test_a_list_limit_must_be_plain_digits(client, admin):
    assert client.get("/jobs?limit=5_0", headers=admin).status_code == 422
    assert client.get("/jobs?limit=50", headers=admin).status_code == 200


def test_an_integral_number_is_an_integer_as_json_schema_says(client, producer):
    response = client.post("/jobs", json={"type": "email", "max_retries": 2.0}, headers=producer)
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["max_retries"] == 2

"""V-10: the scrubber's table of credential patterns, one example at least per row, and what it must leave alone.

Each row of ``SCRUB_RULES`` is tested on its own examples (so a row that stops matching is named by the
failure), then the whole scrubber is checked through the API: what a worker's ``fail`` stores is what an
admin reads.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import select

from queuelog.core.scrub import SCRUB_RULES, redact, scrub_error
from queuelog.extensions import db
from queuelog.models import JobEvent

# rule name → (error text as a worker sent it, what is stored)
EXAMPLES = {
    "url-credentials": [
        (
            "fetch postgres://app:s3cr3t-pw@db.internal:5432/q refused",
            "fetch postgres://[redacted]@db.internal:5432/q refused",
        ),
        ("GET https://bob:hunter22@api.example.com/v1 → 500", "GET https://[redacted]@api.example.com/v1 → 500"),
        # An empty user, as redis URLs have.
        ("cache down: redis://:hunter2@cache:6379", "cache down: redis://[redacted]@cache:6379"),
        # A password with an "@" in it is redacted whole, not up to its first "@".
        ("amqp://guest:p@ss@rabbit:5672/ unreachable", "amqp://[redacted]@rabbit:5672/ unreachable"),
    ],
    "authorization-scheme": [
        (
            "upstream said 401 to Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def",
            "upstream said 401 to Authorization: Bearer [redacted]",
        ),
        ("proxy refused Authorization: Basic dXNlcjpwYXNz", "proxy refused Authorization: Basic [redacted]"),
        (
            "GitHub: 401 for Authorization: token ghp_16C7e42F292c6912E7710c838347Ae178B4a",
            "GitHub: 401 for Authorization: token [redacted]",
        ),
    ],
    "secret-assignment": [
        ("connect failed: password=hunter2 host=db", "connect failed: password=[redacted] host=db"),
        ("login with PASSWORD: 'correct horse'", "login with PASSWORD: [redacted]"),
        ("config api_key=AKIAIOSFODNN7EXAMPLE loaded", "config api_key=[redacted] loaded"),
        ("env DB_PASSWORD=hunter2 rejected", "env DB_PASSWORD=[redacted] rejected"),
        (
            "PGPASSWORD=hunter2 psql -h db: authentication failed",
            "PGPASSWORD=[redacted] psql -h db: authentication failed",
        ),
        ("MYSQL_PWD=hunter2 mysql: access denied", "MYSQL_PWD=[redacted] mysql: access denied"),
        (
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY was not accepted",
            "AWS_SECRET_ACCESS_KEY=[redacted] was not accepted",
        ),
        (
            "POST /oauth/token client_id=web&client_secret=s3cr3t&grant_type=client_credentials → 400",
            "POST /oauth/token client_id=web&client_secret=[redacted]&grant_type=client_credentials → 400",
        ),
        (
            'token endpoint refused {"client_secret": "s3cr3t value", "client_id": "web"}',
            'token endpoint refused {"client_secret": [redacted], "client_id": "web"}',
        ),
        ("GET /v1/charges x-api-key: 3f9a1c77 → 403", "GET /v1/charges x-api-key: [redacted] → 403"),
    ],
    "url-token-user": [
        (
            "git clone https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/acme/app.git failed",
            "git clone https://[redacted]@github.com/acme/app.git failed",
        ),
    ],
    "command-line-option": [
        ("mysql --password hunter2 -h db: access denied", "mysql --password [redacted] -h db: access denied"),
        ("deploy --api-key 3f9a1c77b2 --env prod exited 1", "deploy --api-key [redacted] --env prod exited 1"),
        ("psql --db-password 'a b c' failed", "psql --db-password [redacted] failed"),
    ],
    "aws-access-key-id": [
        ("InvalidAccessKeyId: AKIAIOSFODNN7EXAMPLE does not exist", "InvalidAccessKeyId: [redacted] does not exist"),
    ],
    "private-key-block": [
        (
            "bad key: -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA3Tz2\nq9w+Lk==\n-----END RSA PRIVATE KEY-----",
            "bad key: -----BEGIN RSA PRIVATE KEY----- [redacted] -----END RSA PRIVATE KEY-----",
        ),
    ],
    "queuelog-api-key": [
        ("retrying with ql_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789abcdefg failed", "retrying with ql_[redacted] failed"),
    ],
}

ORDINARY_ERRORS = [
    "SMTP 451: try later",
    "ConnectionRefusedError: [Errno 111] Connection refused",
    "KeyError: 'invoice_id'",
    "ValueError: invalid literal for int() with base 10: 'abc'",
    "HTTP 503 from https://api.example.com/v1/charge?attempt=2",
    "http://localhost:8080/health answered 502",
    "git clone ssh://git@github.com/acme/repo.git: permission denied (publickey)",
    "mailto:billing@example.com bounced",
    "author=Bob not found",
    "max_tokens: 4096 exceeded",
    "3 passwords tried, account locked",
    "token validation failed: signature expired",
    "Basic authentication failed for user bob",
    "timeout=30s after 3 retries",
    "send-invoice failed",
    "https://deploy-bot@ci.example.com/job/42 timed out",
    "tool --password-file /run/secrets/db not found",
    "-----BEGIN CERTIFICATE----- is not a key",
]

EXAMPLE_CASES = [
    pytest.param(rule, raw, stored, id=f"{rule}: {raw[:40]}")
    for rule, examples in EXAMPLES.items()
    for raw, stored in examples
]


def test_every_rule_of_the_table_has_examples_here():
    assert [rule.name for rule in SCRUB_RULES] == list(EXAMPLES)


@pytest.mark.parametrize("rule_name, raw, stored", EXAMPLE_CASES)
def test_the_rule_alone_redacts_its_example(rule_name, raw, stored):
    rule = next(rule for rule in SCRUB_RULES if rule.name == rule_name)
    assert rule.pattern.sub(rule.replacement, raw) == stored


@pytest.mark.parametrize("rule_name, raw, stored", EXAMPLE_CASES)
def test_what_a_worker_reports_is_stored_and_shown_redacted(
    client, worker, admin, make_job, read_job, rule_name, raw, stored
):
    job_id = make_job(status="running")
    response = client.post(f"/jobs/{job_id}/fail", json={"claim_token": "token-a", "error": raw}, headers=worker)
    assert response.status_code == 200
    assert read_job(job_id).error == stored
    with db.engine.connect() as conn:
        events = (
            conn.execute(
                select(JobEvent.__table__.c.error)
                .where(JobEvent.__table__.c.job_id == job_id)
                .order_by(JobEvent.__table__.c.id)
            )
            .scalars()
            .all()
        )
    assert events[-1] == stored
    assert client.get(f"/jobs/{job_id}", headers=admin).get_json()["error"] == stored


@pytest.mark.parametrize("text", ORDINARY_ERRORS)
def test_ordinary_error_text_is_left_alone(text):
    assert redact(text) == text
    assert scrub_error(text, 4000) == text


@pytest.mark.parametrize("unit", ["a-", "a.", "pwd-", "ql_-", "a://:b@", "token 1"])
def test_error_text_built_to_make_the_patterns_backtrack_is_scrubbed_in_linear_time(unit):
    # 200 KB: the quadratic patterns these replaced took over a minute and a half each here; these take ~20 ms.
    text = unit * (200_000 // len(unit))
    started = time.perf_counter()
    scrub_error(text, 4000)
    assert time.perf_counter() - started < 5

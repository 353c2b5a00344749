"""GET /openapi.json: a valid OpenAPI 3.1 document, public, describing exactly the routes the API has."""

import re

import pytest
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def api_operations_in_url_map(app) -> set[tuple[str, str]]:
    """(METHOD, /path/{param}) for every rule of the api blueprint, in OpenAPI path syntax."""
    operations = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint.split(".")[0] != "api":
            continue
        path = re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            operations.add((method, path))
    return operations


def documented_operations(document) -> set[tuple[str, str]]:
    return {
        (method.upper(), path) for path, item in document["paths"].items() for method in item if method in HTTP_METHODS
    }


def schema_validator(document, name):
    """A JSON Schema validator for one component schema, resolving $refs within the document."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return OAS31Validator(schema)


def test_the_document_is_served_without_an_api_key(client):
    response = client.get("/openapi.json")
    assert response.status_code == 200
    assert response.mimetype == "application/json"
    assert response.get_json()["openapi"] == "3.1.0"


def test_the_document_is_valid_openapi_3_1(client):
    validate(client.get("/openapi.json").get_json())


def test_every_api_route_is_documented(app, client):
    document = client.get("/openapi.json").get_json()
    missing = api_operations_in_url_map(app) - documented_operations(document)
    assert not missing, f"routes without documentation: {sorted(missing)}"


def test_every_documented_operation_is_a_route(app, client):
    document = client.get("/openapi.json").get_json()
    extra = documented_operations(document) - api_operations_in_url_map(app)
    assert not extra, f"documented but not served: {sorted(extra)}"


def test_every_route_but_the_document_itself_requires_a_bearer_key(client):
    document = client.get("/openapi.json").get_json()
    scheme = document["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert document["security"] == [{"bearerAuth": []}]
    public = {
        path
        for path, item in document["paths"].items()
        for method, op in item.items()
        if method in HTTP_METHODS and op.get("security") == []
    }
    assert public == {"/openapi.json"}


def test_every_protected_operation_documents_401_403_and_problem_json_errors(client):
    document = client.get("/openapi.json").get_json()
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method not in HTTP_METHODS or op.get("security") == []:
                continue
            assert {"401", "403"} <= set(op["responses"]), (method, path)
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert set(response["content"]) == {"application/problem+json"}, (method, path, status)


def test_request_bodies_refuse_unknown_fields_as_the_parsers_do(client):
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    for name, schema in schemas.items():
        if name.endswith("Request"):
            assert schema["additionalProperties"] is False, name


def test_the_job_schema_matches_a_job_the_api_returns(client, producer, worker, enqueue, claim):
    document = client.get("/openapi.json").get_json()
    job = enqueue(type="email", payload={"to": "a@example.com"}, idempotency_key="k-1")
    claimed = claim()
    schema_validator(document, "Job").validate(job)
    schema_validator(document, "ClaimedJob").validate(claimed)
    assert set(document["components"]["schemas"]["Job"]["required"]) == set(job)


def test_the_event_schema_matches_the_event_log_the_api_returns(client, producer, enqueue):
    document = client.get("/openapi.json").get_json()
    job = enqueue(type="email")
    client.post(f"/jobs/{job['id']}/cancel", headers=producer)
    events = client.get(f"/jobs/{job['id']}/events", headers=producer).get_json()["events"]
    assert [event["event"] for event in events] == ["enqueued", "cancelled"]
    for event in events:
        schema_validator(document, "Event").validate(event)
        assert set(document["components"]["schemas"]["Event"]["required"]) == set(event)


def test_a_validation_error_matches_the_problem_schema(client, producer):
    document = client.get("/openapi.json").get_json()
    response = client.post("/jobs", json={"type": "email", "priority": "urgent"}, headers=producer)
    assert response.status_code == 422
    schema_validator(document, "Problem").validate(response.get_json())
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/priority"]


def test_the_allowed_job_types_are_the_servers_allowlist(client, app):
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    assert schemas["EnqueueRequest"]["properties"]["type"]["enum"] == app.config["JOB_TYPES"]


def test_priority_labels_are_documented_case_insensitive(client):
    priority = client.get("/openapi.json").get_json()["components"]["schemas"]["EnqueueRequest"]["properties"][
        "priority"
    ]
    (pattern,) = [branch["pattern"] for branch in priority["anyOf"] if branch["type"] == "string"]
    for label in ("low", "Medium", "HIGH", "critical"):
        assert re.fullmatch(pattern, label)
    assert not re.fullmatch(pattern, "urgent")


def test_every_operation_carries_one_tag_the_document_declares(client):
    document = client.get("/openapi.json").get_json()
    declared = {tag["name"]: tag.get("description") for tag in document["tags"]}
    assert all(declared.values()), declared
    for path, item in document["paths"].items():
        for method, op in item.items():
            if method in HTTP_METHODS:
                tags = op.get("tags", [])
                assert len(tags) == 1 and tags[0] in declared, (method, path, tags)


def test_a_null_payload_is_documented_and_accepted_as_the_empty_default(client, producer):
    document = client.get("/openapi.json").get_json()
    body = {"type": "email", "payload": None, "priority": None, "max_retries": None}
    schema_validator(document, "EnqueueRequest").validate(body)
    response = client.post("/jobs", json=body, headers=producer)
    assert response.status_code == 201, response.get_json()
    job = response.get_json()
    assert (job["payload"], job["priority"], job["max_retries"]) == ({}, "low", 3)


# --- where the document and the server used to disagree (schemathesis' ST202: schema-valid, yet refused) ----------


def documented(client, name: str, body: dict) -> bool:
    """Whether the document calls ``body`` a valid ``name`` request."""
    return schema_validator(client.get("/openapi.json").get_json(), name).is_valid(body)


def answers(client, method: str, path: str) -> set[str]:
    return set(client.get("/openapi.json").get_json()["paths"][path][method]["responses"])


@pytest.mark.parametrize("wait", ["1e1", "12.3456", "0.0001", "1.0E-4", "5e-324", "30"])
def test_a_wait_written_as_any_json_number_in_range_is_taken(client, admin, make_job, wait):
    job_id = make_job(status="completed")  # final: the answer does not wait
    response = client.get(f"/jobs/{job_id}?wait={wait}", headers=admin)
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["id"] == job_id


@pytest.mark.parametrize("wait", ["nan", "inf", " 5", "1_0", "+5", ".5", "0", "-1", "30.001", "1e400", "1e-400"])
def test_a_wait_that_is_no_json_number_in_range_is_refused_at_query_wait(client, admin, make_job, wait):
    job_id = make_job(status="completed")
    response = client.get(f"/jobs/{job_id}", query_string={"wait": wait}, headers=admin)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/query/wait"]


def test_a_nul_in_a_claim_token_is_refused_by_the_document_and_the_server(client, worker, make_job):
    job_id = make_job(status="running")
    assert not documented(client, "CompleteRequest", {"claim_token": "token-a\x00"})
    response = client.post(f"/jobs/{job_id}/complete", json={"claim_token": "token-a\x00"}, headers=worker)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/claim_token"]


def test_a_nul_in_a_worker_host_is_refused_by_the_document_and_the_server(client, worker):
    body = {"host": "web-1\x00", "pid": 1, "version": "1", "concurrency": 1}
    assert not documented(client, "WorkerRegisterRequest", body)
    response = client.post("/workers", json=body, headers=worker)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/host"]


def test_a_cursor_this_server_did_not_issue_is_the_documented_422_at_query_cursor(client, admin):
    assert "422" in answers(client, "get", "/jobs")
    response = client.get("/jobs?cursor=QUJD", headers=admin)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/query/cursor"]


def test_run_when_without_depends_on_is_refused_by_the_document_and_the_server(client, producer):
    body = {"type": "email", "run_when": "finished"}
    assert not documented(client, "EnqueueRequest", body)
    assert documented(client, "EnqueueRequest", {"type": "email", "run_when": None})
    response = client.post("/jobs", json=body, headers=producer)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/run_when"]


def test_a_unique_key_without_unique_for_is_refused_by_the_document_and_the_server(client, producer):
    body = {"type": "email", "unique_key": "k"}
    assert not documented(client, "EnqueueRequest", body)
    response = client.post("/jobs", json=body, headers=producer)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/unique_key"]


def test_an_expires_at_in_the_past_is_the_documented_422(client, producer):
    assert (
        "else 422"
        in client.get("/openapi.json").get_json()["components"]["schemas"]["EnqueueRequest"]["properties"][
            "expires_at"
        ]["description"]
    )
    response = client.post("/jobs", json={"type": "email", "expires_at": "2000-01-01T00:00:00Z"}, headers=producer)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/expires_at"]


def test_a_claim_may_name_only_types_of_the_allowlist_as_documented(client, app, worker):
    assert not documented(client, "ClaimRequest", {"types": ["fax"]})
    assert documented(client, "ClaimRequest", {"types": app.config["JOB_TYPES"][:1]})
    assert client.post("/jobs/claim", json={"types": ["fax"]}, headers=worker).status_code == 422


def test_another_keys_process_in_a_claim_is_the_documented_404(client):
    assert "404" in answers(client, "post", "/jobs/claim")


@pytest.mark.parametrize(
    "cron, valid",
    [
        ("0 3 * * *", True),
        ("0 0 3 * * *", True),
        (" @DAILY ", True),
        ("*/5\t* * * MON-FRI", True),
        ("* * * *", False),
        ("0\x1c3 * * *", False),
        ("@fortnightly", False),
    ],
)
def test_the_cron_pattern_is_the_shape_the_server_takes(client, admin, cron, valid):
    body = {"name": "nightly", "cron": cron, "job": {"type": "email"}}
    assert documented(client, "ScheduleRequest", body) is valid
    response = client.post("/schedules", json=body, headers=admin)
    assert response.status_code == (201 if valid else 422), response.get_json()


def test_a_schedule_takes_one_timing_and_a_job_type_of_the_allowlist_as_documented(client, admin):
    both = {"name": "n", "cron": "@daily", "every_seconds": 60, "job": {"type": "email"}}
    neither = {"name": "n", "job": {"type": "email"}}
    unknown_type = {"name": "n", "every_seconds": 60, "job": {"type": "fax"}}
    for body, pointer in ((both, "/cron"), (neither, "/cron"), (unknown_type, "/job/type")):
        assert not documented(client, "ScheduleRequest", body)
        response = client.post("/schedules", json=body, headers=admin)
        assert response.status_code == 422
        assert pointer in [error["pointer"] for error in response.get_json()["errors"]]
    assert not documented(client, "SchedulePatchRequest", {"cron": "@daily", "every_seconds": 60})
    assert documented(client, "SchedulePatchRequest", {"cron": None, "every_seconds": 60})


def test_an_unknown_timezone_is_the_documented_422(client, admin):
    assert "422" in answers(client, "post", "/schedules")
    body = {"name": "n", "cron": "@daily", "timezone": "Mars/Olympus_Mons", "job": {"type": "email"}}
    assert documented(client, "ScheduleRequest", body)  # a string: only the server's zone database knows
    response = client.post("/schedules", json=body, headers=admin)
    assert response.status_code == 422
    assert [error["pointer"] for error in response.get_json()["errors"]] == ["/timezone"]

"""GET /openapi.json: a valid OpenAPI 3.1 document, public, describing exactly the routes the API has."""
import re

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
    return {(method.upper(), path) for path, item in document["paths"].items()
            for method in item if method in HTTP_METHODS}


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
    public = {path for path, item in document["paths"].items()
              for method, op in item.items() if method in HTTP_METHODS and op.get("security") == []}
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
    priority = client.get("/openapi.json").get_json()["components"]["schemas"]["EnqueueRequest"][
        "properties"]["priority"]
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

"""The OpenAPI 3.1 description of the JSON API, served without auth at ``GET /openapi.json``.

The document is Python data built from the same constants the parsers use (api/limits.py) and the
server's configuration (the job-type allowlist, the payload limit), so it describes this server as
it runs. tests/integration/jobs/test_openapi.py checks that every route is documented;
tests/acceptance/http/test_schemathesis.py checks that the answers match it.

The package is layered, without cycles: ``shapes`` (schema building blocks) and ``operations`` (operation
building blocks, on ``shapes``) at the bottom; the schemas of the jobs' bodies (``requests``) and answers
(``responses``); one module per group of routes (``jobs``, ``types``, ``schedules``, ``workers``);
and this module, which puts the document together.
"""

from __future__ import annotations

from typing import Any

from flask import Flask, current_app, jsonify

from .. import bp
from ..limits import MAX_LEASE_SECONDS
from . import jobs, requests, responses, schedules, types, workers
from . import shapes as s
from .operations import META, TAGS, json_response
from .shapes import Schema


def components(job_types: list[str], max_payload_bytes: int) -> dict[str, Schema]:
    """Every named schema of the document."""
    max_lease = MAX_LEASE_SECONDS
    return {
        "Job": responses.job(),
        "ClaimedJob": responses.claimed_job(),
        "EnqueuedJob": responses.enqueued_job(),
        "BatchJob": responses.batch_job(),
        "Event": responses.event(),
        "Problem": responses.problem(),
        "EnqueueRequest": requests.enqueue_request(job_types, max_payload_bytes),
        "BatchEnqueueItem": requests.enqueue_request(job_types, max_payload_bytes, in_batch=True),
        "BatchEnqueueRequest": requests.batch_enqueue_request(),
        "ClaimRequest": requests.claim_request(job_types, max_lease),
        "CompleteRequest": requests.complete_request(),
        "FailRequest": requests.fail_request(),
        "HeartbeatRequest": requests.heartbeat_request(max_lease),
        "ReleaseRequest": requests.token_request(),
        "BatchCompleteRequest": requests.batch_complete_request(),
        "BatchCompleteResponse": responses.batch_complete_response(),
        "EmptyRequest": s.closed({}, description="No fields: an empty body or {}."),
        **types.components(),
        "HiddenDedupeHit": responses.hidden_dedupe_hit(),
        **schedules.components(job_types),
        **workers.components(job_types),
    }


def paths() -> dict[str, Any]:
    """Every route of the api blueprint."""
    return {
        "/openapi.json": {
            "get": {
                "tags": [META],
                "operationId": "openapiDocument",
                "summary": "This document.",
                "security": [],
                "responses": {"200": json_response("The OpenAPI 3.1 document.", {"type": "object"})},
            }
        },
        **jobs.paths(),
        **types.paths(),
        **schedules.paths(),
        **workers.paths(),
    }


def build_document(config) -> dict[str, Any]:
    """The whole OpenAPI document for an app with this configuration."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "queuelog",
            "version": "1",
            "description": "A persistent background job queue. Producers enqueue jobs, workers claim and "
            "finish them, admins oversee. Every error is application/problem+json (RFC 9457).",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearerAuth": []}],
        "tags": TAGS,
        "paths": paths(),
        "components": {
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API key from `flask keys create NAME --role producer|worker|admin`.",
                }
            },
            "schemas": components(list(config["JOB_TYPES"]), config["MAX_PAYLOAD_BYTES"]),
        },
    }


def document_for(app: Flask) -> dict[str, Any]:
    """The app's document, built once: the configuration it depends on does not change at run time."""
    if "queuelog_openapi" not in app.extensions:
        app.extensions["queuelog_openapi"] = build_document(app.config)
    return app.extensions["queuelog_openapi"]


@bp.get("/openapi.json")
def openapi_document():
    """The OpenAPI 3.1 document; public, so tools and clients can read it without a key."""
    return jsonify(document_for(current_app))

"""Clients generated from /openapi.json by the generators people use, openapi-python-client and
openapi-typescript: each must run without a single warning and leave out no operation; the Python client
must enqueue, claim and complete jobs on a real server, and the TypeScript types must take the bodies
the API takes.

openapi-typescript and the TypeScript compiler come from tests/clients (``npm ci`` there; scripts/test
does it); openapi-python-client from the test extra.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.scale import app_on, create_keys, fresh_database_url, server_env
from tests.support.server import REPO_ROOT, running_server

# the OpenAPI document and what is generated from it are the same on every database
# scripts/test runs this module in the SQLite pass only.
pytestmark = pytest.mark.database_independent

HTTP_METHODS = ("get", "put", "post", "delete", "patch")
NODE_TOOLS = REPO_ROOT / "tests" / "clients" / "node_modules" / ".bin"
# The venv's bin: openapi-python-client runs ruff (its own dependency) on what it generates.
VENV_BIN = Path(sys.executable).parent
PACKAGE = "queuelog_client"
GENERATOR_TIMEOUT = 300
# What openapi-python-client generates for each operation.
CALLS = ("sync", "sync_detailed", "asyncio", "asyncio_detailed")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def document_operations(document: dict) -> list[tuple[str, str, dict]]:
    """(method, path, operation) for every operation of the document."""
    return [
        (method, path, operation)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


def snake_case(operation_id: str) -> str:
    """enqueueJob → enqueue_job, the name a generated Python client gives the operation's module."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def run(argv: list, cwd: Path, path_first: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_COLOR": "1"}
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [str(arg) for arg in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=GENERATOR_TIMEOUT
    )


def output_lines(result: subprocess.CompletedProcess) -> list[str]:
    """What a generator printed on stdout and stderr, one entry per non-blank line."""
    text = ANSI_ESCAPE.sub("", result.stdout + "\n" + result.stderr)
    return [line.strip() for line in text.splitlines() if line.strip()]


def node_tool(name: str) -> Path:
    tool = NODE_TOOLS / name
    if not tool.exists():
        pytest.fail(f"{tool} is missing: run `npm ci --no-audit --no-fund` in tests/clients (scripts/test does)")
    return tool


@pytest.fixture(scope="module")
def document(request, tmp_path_factory) -> dict:
    """/openapi.json as an app with the test configuration serves it."""
    database_url = fresh_database_url(request, tmp_path_factory.mktemp("document"))
    with app_on(database_url) as app:
        response = app.test_client().get("/openapi.json")
    assert response.status_code == 200
    return response.get_json()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, document) -> Path:
    """A directory holding the document as spec.json, where the generators run."""
    directory = tmp_path_factory.mktemp("clients")
    (directory / "spec.json").write_text(json.dumps(document, indent=2))
    return directory


@pytest.fixture(scope="module")
def python_generation(workdir) -> subprocess.CompletedProcess:
    return run(
        [
            VENV_BIN / "openapi-python-client",
            "generate",
            "--path",
            "spec.json",
            "--output-path",
            PACKAGE,
            "--meta",
            "none",
        ],
        workdir,
        path_first=VENV_BIN,
    )


@pytest.fixture(scope="module")
def python_client(workdir, python_generation):
    """The generated package, imported as queuelog_client."""
    init = workdir / PACKAGE / "__init__.py"
    assert init.exists(), output_lines(python_generation)
    spec = importlib.util.spec_from_file_location(PACKAGE, init, submodule_search_locations=[str(init.parent)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[PACKAGE] = package
    try:
        spec.loader.exec_module(package)
        yield package
    finally:
        for name in [name for name in sys.modules if name == PACKAGE or name.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def typescript_generation(workdir) -> subprocess.CompletedProcess:
    return run([node_tool("openapi-typescript"), "spec.json", "-o", "schema.d.ts"], workdir)


def typescript_errors(workdir: Path, name: str, source: str) -> list[str]:
    """Type-check ``source`` (which imports ./schema, the generated types) strictly; tsc's complaints."""
    (workdir / name).write_text(source)
    result = run(
        [
            node_tool("tsc"),
            "--noEmit",
            "--strict",
            "--target",
            "es2022",
            "--module",
            "esnext",
            "--moduleResolution",
            "bundler",
            name,
        ],
        workdir,
    )
    return output_lines(result) if result.returncode else []


# --- openapi-python-client ----------------------------------------------------------------------------


def test_openapi_python_client_generates_without_a_single_warning(python_generation):
    lines = output_lines(python_generation)
    assert python_generation.returncode == 0, lines
    assert lines == [f"Generating {PACKAGE}"], "\n".join(lines)


def test_the_python_client_has_a_function_for_every_operation_in_a_module_per_tag(document, python_client):
    missing = []
    for method, path, operation in document_operations(document):
        name = f"{PACKAGE}.api.{operation['tags'][0]}.{snake_case(operation['operationId'])}"
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            missing.append(f"{method.upper()} {path}: {exc}")
            continue
        source = Path(module.__file__).read_text()
        if f'"method": "{method}"' not in source or f'"{path}"' not in source:
            missing.append(f"{method.upper()} {path}: {name} calls another route")
        if not all(hasattr(module, call) for call in CALLS):
            missing.append(f"{method.upper()} {path}: {name} lacks sync/asyncio functions")
    assert not missing, "\n".join(missing)


def test_the_generated_python_client_enqueues_a_job_on_a_running_server(database_url, python_client):
    from queuelog_client import AuthenticatedClient
    from queuelog_client.api.jobs import enqueue_job, get_job
    from queuelog_client.models import EnqueueRequest

    (producer,) = create_keys(database_url, ("billing", "producer", None))
    with running_server(server_env(database_url), workers=1) as server:
        client = AuthenticatedClient(base_url=server.url, token=producer)
        body = EnqueueRequest.from_dict({"type": "email", "payload": {"invoice_id": 42}, "priority": "medium"})
        created = enqueue_job.sync_detailed(client=client, body=body, idempotency_key="invoice-42")
        assert created.status_code == 201, created.content
        replayed = enqueue_job.sync_detailed(client=client, body=body, idempotency_key="invoice-42")
        stored = get_job.sync(job_id=created.parsed.id, client=client)

    assert replayed.status_code == 200 and replayed.parsed.id == created.parsed.id
    job = stored.to_dict()
    assert (job["type"], job["status"], job["priority"], job["payload"], job["idempotency_key"]) == (
        "email",
        "pending",
        "medium",
        {"invoice_id": 42},
        "invoice-42",
    )


def test_the_generated_python_client_runs_a_batch_through_claim_and_complete(database_url, python_client):
    from queuelog_client import AuthenticatedClient
    from queuelog_client.api.jobs import enqueue_batch, get_job
    from queuelog_client.api.workers import claim_job, complete_job
    from queuelog_client.models import BatchEnqueueRequest, ClaimRequest, CompleteRequest

    producer, worker = create_keys(database_url, ("billing", "producer", None), ("mailer", "worker", None))
    with running_server(server_env(database_url), workers=1) as server:
        as_producer = AuthenticatedClient(base_url=server.url, token=producer)
        as_worker = AuthenticatedClient(base_url=server.url, token=worker)
        batch = enqueue_batch.sync_detailed(
            client=as_producer,
            body=BatchEnqueueRequest.from_dict({"jobs": [{"type": "email", "payload": {"n": n}} for n in (1, 2)]}),
        )
        assert batch.status_code == 201, batch.content
        claimed = claim_job.sync_detailed(client=as_worker, body=ClaimRequest.from_dict({"limit": 2}))
        assert claimed.status_code == 200, claimed.content
        held = claimed.parsed.to_dict()["jobs"]
        completions = [
            CompleteRequest.from_dict({"claim_token": job["claim_token"], "result": {"sent": job["payload"]["n"]}})
            for job in held
        ]
        completed = [
            complete_job.sync_detailed(job_id=job["id"], client=as_worker, body=completion)
            for job, completion in zip(held, completions, strict=True)
        ]
        stored = [get_job.sync(job_id=job["id"], client=as_producer).to_dict() for job in held]

    assert [response.status_code for response in completed] == [200, 200]
    assert sorted((job["status"], job["result"]["sent"]) for job in stored) == [("completed", 1), ("completed", 2)]


# --- openapi-typescript -------------------------------------------------------------------------------


def test_openapi_typescript_generates_without_a_single_warning(typescript_generation):
    lines = output_lines(typescript_generation)
    assert typescript_generation.returncode == 0, lines
    # Its banner and the one line saying what it wrote; a warning would be a line of its own.
    expected = [r"✨ openapi-typescript [0-9.]+", r"🚀 spec\.json → schema\.d\.ts \[[0-9.]+m?s\]"]
    assert len(lines) == len(expected), "\n".join(lines)
    assert all(re.fullmatch(pattern, line) for pattern, line in zip(expected, lines, strict=True)), "\n".join(lines)


def test_the_typescript_types_have_every_operation(document, workdir, typescript_generation):
    # paths[path][method] is the named operation when it was generated; a left-out one is undefined.
    checks = [
        f'const op{n}: Same<paths["{path}"]["{method}"], operations["{op["operationId"]}"]> = true;'
        for n, (method, path, op) in enumerate(document_operations(document))
    ]
    source = "\n".join(
        [
            'import type { operations, paths } from "./schema";',
            "type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;",
            *checks,
            "",
        ]
    )
    assert not typescript_errors(workdir, "every_operation.ts", source)


def test_the_typescript_types_take_the_bodies_the_api_takes(workdir, typescript_generation):
    # Bodies from the README's walk-through: optional fields left out, any JSON object as payload/result.
    source = """\
import type { paths } from "./schema";
type Body<P extends keyof paths, M extends "get" | "post"> =
    NonNullable<paths[P][M]> extends { requestBody?: infer R } ? NonNullable<R> extends
        { content: { "application/json": infer J } } ? J : never : never;

const enqueue: Body<"/jobs", "post"> = { type: "email", payload: { invoice_id: 42 } };
const batch: Body<"/jobs/batch", "post"> = { jobs: [{ type: "email" }, { type: "report", priority: "HIGH" }] };
const claim: Body<"/jobs/claim", "post"> = {};
const longPoll: Body<"/jobs/claim", "post"> = { limit: 10, wait: 25 };
const complete: Body<"/jobs/{job_id}/complete", "post"> = { claim_token: "t", result: { sent_to: "ap" } };
const fail: Body<"/jobs/{job_id}/fail", "post"> = { claim_token: "t" };
const completeMany: Body<"/jobs/complete", "post"> = { jobs: [{ id: 1, claim_token: "t", result: {} }] };
type Job = paths["/jobs/{job_id}"]["get"]["responses"][200]["content"]["application/json"];
const stored: Job["payload"] = { invoice_id: 42 };
const finished: Job["result"] = { sent_to: "ap@example.com" };
export { enqueue, batch, claim, longPoll, complete, fail, completeMany, stored, finished };
"""
    assert not typescript_errors(workdir, "bodies.ts", source)

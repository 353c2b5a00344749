"""The OpenAPI description of /workers (worker processes): its schemas and its paths (the package's
__init__ takes them in). Built from the constants the parser and the operations use."""

from __future__ import annotations

from typing import Any

from ...queue import worker_processes as processes
from .. import limits
from . import operations as o
from . import shapes as s

Schema = dict[str, Any]

_LIFE = (
    f"A process beats every heartbeat_seconds ({processes.BEAT_SECONDS} s); after "
    f"{int(processes.GONE_AFTER.total_seconds())} s without a beat it is gone (online: false), and a day "
    "later it is deleted. Its command is run until an admin says quiet (claim nothing more, finish the held "
    "jobs) or stop (quiet, then exit once they are done); a claim naming a quiet or stopping process is "
    "answered 204. Commands only go forward: run → quiet → stop."
)


def process() -> Schema:
    """A worker process as worker_routes.process_json shows it."""
    properties = {
        "id": {"type": "integer", "minimum": 1, "description": "The process's id: name it in claims (process_id)."},
        "key": {"type": "string", "description": "The worker key that registered it."},
        "host": {"type": "string"},
        "pid": {"type": "integer", "minimum": 1},
        "version": {"type": "string"},
        "concurrency": {"type": "integer", "minimum": 1},
        "types": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The types it claims ([]: any its key may claim).",
        },
        "started_at": s.time("When it registered."),
        "heartbeat_at": s.time("Its last beat."),
        "online": {"type": "boolean", "description": "Whether it beat lately (see heartbeat_seconds)."},
        "command": {
            "type": "string",
            "enum": [c.value for c in processes.Command],
            "description": "What it must do now: run, quiet (claim nothing more) or stop (finish, exit).",
        },
        "heartbeat_seconds": {"type": "integer", "minimum": 1, "description": "Beat this often."},
    }
    return s.closed(properties, required=list(properties))


def register_request(job_types: list[str]) -> Schema:
    return s.closed(
        {
            "host": {
                "type": "string",
                "minLength": 1,
                "maxLength": limits.MAX_HOST_CHARS,
                "pattern": s.NO_NUL_PATTERN,
                "description": "The host it runs on (no NUL, else 422).",
            },
            "pid": {"type": "integer", "minimum": 1, "maximum": limits.MAX_PID},
            "version": {
                "type": "string",
                "minLength": 1,
                "maxLength": limits.MAX_VERSION_CHARS,
                "pattern": s.NO_NUL_PATTERN,
                "description": "The worker's own version, shown on the Workers page (no NUL, else 422).",
            },
            "concurrency": {
                "type": "integer",
                "minimum": 1,
                "maximum": limits.MAX_CONCURRENCY,
                "description": "How many jobs it runs at once.",
            },
            "types": s.nullable(
                {
                    "type": "array",
                    "maxItems": limits.MAX_PROCESS_TYPES,
                    "items": {"type": "string", "enum": job_types},
                    "description": "The types it claims (default []: any its key may claim).",
                }
            ),
        },
        required=["host", "pid", "version", "concurrency"],
    )


def components(job_types: list[str]) -> dict[str, Schema]:
    return {"WorkerProcess": process(), "WorkerRegisterRequest": register_request(job_types)}


def paths() -> dict[str, Any]:
    """The /workers routes: worker keys register and beat their processes; admin keys look and command."""
    process_id = {
        "name": "process_id",
        "in": "path",
        "required": True,
        "description": "The process's id.",
        "schema": {"type": "integer", "minimum": 1},
    }
    one = o.json_response("The process as it now is.", s.ref("WorkerProcess"))
    worker, admin, tag, admin_tag = (o.WORKER,), (o.ADMIN,), o.WORKERS, o.ADMIN_TAG

    def command(name: str, summary: str) -> dict[str, Any]:
        return {
            "post": o.operation(
                admin_tag,
                f"{name}Worker",
                summary,
                admin,
                {200: one},
                errors=(*o.WITH_BODY, 404, 409),
                request=o.body("EmptyRequest", required=False),
                parameters=[process_id],
                description="The process hears it with its next beat. 409 when it is gone, or already told to "
                "stop (a stop is never undone). " + _LIFE,
            )
        }

    return {
        "/workers": {
            "post": o.operation(
                tag,
                "registerWorker",
                "Register a worker process of this key.",
                worker,
                {
                    201: o.json_response(
                        "Registered: its id and command (run).",
                        s.ref("WorkerProcess"),
                        {"Location": "The process's URL."},
                    )
                },
                errors=(*o.WITH_BODY, 429),
                request=o.body("WorkerRegisterRequest"),
                description="A key has at most QUEUELOG_MAX_WORKER_PROCESSES_PER_KEY processes online (default "
                "256): one more is refused (429, type .../max-worker-processes-reached, Retry-After) "
                "until one deregisters or goes gone. Beats are never refused. " + _LIFE,
            ),
            "get": o.operation(
                tag,
                "listWorkers",
                "Worker processes, online first.",
                (o.WORKER, o.ADMIN),
                {
                    200: o.json_response(
                        "A worker key's own processes; every process of a live key for an admin.",
                        s.closed({"workers": {"type": "array", "items": s.ref("WorkerProcess")}}, required=["workers"]),
                    )
                },
                errors=(),
            ),
        },
        "/workers/{process_id}": {
            "get": o.operation(
                tag,
                "getWorker",
                "One worker process.",
                (o.WORKER, o.ADMIN),
                {200: one},
                errors=(404,),
                parameters=[process_id],
                description="Another key's process is 404 to a worker key.",
            ),
            "delete": o.operation(
                tag,
                "deregisterWorker",
                "Deregister the process on a clean exit.",
                worker,
                {204: {"description": "Gone from the list."}},
                errors=(404,),
                parameters=[process_id],
                description="A job still running under the process goes back to pending "
                "(a released event by server): deregister once it holds nothing.",
            ),
        },
        "/workers/{process_id}/heartbeat": {
            "post": o.operation(
                tag,
                "heartbeatWorker",
                "The process is alive; learn its command.",
                worker,
                {200: one},
                errors=(*o.WITH_BODY, 404),
                request=o.body("EmptyRequest", required=False),
                parameters=[process_id],
                description="Another key's process is 404. " + _LIFE,
            )
        },
        "/workers/{process_id}/quiet": command("quiet", "Tell a process to claim nothing more."),
        "/workers/{process_id}/stop": command("stop", "Tell a process to finish its jobs and exit."),
    }

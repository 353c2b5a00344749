"""API views of worker processes: a worker key registers its processes and beats them; admins look and
command. Parse, one worker_processes call, respond."""

from __future__ import annotations

from flask import current_app, jsonify, url_for

from .. import queue
from ..core.clock import rfc3339
from ..core.patterns import JOB_TYPE, JOB_TYPE_HINT
from ..models import Role
from ..queue import worker_processes as processes
from . import bp
from .auth import current_caller, require_role
from .body import Fields, json_body, parse_empty
from .limits import (
    MAX_CONCURRENCY,
    MAX_HOST_CHARS,
    MAX_PID,
    MAX_PROCESS_ID,
    MAX_PROCESS_TYPES,
    MAX_VERSION_CHARS,
)

WORKER, ADMIN = Role.WORKER.value, Role.ADMIN.value


def process_json(state: processes.ProcessState) -> dict:
    """A process as the API shows it; ``command`` is what it must do now, ``online`` whether it beats."""
    return {
        "id": state.id,
        "key": state.key,
        "host": state.host,
        "pid": state.pid,
        "version": state.version,
        "concurrency": state.concurrency,
        "types": state.types,
        "started_at": rfc3339(state.started_at),
        "heartbeat_at": rfc3339(state.heartbeat_at),
        "online": state.online,
        "command": state.command,
        "heartbeat_seconds": processes.BEAT_SECONDS,
    }


def parse_register() -> processes.NewProcess:
    """POST /workers: host, pid, version, concurrency and types (optional: [] = any the key may claim)."""
    fields = Fields(json_body(), {"host", "pid", "version", "concurrency", "types"})
    host = fields.string("host", required=True)
    if host is not None and not 1 <= len(host) <= MAX_HOST_CHARS:
        fields.error("host", f"must be 1-{MAX_HOST_CHARS} characters")
    if fields.body.get("pid") is None:
        fields.error("pid", "is required")
    pid = fields.integer("pid", None, 1, MAX_PID)
    version = fields.string("version", required=True)
    if version is not None and not 1 <= len(version) <= MAX_VERSION_CHARS:
        fields.error("version", f"must be 1-{MAX_VERSION_CHARS} characters")
    if fields.body.get("concurrency") is None:
        fields.error("concurrency", "is required")
    concurrency = fields.integer("concurrency", None, 1, MAX_CONCURRENCY)
    types = _types(fields)
    fields.done()
    return processes.NewProcess(host=host, pid=pid, version=version, concurrency=concurrency, types=types)


def _types(fields: Fields) -> tuple[str, ...]:
    raw = fields.body.get("types")
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > MAX_PROCESS_TYPES:
        fields.error("types", f"must be a list of up to {MAX_PROCESS_TYPES} job types")
        return ()
    allowlist = set(current_app.config["JOB_TYPES"])
    for index, name in enumerate(raw):
        if not isinstance(name, str) or not JOB_TYPE.fullmatch(name):
            fields.error(f"types/{index}", JOB_TYPE_HINT)
        elif name not in allowlist:
            fields.error(f"types/{index}", f"job type {name!r} is not on this server's QUEUELOG_JOB_TYPES")
    return tuple(dict.fromkeys(raw)) if not fields.errors else ()


def _in_range(process_id: int) -> int:
    """An id the column cannot hold names nothing: 404, like any unknown id (not a driver error)."""
    if process_id > MAX_PROCESS_ID:
        raise processes.ProcessNotFound(f"worker process {process_id} does not exist, or belongs to another key")
    return process_id


@bp.post("/workers")
@require_role(WORKER)
def register_worker():
    """Register a worker process of this key (201): its id, and its command (run) and beat interval."""
    state = processes.register(current_caller(), parse_register())
    response = jsonify(process_json(state))
    response.status_code = 201
    response.headers["Location"] = url_for("api.get_worker", process_id=state.id)
    return response


@bp.get("/workers")
@require_role(WORKER, ADMIN)
def list_workers():
    """A worker key's own processes; every process of a live key for an admin key. Online first."""
    return jsonify({"workers": [process_json(state) for state in processes.list_for(current_caller())]})


@bp.get("/workers/<int:process_id>")
@require_role(WORKER, ADMIN)
def get_worker(process_id: int):
    return jsonify(process_json(processes.get(current_caller(), _in_range(process_id))))


@bp.post("/workers/<int:process_id>/heartbeat")
@require_role(WORKER)
def heartbeat_worker(process_id: int):
    """The process is alive; the answer's ``command`` says whether to keep claiming (run), quiet or stop."""
    parse_empty()
    return jsonify(process_json(processes.beat(current_caller(), _in_range(process_id))))


@bp.delete("/workers/<int:process_id>")
@require_role(WORKER)
def deregister_worker(process_id: int):
    """A clean exit: the process leaves the list (204); a job still running under it is given back."""
    queue.deregister_process(current_caller(), _in_range(process_id))
    return "", 204


@bp.post("/workers/<int:process_id>/quiet")
@require_role(ADMIN)
def quiet_worker(process_id: int):
    """Tell an online process to claim nothing more and finish what it holds (409 if gone or stopping)."""
    parse_empty()
    state = processes.give_command(_in_range(process_id), processes.Command.QUIET, current_caller().actor)
    return jsonify(process_json(state))


@bp.post("/workers/<int:process_id>/stop")
@require_role(ADMIN)
def stop_worker(process_id: int):
    """Tell an online process to finish what it holds and exit (409 if gone)."""
    parse_empty()
    state = processes.give_command(_in_range(process_id), processes.Command.STOP, current_caller().actor)
    return jsonify(process_json(state))

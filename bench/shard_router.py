"""A prototype of the router docs/scaling.md designs: one HTTP API in front of several queuelog servers, each
on its own database and owning some job types (``gunicorn bench.shard_router:app``; ``python -m bench.shards``
starts it).

It is measured, not shipped: producers and the shipped worker talk to it exactly as to one queuelog.
- A job lives on the shard that owns its type, and its id says which shard: shard k's ids start at
  ``k * ID_SPAN + 1`` (the benchmark moves each shard's sequence there), so ``/jobs/{id}/...`` needs no lookup.
- A claim asks the shards that own the types it names (all of them for "any type"), starting with a different
  shard each time; with ``wait`` it long-polls them in turn, ``POLL_SLICE`` at a time.
- ``POST /jobs/complete`` is split by shard and its answers put back in the caller's order.
- ``/metrics`` is every shard's, each sample labelled ``shard``.
- Refused with a 422, because no shard could keep the promise alone: a batch whose jobs fall on two shards (a
  batch is one transaction) and a job whose ``depends_on`` names a job on another shard.
- API keys: the router maps the caller's key to each shard's key of the same holder (``QUEUELOG_SHARD_KEYS``);
  worker processes are not registered (``/workers`` answers 404, and the worker then runs unregistered).

Settings: ``QUEUELOG_SHARDS`` = JSON ``[{"name", "url", "types": [...]}, ...]`` in id order;
``QUEUELOG_SHARD_KEYS`` = JSON ``{caller's key: [key on shard 0, key on shard 1, ...]}``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
from dataclasses import dataclass

import requests
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.wrappers import Request, Response

ID_SPAN = 10**12
POLL_SLICE = 1.0  # seconds a waiting claim spends on one shard before it asks the next
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Shard:
    index: int
    name: str
    url: str
    types: frozenset[str]


class ShardRouter:
    def __init__(self, shards: list[Shard], keys: dict[str, list[str]]):
        self.shards, self.keys = shards, keys
        self.owner = {job_type: shard for shard in shards for job_type in shard.types}
        self.turn = itertools.count()
        self.local = threading.local()

    def __call__(self, environ, start_response):
        return self.route(Request(environ))(environ, start_response)

    # --- routing ---------------------------------------------------------------------------------------

    def route(self, request: Request) -> Response:
        parts = request.path.strip("/").split("/")
        if request.path == "/metrics":
            return self.metrics(request)
        if parts[0] == "workers":
            return problem(404, "worker processes are not registered through the shard router")
        if parts[0] != "jobs":
            return problem(501, f"the shard router prototype does not route {request.path}")
        if request.method == "POST" and request.path == "/jobs":
            return self.enqueue(request)
        if request.method == "POST" and request.path == "/jobs/batch":
            return self.enqueue_batch(request)
        if request.method == "POST" and request.path == "/jobs/claim":
            return self.claim(request)
        if request.method == "POST" and request.path == "/jobs/complete":
            return self.complete_many(request)
        if len(parts) >= 2 and parts[1].isdigit():
            return self.forward(self.shard_of_id(int(parts[1])), request)
        return problem(501, f"the shard router prototype does not route {request.method} {request.path}")

    def shard_of_id(self, job_id: int) -> Shard:
        return self.shards[min(max(job_id - 1, 0) // ID_SPAN, len(self.shards) - 1)]

    def shard_of_type(self, job_type) -> Shard:
        # A type no shard owns goes to the first, whose answer (a 422 naming the type) is the one queuelog gives.
        return self.owner.get(job_type, self.shards[0])

    def enqueue(self, request: Request) -> Response:
        body = request.get_json(silent=True)
        job_type = body.get("type") if isinstance(body, dict) else None
        shard = self.shard_of_type(job_type)
        refused = self.parents_elsewhere(body, shard, "")
        return refused or self.forward(shard, request)

    def enqueue_batch(self, request: Request) -> Response:
        body = request.get_json(silent=True)
        jobs = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(jobs, list) or not jobs:
            return self.forward(self.shards[0], request)  # queuelog's own 422 for a malformed batch
        shards = {self.shard_of_type(job.get("type") if isinstance(job, dict) else None) for job in jobs}
        if len(shards) > 1:
            names = ", ".join(sorted(shard.name for shard in shards))
            return problem(422, f"a batch is one transaction, and its jobs' types live on several shards ({names})")
        shard = shards.pop()
        for n, job in enumerate(jobs):
            refused = self.parents_elsewhere(job, shard, f"/jobs/{n}")
            if refused:
                return refused
        return self.forward(shard, request)

    def parents_elsewhere(self, job, shard: Shard, pointer: str) -> Response | None:
        parents = job.get("depends_on") if isinstance(job, dict) else None
        for n, parent in enumerate(parents if isinstance(parents, list) else []):
            if isinstance(parent, int) and not isinstance(parent, bool) and self.shard_of_id(parent) is not shard:
                return problem(422, f"{pointer}/depends_on/{n} names a job on another shard than this job's type")
        return None

    def claim(self, request: Request) -> Response:
        body = request.get_json(silent=True)
        body = body if isinstance(body, dict) else {}
        asked = body.get("types")
        wanted = [
            (shard, sorted(shard.types & set(asked)) if isinstance(asked, list) else None) for shard in self.shards
        ]
        wanted = [(shard, types) for shard, types in wanted if types is None or types]
        if not wanted:
            return self.forward(self.shards[0], request)  # types no shard owns: queuelog's own 422
        start = next(self.turn) % len(wanted)
        order = wanted[start:] + wanted[:start]
        wait = body.get("wait") if isinstance(body.get("wait"), (int, float)) else 0
        deadline = time.monotonic() + wait
        slice_wait = 0  # first round: ask every shard at once, without waiting
        while True:
            for shard, types in order:
                answer = self.send(shard, request, shard_claim(body, types, slice_wait))
                if answer.status_code != 204:
                    return answer
            left = deadline - time.monotonic()
            if left <= 0:
                return answer
            slice_wait = min(POLL_SLICE, left)

    def complete_many(self, request: Request) -> Response:
        body = request.get_json(silent=True)
        items = body.get("jobs") if isinstance(body, dict) else None
        if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("id"), int) for i in items):
            return self.forward(self.shards[0], request)
        groups: dict[Shard, list[int]] = {}
        for n, item in enumerate(items):
            groups.setdefault(self.shard_of_id(item["id"]), []).append(n)
        results: list = [None] * len(items)
        for shard, positions in groups.items():
            answer = self.send(shard, request, {**body, "jobs": [items[n] for n in positions]})
            if answer.status_code != 200:
                return answer
            for n, result in zip(positions, json.loads(answer.get_data())["results"], strict=True):
                results[n] = result
        return Response(json.dumps({"results": results}), 200, content_type="application/json")

    def metrics(self, request: Request) -> Response:
        lines: list[str] = []
        for shard in self.shards:
            answer = self.send(shard, request, None)
            if answer.status_code != 200:
                return answer
            for family in text_string_to_metric_families(answer.get_data(as_text=True)):
                for sample in family.samples:
                    labels = {**sample.labels, "shard": shard.name}
                    text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
                    lines.append(f"{sample.name}{{{text}}} {sample.value}")
        return Response("\n".join(lines) + "\n", 200, content_type="text/plain; version=0.0.4")

    # --- sending ----------------------------------------------------------------------------------------

    def forward(self, shard: Shard, request: Request) -> Response:
        return self.send(shard, request, ...)

    def send(self, shard: Shard, request: Request, body) -> Response:
        """``request`` sent on to ``shard`` with the caller's key for it; ``body`` replaces its JSON (``...``: as
        it came; None: no body)."""
        session = getattr(self.local, "session", None) or self.new_session()
        headers = {"Content-Type": request.headers.get("Content-Type", "application/json")}
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        mapped = self.keys.get(key)
        if mapped:
            headers["Authorization"] = f"Bearer {mapped[shard.index]}"
        elif key:
            headers["Authorization"] = f"Bearer {key}"
        data = request.get_data() if body is ... else (None if body is None else json.dumps(body))
        answer = session.request(
            request.method, shard.url + request.full_path.rstrip("?"), data=data, headers=headers, timeout=60
        )
        kept = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after", "location")}
        return Response(answer.content, answer.status_code, headers=kept)

    def new_session(self) -> requests.Session:
        self.local.session = requests.Session()
        return self.local.session


def shard_claim(body: dict, types: list[str] | None, wait: float) -> dict:
    """The claim asked of one shard: its share of the types (none: any of its own), and this round's wait."""
    asked = {k: v for k, v in body.items() if k not in ("types", "wait")}
    if types is not None:
        asked["types"] = types
    if wait > 0:
        asked["wait"] = wait
    return asked


def problem(status: int, detail: str) -> Response:
    title = {404: "Not Found", 422: "Unprocessable Content", 501: "Not Implemented"}[status]
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    return Response(json.dumps(body), status, content_type=PROBLEM)


def from_environment() -> ShardRouter:
    shards = [
        Shard(n, spec["name"], spec["url"].rstrip("/"), frozenset(spec["types"]))
        for n, spec in enumerate(json.loads(os.environ["QUEUELOG_SHARDS"]))
    ]
    return ShardRouter(shards, json.loads(os.environ.get("QUEUELOG_SHARD_KEYS", "{}")))


app = from_environment() if "QUEUELOG_SHARDS" in os.environ else None

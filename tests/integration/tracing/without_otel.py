"""Run by test_without_otel.py, in a process of its own where ``opentelemetry`` cannot be imported (as if the
``otel`` extra were not installed): a producer enqueues, a worker key claims, ``queuelog-worker``'s runner runs a job,
all over HTTP against the app on a thread. Prints one JSON line: what ran, and which opentelemetry modules were
imported (none, or the test fails).

    python -m tests.integration.tracing.without_otel DATABASE_URL
"""

from __future__ import annotations

import importlib.abc
import json
import sys


class _Refused(importlib.abc.MetaPathFinder):
    """Refuses every ``opentelemetry`` module, as an interpreter without the package would."""

    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r} (refused for this test)", name=name)
        return None


def main(database_url: str) -> dict:
    from queuelog import create_app
    from queuelog.auth.keys import create_key
    from queuelog.core import telemetry
    from queuelog.worker import Client, Worker
    from tests.support.database import app_config
    from tests.support.in_process import running_worker, serving

    app = create_app(app_config(database_url))
    with app.app_context(), serving(app) as url:
        producer = Client(url, create_key("producer-no-otel", "producer", None, None))
        claimed = producer.enqueue("report", {})
        [claim] = Client(url, create_key("claimer-no-otel", "worker", None, None)).claim(["report"])
        worker = Worker()
        worker.handler("email")(lambda payload: {"ran": True})
        job = producer.enqueue("email", {})
        with running_worker(worker, url, create_key("worker-no-otel", "worker", None, None)):
            ran = producer.wait(job["id"], timeout=15)
    return {
        "enabled": telemetry.enabled(),
        "claimed": claim["id"] == claimed["id"],
        "ran": ran["status"],
        "result": ran["result"],
        "imported": sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry"),
    }


if __name__ == "__main__":
    sys.meta_path.insert(0, _Refused())
    print(json.dumps(main(sys.argv[1])))

"""A claimer that runs in its own process with its own app, for the concurrent-claim tests (V-06).

It lives in an importable module (not a test file) so ``multiprocessing`` with the spawn start
method can find it; spawn gives each process a clean interpreter with no inherited connections.
"""

from __future__ import annotations


def claim_until_empty(config: dict, secret: str, start, results, limit: int | None = None) -> None:
    """Build an app on ``config``'s database, wait at ``start``, claim until 204, report the ids.

    Puts ``("ok", [ids])`` or ``("error", text)`` on ``results``, so a failure reaches the test.
    """
    try:
        from queuelog import create_app

        app = create_app(config)
        client = app.test_client()
        headers = {"Authorization": f"Bearer {secret}"}
        body = {"limit": limit} if limit else {}
        claimed: list[int] = []
        start.wait(timeout=60)
        for _ in range(10_000):  # bounded: far more rounds than jobs
            response = client.post("/jobs/claim", json=body, headers=headers)
            if response.status_code == 204:
                break
            if response.status_code != 200:
                raise RuntimeError(f"claim answered {response.status_code}: {response.data[:300]!r}")
            data = response.get_json()
            if limit:
                claimed.extend(job["id"] for job in data["jobs"])
            else:
                claimed.append(data["id"])
        results.put(("ok", claimed))
    except Exception as error:  # noqa: BLE001 - the parent test reports it
        results.put(("error", f"{type(error).__name__}: {error}"))

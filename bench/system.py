"""What every measured system offers the scheduler in :mod:`bench.schedule`.

A system is started once (``with system:``), then asked for rounds: fill a
queue (``enqueue``) and empty it (``drain``).  The scheduler interleaves the
systems round by round, so the figures a ratio divides were taken minutes,
not a quarter of an hour, apart on this shared machine.
"""

from __future__ import annotations

from collections import Counter

from bench.config import Check, Config


class System:
    """Base class: a queue (or the ceiling) that can be filled and drained."""

    column = ""                                  # report column key
    enqueue_batches: frozenset[int] = frozenset({1})  # jobs per enqueue call it supports
    drain_paths: frozenset[str] = frozenset({"single"})
    # True when jobs enqueued for an enqueue-only measurement may simply be
    # dropped (the next enqueue starts afresh); otherwise they are drained.
    discard_untimed = False

    def __enter__(self) -> "System":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def enqueue(self, jobs: int, batch: int, cfg: Config) -> tuple[float, list]:
        """Enqueue ``jobs`` no-op jobs; returns (jobs/s, job ids)."""
        raise NotImplementedError

    def fill_for_drain(self, jobs: int, cfg: Config) -> list:
        """Untimed enqueue before a drain whose enqueue is not measured."""
        return self.enqueue(jobs, max(self.enqueue_batches), cfg)[1]

    def drain(self, path: str, workers: int, ids: list, cfg: Config,
              metric: str | None) -> tuple[float | None, list[Check]]:
        """Complete every job in ``ids``; returns (jobs/s, correctness checks)."""
        raise NotImplementedError


def verify_once(target: str, what: str, enqueued: list, runs: list[dict],
                metric: str | None = None) -> Check:
    """Compare what was enqueued with what workers report completed."""
    done = [i for r in runs for i in r["ids"]]
    dupes = [i for i, n in Counter(done).items() if n > 1]
    missing = set(enqueued) - set(done)
    errors = sum(r.get("errors", 0) for r in runs)
    samples = [s for r in runs for s in r.get("error_samples", [])][:3]
    ok = not dupes and not missing and len(done) == len(enqueued)
    detail = (f"{len(done)} completions for {len(enqueued)} jobs, {len(dupes)} duplicated, "
              f"{len(missing)} missing, {errors} retried/unexpected responses")
    if samples:
        detail += f"; e.g. {samples}"
    return Check(target, what, ok, detail, metric)

"""Run one function in N real worker processes and time them together.

Every process does its own setup (sessions, connections), then all meet at a
barrier together with the parent.  The clock starts when the barrier opens,
so process start-up and imports are never part of a measurement, and it stops
at the latest "last completion" timestamp any process reports.

``time.monotonic()`` is CLOCK_MONOTONIC on Linux, which is system-wide, so
timestamps taken in different processes (including peer worker processes we
did not write) are directly comparable.
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queue_mod
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# fork: children inherit the already-imported modules, so a worker is ready
# in milliseconds; queuelog, the ceiling and the peers all get the same deal.
_CTX = mp.get_context("fork")


class WorkerFailed(RuntimeError):
    """A worker process raised or did not report back in time."""


@dataclass
class ProcRun:
    """What one timed multi-process run produced."""

    start: float  # monotonic time the barrier opened
    elapsed: float  # seconds from barrier release to the last completion
    results: list[dict[str, Any]] = field(default_factory=list)


def _child(fn: Callable, arg: Any, barrier, out) -> None:
    def go() -> float:
        barrier.wait()
        return time.monotonic()

    try:
        result = fn(arg, go)
    except BaseException:  # report everything; the parent decides
        with_tb = traceback.format_exc()
        barrier.abort()  # never leave the parent waiting at the barrier
        out.put({"error": with_tb})
        return
    out.put(result)


def run_processes(fn: Callable[[Any, Callable[[], float]], dict], args: list[Any], timeout: float) -> ProcRun:
    """Run ``fn(arg, go)`` once per ``arg``, each in its own process.

    ``fn`` must call ``go()`` exactly once when it is ready to start the
    measured part, and return a dict with ``"end"`` = monotonic time of its
    last completed unit of work (or ``None`` if it did nothing).
    """
    barrier = _CTX.Barrier(len(args) + 1, timeout=timeout)
    out = _CTX.Queue()
    # Not daemonic: huey's consumer must be able to start its own worker
    # processes; the finally block below reaps every child either way.
    procs = [_CTX.Process(target=_child, args=(fn, a, barrier, out)) for a in args]
    for p in procs:
        p.start()
    try:
        try:
            barrier.wait()
        except Exception as exc:  # BrokenBarrierError: a child failed in setup
            raise WorkerFailed(_first_error(out) or f"workers not ready: {exc!r}") from None
        start = time.monotonic()
        results = []
        deadline = start + timeout
        for _ in args:  # bounded: exactly one result per process
            remaining = deadline - time.monotonic()
            try:
                results.append(out.get(timeout=max(remaining, 0.1)))
            except queue_mod.Empty:
                raise WorkerFailed(f"workers did not finish within {timeout:.0f}s") from None
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise WorkerFailed(errors[0])
        ends = [r["end"] for r in results if r.get("end") is not None]
        elapsed = (max(ends) - start) if ends else 0.0
        return ProcRun(start=start, elapsed=elapsed, results=results)
    finally:
        for p in procs:  # only the processes started above, by handle/PID
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)


def _first_error(out) -> str | None:
    try:
        item = out.get(timeout=2)
    except queue_mod.Empty:
        return None
    return item.get("error")


def split(total: int, parts: int) -> list[int]:
    """Split ``total`` units of work as evenly as possible over ``parts``."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def fmt_rate(rate: float | None) -> str:
    """A jobs/s figure for progress lines; "–" when nothing was measured."""
    return "–" if rate is None else f"{rate:,.0f}"

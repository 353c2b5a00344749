"""What the query-plan tests share: a deep queue filled in one statement, the statements the app really sends
(captured while a queue call runs), and how each database explains them."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from sqlalchemy import text

from queuelog.database.engine import dialect_name
from queuelog.extensions import db
from queuelog.sql import runner
from queuelog.waiting import wakeup

_FILL = {
    # Pending jobs of four types and four priorities, plus finished ones the partial index leaves out.
    "postgresql": """
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT (ARRAY['email','report','noop','resize-image'])[1 + n % 4], '{}', (n / 4 % 4) * 10,
               CASE WHEN n <= :finished THEN 'completed' ELSE 'pending' END, 0, 3, 0,
               now() AT TIME ZONE 'utc' - interval '1 minute', now() AT TIME ZONE 'utc',
               now() AT TIME ZONE 'utc'
        FROM generate_series(1, :total) AS n""",
    "sqlite": """
        WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :total)
        INSERT INTO jobs (type, payload, priority, status, retry_count, max_retries, stall_count,
                          run_at, created_at, updated_at)
        SELECT CASE i % 4 WHEN 0 THEN 'email' WHEN 1 THEN 'report' WHEN 2 THEN 'noop' ELSE 'resize-image' END,
               '{}', (i / 4 % 4) * 10, CASE WHEN i <= :finished THEN 'completed' ELSE 'pending' END, 0, 3, 0,
               datetime('now', '-1 minute'), datetime('now'), datetime('now')
        FROM n""",
}

#: In the statement that picks the jobs a claim takes: PostgreSQL's CLAIM (an UPDATE), SQLite's CLAIM_PICK
#: (its CLAIM then marks the picked ids, found by primary key).
PICK = "ORDER BY priority DESC, fair_tag, id"


def fill_jobs(conn, total: int, finished: int) -> None:
    """``total`` jobs due a minute ago, of four types and four priorities; the first ``finished`` completed.
    Announced as the queue announces the jobs it makes pending (waiting/claim_floor.py)."""
    conn.execute(text(_FILL[dialect_name()]), {"total": total, "finished": finished})
    wakeup.jobs_ready(conn)


def capture(run: Callable[[], object], keep: Callable[[str, str], bool]) -> tuple[list[tuple[str, object]], float]:
    """Run ``run()``; every statement it sent that ``keep(sql, way)`` keeps (way: ``"send"``, or ``"read"`` for
    what runner.on_driver reads), with its parameters, and how long the run took."""
    seen = []
    send, on_driver = runner.send, runner.on_driver

    def capture_send(conn, sql, params, *rest, **options):
        if keep(sql, "send"):
            seen.append((sql, params))
        return send(conn, sql, params, *rest, **options)

    def capture_read(conn, sql, params, work):
        if keep(sql, "read"):
            seen.append((sql, params))
        return on_driver(conn, sql, params, work)

    runner.send, runner.on_driver = capture_send, capture_read
    try:
        started = time.perf_counter()
        run()
        took = time.perf_counter() - started
    finally:
        runner.send, runner.on_driver = send, on_driver
    return seen, took


def first_holding(run: Callable[[], object], marker: str) -> tuple[str, object, float]:
    """Run ``run()``; the first statement it sent that holds ``marker``, its parameters, and how long it took."""
    seen, took = capture(run, lambda sql, _way: marker in sql)
    assert seen, f"no statement with {marker!r} was sent"
    return seen[0][0], seen[0][1], took


def explain(statement: str, parameters) -> str:
    """The plan of the statement: EXPLAIN on PostgreSQL (a line per row), EXPLAIN QUERY PLAN on SQLite (its detail
    column)."""
    explain_it = "EXPLAIN " if dialect_name() == "postgresql" else "EXPLAIN QUERY PLAN "
    if isinstance(parameters, list):  # SQLite's INSERT of new jobs binds by position
        parameters = tuple(parameters)
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(explain_it + statement, parameters).all()
    return "\n".join(str(row[-1]) for row in rows)


def reads_pages(line: str) -> bool:
    """Does this scan read more than a handful of pages? On PostgreSQL jobs and their events are partitioned
    (docs/storage.md): a statement that seeks a job by id visits every day of history, and the planner rightly
    reads a day not begun yet, or the nearly empty default partition, in one pass of its page or two."""
    cost = re.search(r"cost=[\d.]+\.\.([\d.]+)", line)
    return cost is None or float(cost.group(1)) >= TINY_SCAN_COST


#: A scan PostgreSQL costs under this reads fewer pages than it (seq_page_cost 1 a page, a row a hundredth).
TINY_SCAN_COST = 10.0


def scans_of_jobs(plan: str) -> list[str]:
    """Lines of the plan that read jobs other than by seeking an index (or walking the claim order)."""
    if dialect_name() == "postgresql":
        return [
            line
            for line in plan.splitlines()
            if re.search(r"(Seq Scan|Bitmap Heap Scan) on jobs", line) and reads_pages(line)
        ]
    return [
        line
        for line in plan.splitlines()
        if re.match(r"\s*SCAN (jobs|j|p|r)\b", line) and "ix_jobs_claim_order" not in line
    ]

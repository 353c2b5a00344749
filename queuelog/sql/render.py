"""The statements that matter most, as they are sent: ``python -m queuelog.sql.render`` writes them to rendered/.

A statement in sqlite.py, postgresql.py or common.py is a template: the runner fills its ``{slots}`` with
pieces (FLOW, TYPES, STALE, …), wraps a logged write in LOGGED on PostgreSQL and spells SQLite's lists
out. These files are what comes out, per dialect and per shape a statement is sent in, put together by
the runner's own code (``runner._bind`` and ``runner._text``), so a reviewer reads the SQL that runs.
Only whitespace differs from what is sent: sqlparse lays each statement out one clause per line (it is in
the ``test`` extra). tests/unit/test_sql_rendered.py checks that the files are current.
"""

from __future__ import annotations

import sys
from pathlib import Path

from . import runner
from .values import Claim, JobStatus, Leave

RENDERED = Path(__file__).resolve().parent / "rendered"
#: Lists of columns and values are wrapped at about this width.
_WIDTH = 120


class _AsGiven:
    """Times as the caller gives them: a rendering has values only to say which slots are filled."""

    @staticmethod
    def to_db(value):
        return value


def _sent(dialect: str, name: str, values: dict, logged: bool = False, leave: Leave | None = None) -> str:
    shape: tuple = ()
    if leave is not None:
        values = {**values, **leave.params()}
        shape = (leave.claim, leave.parts())
    params, lists, filled = runner._bind(dialect, values, _AsGiven)
    return runner._text(dialect, name, lists, filled, logged, shape)


def _readable(sql: str) -> str:
    """``sql`` laid out one clause per line by sqlparse (the test extra: only this tool and its test need it)."""
    import sqlparse

    return sqlparse.format(sql, reindent=True, wrap_after=_WIDTH - 10).strip() + ";\n"


#: The claim's values: two types asked for, a named worker process, a limit of 10, a claim floor (PostgreSQL,
#: waiting/claim_floor.py). Without types the claim drops ``{types}``; without a worker process,
#: ``{process_runs}``; without a floor, ``{floor}``.
_CLAIM = {
    "now": "now",
    "lease_until": "lease_until",
    "worker": "w",
    "token": "t",
    "process": 1,
    "key_id": 1,
    "limit": 10,
    "types": ["a", "b"],
    "locked_types": ["a"],
    "version": 1,
}
#: A claim floor, which only PostgreSQL's claim has.
_FLOOR = {"postgresql": {"floor": 1}, "sqlite": {}}
_IDS = {"ids": [1, 2], "worker": "w", "token": "t"}
_COMPLETE = Leave(JobStatus.COMPLETED, Claim.END, "now", completes=True, result="{}")
_HEARTBEAT = Leave(JobStatus.RUNNING, Claim.KEEP, "now", lease_until="lease_until", progress="{}")
_STALLED = Leave(JobStatus.PENDING, Claim.DROP, "now", run_at="run_at", spends_retry=True, stalled=True)


def _claim(dialect: str) -> list[tuple[str, str]]:
    shapes = []
    for flow in (False, True):
        values = {**_CLAIM, **_FLOOR[dialect], "flow": True if flow else None}
        how = "with flow control (a type of the claim is paused or limited)" if flow else "without flow control"
        if dialect == "postgresql":
            if flow:
                shapes.append(("FLOW_LOCK, first, in the claim's transaction", _sent(dialect, "FLOW_LOCK", values)))
            shapes.append((f"CLAIM {how}, logged", _sent(dialect, "CLAIM", values, logged=True)))
        else:
            shapes.append((f"CLAIM_PICK {how}", _sent(dialect, "CLAIM_PICK", values)))
    if dialect == "sqlite":
        shapes.append(("CLAIM: the picked ids marked running", _sent(dialect, "CLAIM", {**_CLAIM, "ids": [1, 2]})))
        shapes.append(("CLAIMED: the jobs read back", _sent(dialect, "CLAIMED", {"ids": [1, 2], "token": "t"})))
        shapes.append(("LOG_EVENTS: their event rows (executemany)", runner.sqlite.LOG_EVENTS))
    return shapes


def _finish(dialect: str) -> list[tuple[str, str]]:
    return [
        ("FINISH: complete, logged", _sent(dialect, "FINISH", dict(_IDS), True, _COMPLETE)),
        ("FINISH: a heartbeat", _sent(dialect, "FINISH", dict(_IDS), False, _HEARTBEAT)),
    ]


def _take_back(dialect: str) -> list[tuple[str, str]]:
    return [
        (
            "TAKE_BACK: the reaper's, a stalled run back to pending, logged",
            _sent(dialect, "TAKE_BACK", {"ids": [1, 2], "token": "t"}, True, _STALLED),
        )
    ]


FILES = {"claim": _claim, "finish": _finish, "take_back": _take_back}


def render(name: str, dialect: str) -> str:
    """The text of rendered/<name>.<dialect>.sql."""
    parts = [f"-- {name} on {dialect}, as sent (whitespace aside). Written by: python -m queuelog.sql.render\n"]
    if dialect == "sqlite":
        parts.append("-- A logged write is followed by LOG_EVENTS in the same transaction.\n")
    parts += [f"\n-- {title}\n{_readable(sql)}" for title, sql in FILES[name](dialect)]
    return "".join(parts)


def files() -> dict[Path, str]:
    """Every rendered file and its text."""
    return {
        RENDERED / f"{name}.{dialect}.sql": render(name, dialect)
        for name in FILES
        for dialect in ("sqlite", "postgresql")
    }


def main() -> int:
    RENDERED.mkdir(exist_ok=True)
    for path, text in files().items():
        path.write_text(text)
        print(path.relative_to(RENDERED.parent.parent.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())

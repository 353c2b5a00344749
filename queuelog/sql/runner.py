"""The runner: sends a named statement of sqlite.py, postgresql.py or common.py on the database driver.

Why the driver and not SQLAlchemy Core: enqueue, claim and complete are most of the traffic, and Core's
per-statement set-up cost more than their SQL. A statement runs on ``conn``'s own driver connection,
so inside the transaction that ``write_transaction`` began and will commit.

A write given a :class:`Log` records an event row for every job it returns: on PostgreSQL in the same
statement (wrapped in LOGGED), on SQLite with LOG_EVENTS right after it, in the same transaction.
"""

from __future__ import annotations

import contextlib
import enum
import functools
from datetime import datetime

from sqlalchemy.engine import Connection

from ..database.driver import execute_plain, on_driver  # noqa: F401  (execute_plain: sql's export)
from . import common, postgresql, sqlite
from .values import JOB_TIMES, Claim, JobRow, Leave, Log, NewJobRow, Times

_DIALECTS = {"sqlite": sqlite, "postgresql": postgresql}


def statement(dialect: str, name: str):
    """Statement or piece ``name`` as ``dialect`` spells it: the dialect module's own if it has one (it spells
    it differently), else common.py's, in the dialect's spelling. Looked up once per shape of a statement:
    _text and _enqueue_text keep what they spelled."""
    own = getattr(_DIALECTS[dialect], name, None)
    return own if own is not None else getattr(common.SPELLED[dialect], name)


#: Optional pieces of a statement: {slot} → (the value that asks for it, the dialect module's piece). A slot
#: is filled when its value is given (not None), and left empty when not; in this order, so that a piece
#: may hold later slots itself (FLOW holds {types}).
_OPTIONAL = {
    "flow": ("flow", "FLOW"),
    "flow_pick": ("flow", "FLOW_PICK"),
    "walk_off": ("flow", "WALK_OFF"),
    "floor": ("floor", "FLOOR"),
    "types": ("types", "TYPES"),
    "claimed_before": ("claimed_before", "CLAIMED_BEFORE"),
    "process_runs": ("process", "PROCESS_RUNS"),
    "ends_alone": ("limited", "ENDS_ALONE"),
    "stale": ("version", "STALE"),
}
#: Pieces every statement that holds their slot gets: {slot} → the dialect module's piece. A dialect without
#: the piece leaves the slot empty (SQLite has no IN_FLIGHT: one table holds every job there).
_ALWAYS = {"in_flight": "IN_FLIGHT"}
#: What becomes of the claim in a move out of running: the piece of LEAVE_RUNNING that says it.
_CLAIM_PIECES = {Claim.KEEP: "CLAIM_KEPT", Claim.END: "CLAIM_ENDED", Claim.DROP: "CLAIM_DROPPED"}
_FAIR_TAG = NewJobRow._fields.index("fair_tag")
_NEW_TIMES = frozenset(
    i
    for i, name in enumerate(NewJobRow._fields)
    if name in {"run_at", "created_at", "updated_at", "expires_at", "scheduled_for"}
)


def run(
    conn: Connection,
    name: str,
    values: dict,
    log: Log | None = None,
    make=JobRow,
    times_at: tuple[int, ...] = JOB_TIMES,
    leave: Leave | None = None,
) -> list:
    """Send statement ``name`` with ``values``; the rows it returns as ``make`` rows (JobRow by default).

    With ``log``, every returned job also gets its event row, in the same statement or transaction.
    ``leave`` says what a move out of running writes (FINISH, TAKE_BACK): its values join ``values``.
    """
    dialect = conn.dialect.name
    times = _times_for(conn)
    shape: tuple = ()
    if leave is not None:
        values.update(leave.params())
        shape = (leave.claim, leave.parts())
    params, lists, filled = _bind(dialect, values, times)
    sql = _text(dialect, name, lists, filled, log is not None, shape)
    if log is not None and dialect == "postgresql":
        params.update(_log_params(log, times))
    return send(conn, sql, params, log, times, make, times_at, _planner(dialect, name))


def scalar(conn: Connection, name: str, values: dict):
    """Send read ``name`` and return the first column of its first row."""
    dialect = conn.dialect.name
    params, lists, filled = _bind(dialect, values, _times_for(conn))
    sql = _text(dialect, name, lists, filled, False, ())
    return on_driver(conn, sql, params, lambda cursor: cursor.execute(sql, params).fetchone()[0])


def rowcount(conn: Connection, name: str, values: dict) -> int:
    """Send write ``name`` (no RETURNING, no event: a DELETE) and return how many rows it touched."""
    dialect = conn.dialect.name
    params, lists, filled = _bind(dialect, values, _times_for(conn))
    sql = _text(dialect, name, lists, filled, False, ())

    def work(cursor) -> int:
        cursor.execute(sql, params)
        return cursor.rowcount

    return on_driver(conn, sql, params, work)


def insert_jobs(conn: Connection, rows: list[NewJobRow], log: Log, turn_floor: int = 0) -> list[JobRow]:
    """ENQUEUE: every row in one statement, each with its event; the jobs come back in the order of ``rows``.

    On PostgreSQL the statement also sends the NOTIFY that wakes waiting claims (LOGGED_AND_ANNOUNCED).

    A lone row whose fair_tag is None takes its turn in the statement itself (the dialect's ``turn``), reading
    the head of its type's queue from ``turn_floor`` up (queue/served_turns.py).
    """
    dialect = conn.dialect.name
    times = _times_for(conn)
    to_db = times.to_db
    turn_inline = rows[0].fair_tag is None
    if turn_inline and len(rows) != 1:
        raise ValueError("only a lone new job takes its turn in the INSERT; give a batch's turns (FAIR_TAGS)")
    if turn_inline:
        rows = [rows[0]._replace(fair_tag=turn_floor)]  # the turn's floor, in the place its value would take
    values = [to_db(value) if i in _NEW_TIMES else value for row in rows for i, value in enumerate(row)]
    sql = _enqueue_text(dialect, len(rows), turn_inline)
    if dialect == "postgresql":
        # Named, because LOGGED names its own values.
        params: dict | list = {f"v{i}": value for i, value in enumerate(values)}
        params.update(_log_params(log, times))
    else:
        params = values
    inserted = send(conn, sql, params, log, times, planner=_planner(dialect, "ENQUEUE") if turn_inline else None)
    # One INSERT numbers its rows in VALUES order (ids only grow), whatever order RETURNING lists them in.
    return sorted(inserted, key=lambda row: row.id)


def insert_dependencies(conn: Connection, edges: list[tuple[int, int]]) -> None:
    """INSERT_DEPENDENCIES: a workflow's edges, (child_id, parent_id) each, in one round of the driver."""
    if not edges:
        return
    sql = _DIALECTS[conn.dialect.name].INSERT_DEPENDENCIES
    on_driver(conn, sql, edges, lambda cursor: cursor.executemany(sql, edges))


def send(
    conn: Connection,
    sql: str,
    params,
    log: Log | None,
    times: Times,
    make=JobRow,
    times_at: tuple[int, ...] = JOB_TIMES,
    planner: tuple[str, str] | None = None,
) -> list:
    """Execute ``sql`` on the driver; on SQLite the event rows of ``log`` follow as a second statement.
    ``planner``: a setting for the session to plan ``sql`` with, and how to undo it after, come what may."""

    def work(cursor) -> list:
        if planner is None:
            cursor.execute(sql, params)
            fetched = cursor.fetchall()
        else:
            fetched = _planned_with(cursor, planner, sql, params)
        rows = times.rows(fetched, make, times_at)
        if log is not None and rows and conn.dialect.name == "sqlite":
            event, from_status, at = _text_of(log.event), _text_of(log.from_status), times.to_db(log.at)
            cursor.executemany(
                sqlite.LOG_EVENTS,
                [(row.id, event, from_status, row.status, log.actor, row.retry_count, log.error, at) for row in rows],
            )
        return rows

    return on_driver(conn, sql, params, work)


def _planner(dialect: str, name: str) -> tuple[str, str] | None:
    """The setting statement ``name`` is planned under, and how to undo it (postgresql_turns.IN_INDEX_ORDER)."""
    module = _DIALECTS[dialect]
    return module.IN_INDEX_ORDER if name in getattr(module, "PLANNED_IN_INDEX_ORDER", ()) else None


def _planned_with(cursor, planner: tuple[str, str], sql: str, params) -> list:
    """The rows of ``sql``, planned under ``planner``'s setting, which is undone after. Should the statement fail,
    its error is the one raised: inside a transaction the setting goes with the rollback, and a session that
    cannot be reached any more is not used again."""
    cursor.execute(planner[0], prepare=False)  # several statements in one: never prepared
    try:
        cursor.execute(sql, params)
        fetched = cursor.fetchall()
    except BaseException:
        with contextlib.suppress(Exception):
            cursor.execute(planner[1], prepare=False)
        raise
    cursor.execute(planner[1], prepare=False)
    return fetched


# --- binding values and spelling out the statement ------------------------------------------------


def _times_for(conn: Connection) -> Times:
    name = conn.dialect.name
    times = _TIMES.get(name)
    if times is None:
        times = _TIMES[name] = Times.of(conn.dialect)
    return times


_TIMES: dict[str, Times] = {}


def _bind(dialect: str, values: dict, times: Times) -> tuple[dict, tuple, tuple]:
    """The driver's parameters for ``values`` (plain values, times, and the lists named in _LISTS): times in
    their stored form, on SQLite each list spelled out as ``name_0, name_1, …``. Also what the statement's
    text needs: which lists (name, length) and which optional pieces are given."""
    to_db = times.to_db
    params = {key: to_db(value) if type(value) is datetime else value for key, value in values.items()}
    lists: tuple = ()
    for key in _LISTS:
        items = params.get(key)
        if items is None:
            continue
        if dialect == "sqlite":
            del params[key]
            params.update({f"{key}_{i}": item for i, item in enumerate(items)})
            lists += ((key, len(items)),)
        else:
            params[key] = list(items)
    filled = tuple(slot for slot, (value, _piece) in _OPTIONAL.items() if values.get(value) is not None)
    if dialect == "postgresql":
        # Written into the text (``{limit}``), so a prepared statement's generic plan knows it: see CLAIM.
        filled += tuple(("=" + key, int(values[key])) for key in _INLINED if values.get(key) is not None)
    return params, lists, filled


#: The values PostgreSQL statements take in their text, as ``{name}``: whole numbers only.
_INLINED = ("limit",)


#: The values that are lists: ``IN (:ids)`` on SQLite, ``= ANY(%(ids)s)`` on PostgreSQL.
_LISTS = ("ids", "types", "keys", "locked_types", "limited")


@functools.lru_cache(maxsize=1024)
def _text(dialect: str, name: str, lists: tuple, filled: tuple, logged: bool, shape: tuple) -> str:
    """The SQL sent for statement ``name``: what a move out of running writes (``shape``: the claim's fate
    and the LEAVE_PARTS it sets), optional pieces filled, SQLite's lists spelled out, and on PostgreSQL a
    logged write wrapped in LOGGED."""
    module = _DIALECTS[dialect]
    sql = statement(dialect, name)
    if logged and dialect == "postgresql":
        sql = module.LOGGED.replace("{statement}", sql)  # first: LOGGED holds a slot too ({stale})
    if shape:
        claim, parts = shape
        sql = sql.replace("{claim}", statement(dialect, _CLAIM_PIECES[claim])).replace(
            "{parts}", "".join(", " + module.LEAVE_PARTS[part] for part in parts)
        )
    for slot, (_value, piece) in _OPTIONAL.items():
        sql = sql.replace("{" + slot + "}", statement(dialect, piece) if slot in filled else "")
    for slot, piece in _ALWAYS.items():
        sql = sql.replace("{" + slot + "}", getattr(module, piece, ""))
    for item in filled:
        if isinstance(item, tuple):  # an inlined whole number, ("=limit", 10)
            sql = sql.replace("{" + item[0][1:] + "}", str(item[1]))
    for key, length in lists:
        sql = sql.replace(f"(:{key})", "(" + ", ".join(f":{key}_{i}" for i in range(length)) + ")")
    return sql


@functools.lru_cache(maxsize=256)
def _enqueue_text(dialect: str, count: int, turn_inline: bool = False) -> str:
    """ENQUEUE for ``count`` rows; with ``turn_inline`` (one row), its fair_tag is the dialect's ``turn`` of the
    row's own type, concurrency key and priority, worked out by the INSERT (its fair_tag value is the turn's floor)."""
    module = _DIALECTS[dialect]
    columns = NewJobRow._fields
    width = len(columns)
    if dialect == "postgresql":
        places = [[f"%(v{n * width + i})s" for i in range(width)] for n in range(count)]
    else:
        # Numbered (?1, ?2, …) when a value is used twice, as the turn uses the row's type, key and priority.
        places = [[f"?{i + 1}" if turn_inline else "?" for i in range(width)]] * count
    if turn_inline:
        place = dict(zip(columns, places[0], strict=True))
        places[0][_FAIR_TAG] = module.turn(
            place["type"], place["concurrency_key"], place["priority"], place["fair_tag"]
        )
    tuples = ["(" + ", ".join(row) + ")" for row in places]
    sql = statement(dialect, "ENQUEUE").replace("{columns}", ", ".join(columns)).replace("{rows}", ", ".join(tuples))
    return module.LOGGED_AND_ANNOUNCED.replace("{statement}", sql) if dialect == "postgresql" else sql


def next_run_at(conn: Connection, now: datetime, seeks: tuple[tuple[str, int], ...]) -> datetime | None:
    """NEXT_RUN_AT: the earliest run_at after ``now`` of a pending job of any of ``seeks`` (type, priority),
    one seek each (common.py says why), in one read."""
    values: dict = {"now": now, **{f"type_{n}": job_type for n, (job_type, _) in enumerate(seeks)}}
    sql = _next_run_at_text(conn.dialect.name, tuple(priority for _, priority in seeks))
    times = _times_for(conn)
    params, _lists, _filled = _bind(conn.dialect.name, values, times)
    planner = _planner(conn.dialect.name, "NEXT_RUN_AT")
    [at] = send(conn, sql, params, None, times, make=lambda at: at, times_at=(0,), planner=planner)
    return at


@functools.lru_cache(maxsize=256)
def _next_run_at_text(dialect: str, priorities: tuple[int, ...]) -> str:
    """NEXT_RUN_AT for one seek per priority of ``priorities``: the n-th seek's type is the value ``type_n``."""
    seek = statement(dialect, "NEXT_RUN_AT_SEEK")
    seeks = " UNION ALL ".join(
        seek.replace("{type}", common.spell(dialect, f":type_{n}")).replace("{priority}", str(int(priority)))
        for n, priority in enumerate(priorities)
    )
    return statement(dialect, "NEXT_RUN_AT").replace("{seeks}", seeks)


def _log_params(log: Log, times: Times) -> dict:
    """LOGGED's values: what each returned job's event row says."""
    return {
        "log_event": _text_of(log.event),
        "log_from": _text_of(log.from_status),
        "log_actor": log.actor,
        "log_error": log.error,
        "log_at": times.to_db(log.at),
    }


def _text_of(value):
    return value.value if isinstance(value, enum.Enum) else value

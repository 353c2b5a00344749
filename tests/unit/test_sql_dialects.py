"""SQL is written once where SQLite and PostgreSQL agree (queuelog/sql/common.py); each dialect's module holds
only what it spells differently, under the same names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from queuelog.sql import common, runner
from queuelog.sql.common import for_postgresql

SQL = Path(common.__file__).resolve().parent
#: Names one dialect has and the other does not, and why: SQLite claims in three statements and logs events
#: with a statement of its own; PostgreSQL logs them inside the write, takes quota turns with a lock, and alone
#: has a catalog to ask about the database's health (dead rows, sizes, a transaction holding vacuum back).
ONLY_IN = {
    "sqlite": {"CLAIM_PICK", "CLAIMED", "LOG_EVENTS"},
    "postgresql": {
        "LOGGED",
        "LOGGED_AND_ANNOUNCED",
        "QUOTA_TURN",
        "TABLE_HEALTH",
        "OLDEST_TRANSACTION",
        "IN_FLIGHT",
        "FLOOR",
        "LOWEST_TURN",
        "LIVE_TABLE",
        "IN_INDEX_ORDER",
        "PLANNED_IN_INDEX_ORDER",
    },
}


def defined_in(module: str) -> dict[str, str | dict]:
    """The statements and pieces a dialect module writes itself (upper-case names assigned in its source, or in
    a part of it that it imports them from: ``postgresql_workflows.py`` is part of ``postgresql.py``)."""
    return {name: getattr(runner._DIALECTS[module], name) for name in _written_in(module, module)}


def _written_in(dialect: str, source: str) -> set[str]:
    tree = ast.parse((SQL / f"{source}.py").read_text())
    names = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id.isupper() and not target.id.startswith("_")
    }
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and (node.module or "").startswith(f"{dialect}_"):
            names |= _written_in(dialect, node.module) & {alias.name for alias in node.names}
    return names


def in_sqlite_spelling(sql: str) -> str:
    """PostgreSQL's spelling of values and lists turned back into SQLite's, to compare the rest."""
    return re.sub(r"%\((\w+)\)s", r":\1", re.sub(r"= ANY\(%\((\w+)\)s\)", r"IN (:\1)", sql)).replace("%%", "%")


def test_both_dialects_have_the_same_statement_names_besides_their_own_few():
    sqlite, postgresql = set(defined_in("sqlite")), set(defined_in("postgresql"))
    assert sqlite - ONLY_IN["sqlite"] == postgresql - ONLY_IN["postgresql"]


def test_no_dialect_module_redefines_a_common_statement():
    for dialect in ("sqlite", "postgresql"):
        assert set(defined_in(dialect)) & set(common.names()) == set(), dialect


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_every_statement_of_a_dialect_is_found_under_its_name(dialect):
    for name in set(defined_in("sqlite")) | set(defined_in("postgresql")) | set(common.names()):
        if name not in ONLY_IN["sqlite" if dialect == "postgresql" else "postgresql"]:
            assert runner.statement(dialect, name), name


def test_no_statement_of_both_dialects_is_the_same_text_twice():
    sqlite, postgresql = defined_in("sqlite"), defined_in("postgresql")
    copies = [
        name
        for name in set(sqlite) & set(postgresql)
        if isinstance(sqlite[name], str) and in_sqlite_spelling(postgresql[name]) == sqlite[name]
    ]
    assert copies == [], "the dialects agree on these: write them once, in common.py"


def test_common_statements_are_sent_on_sqlite_as_written():
    assert runner.statement("sqlite", "FINISH") is common.FINISH


def test_postgresql_spelling_names_each_value_as_psycopg_does():
    assert for_postgresql("WHERE id = :id AND run_at <= :now") == "WHERE id = %(id)s AND run_at <= %(now)s"


def test_postgresql_spelling_turns_a_list_into_any():
    assert for_postgresql("WHERE id IN (:ids)") == "WHERE id = ANY(%(ids)s)"


def test_postgresql_spelling_leaves_casts_and_quoted_times_alone():
    assert for_postgresql("SELECT :at::timestamptz, '12:30'") == "SELECT %(at)s::timestamptz, '12:30'"


def test_postgresql_spelling_doubles_a_percent_sign_psycopg_would_read_as_a_value():
    assert for_postgresql("WHERE type LIKE 'mail%' AND id = :id") == "WHERE type LIKE 'mail%%' AND id = %(id)s"


def test_postgresql_spelling_refuses_not_in_a_list():
    with pytest.raises(ValueError, match="NOT IN"):
        for_postgresql("WHERE type NOT IN (:types)")


def test_no_common_statement_keeps_a_sqlite_value_in_its_postgresql_spelling():
    leftovers = {
        name: sql
        for name in common.names()
        if re.search(r"(?<![:\w]):[A-Za-z_]", sql := runner.statement("postgresql", name))
    }
    assert leftovers == {}

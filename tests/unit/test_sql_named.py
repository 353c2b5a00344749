"""Every write to jobs and job_events is a named statement in queuelog/sql: no other module writes them."""

from __future__ import annotations

import re

from tests.support.paths import PACKAGE

# Core constructs on the two tables, or SQL text that writes them.
WRITES = re.compile(
    r"\b(?:insert|update|delete)\(\s*(?:jobs|events|Job|JobEvent)\b"
    r"|\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(?:jobs|job_events)\b"
)


def test_no_module_outside_queuelog_sql_writes_jobs_or_their_events():
    writers = {
        f"{path.relative_to(PACKAGE)}:{number}": line.strip()
        for path in PACKAGE.rglob("*.py")
        if not path.is_relative_to(PACKAGE / "sql") and not path.is_relative_to(PACKAGE / "migrations")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if WRITES.search(line)
    }
    assert writers == {}


def test_the_check_finds_a_write_where_there_is_one():
    assert WRITES.search("conn.execute(delete(jobs).where(jobs.c.id == 1))")
    assert WRITES.search('cursor.execute("UPDATE jobs SET status = ...")')
    assert not WRITES.search("jobs = Job.__table__")

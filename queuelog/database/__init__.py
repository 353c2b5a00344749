"""The connection to the database, one concern per module.

- ``engine.py``: set-up per dialect when the app starts (SQLite pragmas and how each transaction
  begins, PostgreSQL's test of a pooled connection that sat idle).
- ``transactions.py``: the connections the rest of the app asks for: read, write, single-statement read.
- ``writers_lock.py``: SQLite's writers take turns on a file lock before BEGIN IMMEDIATE.
- ``group_commit.py``: write transactions of a process's threads that arrive together share one COMMIT.
- ``wal_sync.py``: SQLite at FULL: a group's commit made durable by an fsync of the WAL, after its turn.
- ``driver.py``: SQL sent on the driver connection under SQLAlchemy's (BEGIN, SAVEPOINT, every named statement).
- ``channels.py``: the PostgreSQL NOTIFY channels that wake waiting requests.
- ``schema_upgrade.py``: bringing the schema up to date at start-up, one process at a time.

Nothing is imported here: each importer names the module it needs.
"""

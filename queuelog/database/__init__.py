"""The connection to the database, one concern per module.

- ``engine.py``: set-up per dialect when the app starts (SQLite pragmas and how each transaction
  begins, PostgreSQL's test of a pooled connection that sat idle).
- ``transactions.py``: the connections the rest of the app asks for: read, write, single-statement read.
- ``writers_lock.py``: SQLite's writers take turns on a file lock before BEGIN IMMEDIATE.
- ``schema_upgrade.py``: bringing the schema up to date at start-up, one process at a time.

Nothing is imported here: each importer names the module it needs.
"""

"""The PostgreSQL ``NOTIFY`` channels that wake waiting requests in every server process.

Here, below both, because two layers name them: the SQL that announces jobs inside its own statement
(``LOGGED_AND_ANNOUNCED`` in sql/postgresql.py) and the waiting package that sends and listens
(waiting/wakeup.py, waiting/pg_listener.py).
"""

from __future__ import annotations

#: Jobs became claimable: waiting claims look again.
CHANNEL = "queuelog_jobs"
#: Jobs that producers wait for (``GET /jobs/{id}?wait=S``) reached a final state.
FINISHED_CHANNEL = "queuelog_finished"

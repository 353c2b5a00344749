"""The driver runner moved to ``queuelog.sql``; ``execute_plain`` stays here for database.py until it imports it there."""
from .sql import execute_plain  # noqa: F401

"""The driver runner moved to ``queuelog.sql``; these names stay here for the modules that still import them."""
from .sql import execute_plain, find_key  # noqa: F401

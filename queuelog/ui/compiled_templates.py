"""One copy of the compiled templates for every app a process builds.

Jinja compiles each template the first time an app renders it and keeps the result in that app's
environment only. A process that builds the app more than once (the test suite builds one per test, the
CLI after the server) compiled every page again each time. This cache keeps the compiled code for the
process; Jinja checks each entry against the template's source, so a changed template is compiled afresh.
"""

from __future__ import annotations

from jinja2 import BytecodeCache
from jinja2.bccache import Bucket


class ProcessBytecodeCache(BytecodeCache):
    """Compiled templates kept in memory for the life of the process, keyed by Jinja's own bucket key."""

    def __init__(self) -> None:
        self._compiled: dict[str, bytes] = {}

    def load_bytecode(self, bucket: Bucket) -> None:
        compiled = self._compiled.get(bucket.key)
        if compiled is not None:
            bucket.bytecode_from_string(compiled)

    def dump_bytecode(self, bucket: Bucket) -> None:
        self._compiled[bucket.key] = bucket.bytecode_to_string()

    def clear(self) -> None:
        self._compiled.clear()


#: Shared by every app of the process (create_app sets it on each app's Jinja environment).
PROCESS_CACHE = ProcessBytecodeCache()

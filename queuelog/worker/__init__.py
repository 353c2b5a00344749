"""Run queuelog jobs in Python: register handlers on a Worker and start ``queuelog-worker``.

    from queuelog.worker import Worker, PermanentError
    worker = Worker()

    @worker.handler("send-invoice")
    def send_invoice(payload):      # the job's payload; return a dict (the result) or None
        ...

Producers use the same package's Client: ``Client().enqueue("send-invoice", {"id": 7})``.
"""

from .client import ApiError, Client, QueuelogError, QuotaExceeded, ServerUnavailable
from .runner import PermanentError, Worker

# Tracebacks and reprs name the public path users import it from.
PermanentError.__module__ = Worker.__module__ = __name__

__all__ = ["ApiError", "Client", "PermanentError", "QueuelogError", "QuotaExceeded", "ServerUnavailable", "Worker"]

"""Domain errors raised by the queue's operations; the API and the pages turn them into responses."""

from __future__ import annotations


class QueueError(Exception):
    """Base of every refusal the queue makes on purpose.

    A refusal a client should tell apart from others names its problem type (``problem``, the last part of
    its URL); one that passes once time does says after how many whole seconds (``retry_after``).
    """

    status = 400
    title = "Bad request"
    problem: str | None = None
    retry_after: int | None = None

    def __init__(self, detail: str, **extra):
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class JobNotFound(QueueError):
    status = 404
    title = "Not found"


class StateConflict(QueueError):
    """The job is not in a state (or not held in a way) that allows this action."""

    status = 409
    title = "Conflict"


class Forbidden(QueueError):
    status = 403
    title = "Forbidden"


class InvalidRequest(QueueError):
    """One or more fields are wrong; ``errors`` lists each as {pointer, detail}."""

    status = 422
    title = "Unprocessable content"

    def __init__(self, errors: list[dict], detail: str | None = None):
        super().__init__(detail or "; ".join(f"{e['pointer'] or '/'}: {e['detail']}" for e in errors))
        self.errors = errors


class IdempotencyConflict(QueueError):
    status = 422
    title = "Idempotency key reused"


class LongPollsFull(QueueError):
    """A claim asked to wait, but this server process holds as many waiting claims as it may.

    503 with ``Retry-After``: nothing was claimed, and the worker should ask again after that long.
    """

    status = 503
    title = "Too many waiting claims"
    problem = "long-polls-full"

    def __init__(self, detail: str, retry_after: int):
        super().__init__(detail)
        self.retry_after = retry_after

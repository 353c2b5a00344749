"""Bearer API-key authentication and role checks for the API (V-01)."""

from __future__ import annotations

import functools

from flask import g, request

from ..auth.keys import Caller, authenticate
from ..core.problems import problem
from ..queue.push_access import token_holder

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="queuelog"'}


def current_caller() -> Caller:
    return g.caller


def require_role(*roles: str):
    """Refuse the request unless it carries a live key (401) with one of ``roles`` (403)."""

    def decorator(view):
        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            header = request.headers.get("Authorization", "")
            scheme, _, secret = header.partition(" ")
            if scheme.lower() != "bearer" or not secret.strip():
                return problem(
                    401, "Unauthenticated", "send an API key as 'Authorization: Bearer <key>'", headers=_CHALLENGE
                )
            caller = authenticate(secret.strip())
            if caller is None:
                return problem(
                    401,
                    "Unauthenticated",
                    "the API key is unknown or revoked",
                    headers={"WWW-Authenticate": 'Bearer realm="queuelog", error="invalid_token"'},
                )
            g.caller = caller
            if caller.role not in roles:
                return problem(
                    403, "Forbidden", f"a {caller.role} key cannot do this; it needs a {' or '.join(roles)} key"
                )
            return view(*args, **kwargs)

        return wrapper

    return decorator


def require_role_or_push_token(*roles: str):
    """``require_role``, except that a request with no Authorization header at all may act on a job of a type
    with a push target as that type's push worker: an async target holds no API key, and the claim token in
    its body is checked by the move itself, as for any holder (queue/push_access.py)."""

    def decorator(view):
        guarded = require_role(*roles)(view)

        @functools.wraps(view)
        def wrapper(*args, **kwargs):
            if "Authorization" in request.headers:
                return guarded(*args, **kwargs)
            holder = token_holder(kwargs["job_id"])
            if holder is None:
                return guarded(*args, **kwargs)  # the usual 401: this job is not one a token alone may move
            g.caller = holder
            return view(*args, **kwargs)

        return wrapper

    return decorator

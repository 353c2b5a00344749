"""Bearer API-key authentication and role checks for the API (V-01)."""

from __future__ import annotations

import functools

from flask import g, request

from ..auth.keys import Caller, authenticate
from ..core.problems import problem

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

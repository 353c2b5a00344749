"""Small helpers for talking to the API in tests."""


def bearer(secret: str) -> dict:
    """The Authorization header for an API key."""
    return {"Authorization": f"Bearer {secret}"}

"""Standard Webhooks signatures (www.standardwebhooks.com): what a target checks to know a delivery is ours.

The signed content is ``<webhook-id>.<webhook-timestamp>.<body>``; each secret is ``whsec_`` and the base64 of
the HMAC-SHA256 key. While a rotated secret still signs, the header carries one signature per secret, so a
target holding either the old or the new secret accepts the delivery.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from ..queue.push_targets import SECRET_PREFIX


def signature_header(message_id: str, timestamp: int, body: bytes, secrets: list[str]) -> str:
    """The ``webhook-signature`` value: ``v1,<base64 signature>`` for each secret, space-separated."""
    content = f"{message_id}.{timestamp}.".encode() + body
    signatures = []
    for secret in secrets:
        key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
        digest = hmac.new(key, content, hashlib.sha256).digest()
        signatures.append("v1," + base64.b64encode(digest).decode("ascii"))
    return " ".join(signatures)


def headers(message_id: str, timestamp: int, body: bytes, secrets: list[str]) -> dict[str, str]:
    """The three headers every delivery carries."""
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(message_id, timestamp, body, secrets),
    }

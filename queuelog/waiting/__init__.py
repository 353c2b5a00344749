"""Waiting: requests that sleep until the database has news (long-poll claims, ``GET /jobs/{id}?wait``),
the places they may take, and the wake-ups (LISTEN/NOTIFY on PostgreSQL, a datagram on SQLite)."""

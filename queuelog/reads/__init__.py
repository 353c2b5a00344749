"""Read-only questions about jobs (who may see what) and the figures the pages and ``/metrics`` share."""

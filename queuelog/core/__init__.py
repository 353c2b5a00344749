"""The vocabulary every layer shares besides the state machine (queuelog/states.py): names and patterns, clock,
domain errors, RFC 9457 problem bodies, and pure rules (error text scrubbing and grouping, payload matching,
timing buckets). No database."""

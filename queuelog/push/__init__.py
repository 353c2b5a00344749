"""Push delivery: the server claims the jobs of a type with a push target and POSTs each to that target.

- ``dispatcher.py``: the thread in every server process that claims for the targets, and its delivery threads;
- ``delivery.py``: one delivery, from the job to the outcome the target's answer decides;
- ``sending.py``: the HTTP request itself, to an address checked as it connects, within the timeout;
- ``signing.py``: the Standard Webhooks headers.

What a target is, and its secrets, are the type's settings (``queue/push_targets.py``); docs/push.md is the guide.
"""

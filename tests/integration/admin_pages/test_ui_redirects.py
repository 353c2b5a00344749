"""V: open redirect. ``next`` after sign-in only ever leads to a page of the admin app.

The request-level checks live in test_ui_auth.py; these cover the many shapes an attacker tries,
without a server round-trip each.
"""

import pytest

from queuelog.ui.auth import safe_next


@pytest.mark.parametrize(
    "target",
    [
        "//evil.com",
        "//evil.com/admin",
        "///evil.com",
        "https://evil.com",
        "https://evil.com/admin",
        "http:evil.com",
        "/\\evil.com",
        "\\\\evil.com",
        "/\t/evil.com",
        "/admin\n//evil.com",
        "javascript:alert(1)",
        "evil.com",
        "admin",
        " /admin",
        "/jobs",
        "/admin/login",
        "/admin/login?next=//evil.com",
        "",
        None,
    ],
)
def test_v_open_redirect_unsafe_targets_are_dropped(target):
    assert safe_next(target) is None


@pytest.mark.parametrize("target", ["/admin", "/admin/jobs?status=failed&type=email", "/admin/jobs/12"])
def test_paths_of_the_admin_pages_are_kept(target):
    assert safe_next(target) == target

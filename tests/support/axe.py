"""axe-core in Chromium: what its default rules (WCAG 2.x A and AA, best practices) find on a page, readably."""

from __future__ import annotations

from tests.support.paths import REPO_ROOT

AXE_SCRIPT = REPO_ROOT / "tests" / "clients" / "node_modules" / "axe-core" / "axe.min.js"


def axe_violations(tab) -> list[dict]:
    """What axe-core's default rules find on the page now."""
    return tab.evaluate("() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations)")


def readable(violations: list[dict]) -> str:
    """One line per rule broken, then each element that breaks it and why."""
    lines = []
    for violation in violations:
        lines.append(f"{violation['id']} ({violation['impact']}): {violation['help']}  {violation['helpUrl']}")
        for node in violation["nodes"][:12]:
            summary = " ".join((node.get("failureSummary") or "").split())
            lines.append(f"    {' '.join(map(str, node['target']))}: {summary}")
        if len(violation["nodes"]) > 12:
            lines.append(f"    … and {len(violation['nodes']) - 12} more")
    return "\n".join(lines)


def assert_no_violations(tab, what: str) -> None:
    violations = axe_violations(tab)
    assert violations == [], f"axe-core on {what} ({tab.url}):\n{readable(violations)}"

"""Every page works on a phone (390 px wide): nothing makes the page scroll sideways, the header wraps
with every link on screen, wide tables scroll inside their card, and the chart's labels stay readable."""

from __future__ import annotations

import pytest

from tests.support.every_state import fresh_database_url, serving_every_state
from tests.support.live_site import ADMIN_NAME, ADMIN_PASSWORD

# the pages' layout is the same on every database (their queries are the test_ui_* modules' subject)
# scripts/test runs this module in the SQLite pass only.
pytestmark = pytest.mark.database_independent

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
PAGES = [
    "/admin",
    "/admin?range=7d",
    "/admin/jobs",
    "/admin/jobs?status=failed",
    "/admin/scheduled",
    "/admin/workers",
    "/admin/keys",
    "/admin/types",
    "/admin/types/email",
    "/admin/types/report",
    "/admin/errors",
    "/admin/schedules",
    "/admin/schedules/nightly-report",
    "job:from-schedule",
    "job:pending",
    "job:running",
    "job:stalled",
    "job:backing-off",
    "job:quarantined",
    "job:requeued",
    "job:completed",
    "/admin/jobs/999999999",
]
READABLE_PX = 10  # the smallest label height we call readable


@pytest.fixture(scope="module")
def every_state(request, tmp_path_factory):
    with serving_every_state(fresh_database_url(request, tmp_path_factory)) as served:
        yield served


@pytest.fixture
def open_signed_in(browser, every_state):
    """open_signed_in(viewport) → a tab of that size, signed in as the admin."""
    contexts = []

    def _open(viewport: dict, scheme: str = "dark"):
        context = browser.new_context(viewport=viewport, color_scheme=scheme)
        contexts.append(context)
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.goto(every_state.url + "/admin/login")
        tab.fill("#username", ADMIN_NAME)
        tab.fill("#password", ADMIN_PASSWORD)
        tab.click("button:has-text('Sign in')")
        tab.wait_for_url(every_state.url + "/admin")
        return tab

    yield _open
    for context in contexts:
        context.close()


def _path(every_state, target: str) -> str:
    return f"/admin/jobs/{every_state.jobs[target.removeprefix('job:')]}" if target.startswith("job:") else target


def boxes(tab, selector: str) -> list[dict]:
    """The on-screen box of each visible element matching ``selector``."""
    return tab.evaluate(
        """selector => Array.from(document.querySelectorAll(selector))
        .filter(el => el.getClientRects().length > 0)
        .map(el => { const r = el.getBoundingClientRect();
                     return {left: r.left, right: r.right, top: r.top, bottom: r.bottom, width: r.width,
                             height: r.height, text: el.textContent.trim().slice(0, 30)}; })""",
        selector,
    )


def overlap(a: dict, b: dict) -> bool:
    return a["left"] < b["right"] and b["left"] < a["right"] and a["top"] < b["bottom"] and b["top"] < a["bottom"]


@pytest.mark.parametrize("target", PAGES)
def test_no_page_scrolls_sideways_on_a_phone(every_state, open_signed_in, target):
    tab = open_signed_in(PHONE)
    tab.goto(every_state.url + _path(every_state, target))
    widths = tab.evaluate("() => ({page: document.documentElement.scrollWidth, screen: window.innerWidth})")
    assert widths["page"] <= widths["screen"], widths


def test_the_sign_in_page_fits_a_phone(browser, every_state):
    context = browser.new_context(viewport=PHONE)
    try:
        tab = context.new_page()
        tab.goto(every_state.url + "/admin/login")
        assert tab.evaluate("() => document.documentElement.scrollWidth") <= PHONE["width"]
        field = boxes(tab, "#password")[0]
        assert field["left"] >= 0 and field["right"] <= PHONE["width"]
    finally:
        context.close()


@pytest.mark.parametrize("target", ["/admin", "/admin/jobs", "/admin/types", "job:running"])
def test_the_header_wraps_with_every_link_and_button_on_screen(every_state, open_signed_in, target):
    tab = open_signed_in(PHONE)
    tab.goto(every_state.url + _path(every_state, target))
    controls = boxes(tab, ".topbar a, .topbar button")
    assert [c["text"] for c in controls] == [
        "queuelog",
        "Dashboard",
        "Jobs",
        "Scheduled",
        "Types",
        "Top errors",
        "Workers",
        "Schedules",
        "API keys",
        "Sign out",
    ]
    for control in controls:
        assert control["left"] >= 0 and control["right"] <= PHONE["width"], control
    for index, first in enumerate(controls):
        for second in controls[index + 1 :]:
            assert not overlap(first, second), (first, second)
    assert tab.evaluate("() => document.querySelector('.topbar').scrollWidth <= window.innerWidth")


@pytest.mark.parametrize(
    "target",
    ["/admin", "/admin/jobs", "/admin/workers", "/admin/keys", "/admin/types", "job:requeued", "/admin/errors"],
)
def test_wide_tables_scroll_inside_their_card(every_state, open_signed_in, target):
    tab = open_signed_in(PHONE)
    tab.goto(every_state.url + _path(every_state, target))
    tables = tab.evaluate("""() => Array.from(document.querySelectorAll('table.data')).map(table => {
        const wrap = table.closest('.table-wrap');
        const card = wrap && (wrap.closest('.card') || wrap.closest('.bulk') || wrap);
        const w = wrap.getBoundingClientRect(), c = card.getBoundingClientRect();
        return {table: table.scrollWidth, wrap: wrap.clientWidth, scrolls: getComputedStyle(wrap).overflowX,
                inside: w.left >= c.left - 1 && w.right <= c.right + 1 && c.right <= window.innerWidth};
    })""")
    assert tables, "the page has a table"
    for table in tables:
        assert table["inside"], table
        if table["table"] > table["wrap"]:
            assert table["scrolls"] in ("auto", "scroll"), table
    assert any(table["table"] > table["wrap"] for table in tables), "at 390 px some table is wider than its card"


@pytest.mark.parametrize("target", ["/admin", "/admin?range=24h", "/admin?range=7d"])
def test_the_chart_is_drawn_for_the_phone_with_readable_labels(every_state, open_signed_in, target):
    tab = open_signed_in(PHONE)
    tab.goto(every_state.url + target)
    assert not tab.locator("svg.chart-wide").is_visible()
    chart = tab.locator("svg.chart-narrow")
    assert chart.is_visible()
    box = chart.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] and box["height"] >= 150
    labels = boxes(tab, "svg.chart-narrow .axis-label")
    assert len(labels) >= 5  # gridline values and times
    assert min(label["height"] for label in labels) >= READABLE_PX, labels
    for index, first in enumerate(labels):
        for second in labels[index + 1 :]:
            assert not overlap(first, second), (first, second)


def test_the_chart_is_drawn_wide_on_a_laptop(every_state, open_signed_in):
    tab = open_signed_in(LAPTOP)
    assert not tab.locator("svg.chart-narrow").is_visible()
    assert tab.locator("svg.chart-wide").is_visible()
    labels = boxes(tab, "svg.chart-wide .axis-label")
    assert min(label["height"] for label in labels) >= READABLE_PX, labels

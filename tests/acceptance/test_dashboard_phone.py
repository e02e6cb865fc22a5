"""The dashboard on a phone: at 420 pixels wide no page scrolls sideways (what is wider than
the screen, a table or a graph, scrolls in its own box), in a real Chromium."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dashboard_browser import SignedIn, start_run
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

PHONE = {"width": 420, "height": 900}
GOAL = "Write a blog post about phones, reviewed by two critics; an editor approves"
WIDER = """() => [...document.querySelectorAll('body *')]
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
    .slice(0, 5)
    .map(e => `${e.tagName.toLowerCase()}.${e.className} ${e.getBoundingClientRect().right}`)"""


def _fits(page: Any, name: str, shots: Path) -> None:
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)  # kept for a failure
    wide, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= inner, f"{name}: {wide} px wide in {inner}: {page.evaluate(WIDER)}"


def test_every_main_page_fits_a_phone_without_scrolling_sideways(
    server: Server, signed_in: SignedIn, tmp_path: Path
) -> None:
    start_run(server, "blog_post", {"topic": "a long topic " * 8}, "phone-blog")
    start_run(server, "sdlc", {"task": "add rate limiting to the public API"}, "phone-sdlc")
    with server.client("admin") as client:
        made = client.post(
            "/runs/crons",
            json={"assistant_id": "ten_nodes", "schedule": "0 9 * * 1-5", "timezone": "Asia/Tokyo"},
        )
    assert made.status_code == 200, made.text
    page = signed_in(server, "admin", viewport=PHONE)
    assert page.evaluate("window.innerWidth") == 420
    _fits(page, "overview", tmp_path)
    pages = {
        "runs": "/ui/runs",
        "run-gate": "/ui/runs/phone-blog",
        "run-question": "/ui/runs/phone-sdlc",
        "schedules": "/ui/schedules",
        "inbox": "/ui/inbox",
        "stats": "/ui/stats?template=blog_post",
        "templates": "/ui/templates",
        "compose": "/ui/compose",
    }
    for name, path in pages.items():
        page.goto(server.url + path)
        page.wait_for_load_state("load")
        _fits(page, name, tmp_path)
    page.fill("#goal", GOAL)
    page.click("#compose-form button[type=submit]")
    page.wait_for_selector("[data-composed] svg.graph")
    _fits(page, "compose-drafted", tmp_path)

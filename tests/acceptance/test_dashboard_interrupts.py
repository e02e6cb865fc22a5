"""A graph's own ``interrupt()`` answered from the dashboard, in a real Chromium against a real
``stageline serve``: a plain JSON value through the answer form, then an Agent-Inbox
``HumanInterrupt`` with the buttons its ``config`` allows (accept)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from dashboard_browser import Watch, browser, new_page, sign_in, start_run
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def watch() -> Iterator[Watch]:
    found = Watch()
    yield found
    found.check()


def test_interrupts_are_answered_from_the_inbox_and_the_run_page(
    serve_project: Callable[..., Server], watch: Watch
) -> None:
    server = serve_project(templates=("interrupts.py",))
    start_run(server, "interrupts", {"topic": "fence"}, "ui-interrupts")
    with browser() as chromium:
        page = new_page(chromium, watch)
        sign_in(page, server, "decide", start="/ui/inbox")
        row = page.locator("tr[data-run=ui-interrupts]")
        assert row.get_attribute("data-kind") == "interrupt"
        row.locator("a.button").click()
        form = page.locator("form[data-interrupt-form]")
        assert "which colour?" in page.locator("pre[data-interrupt-value]").inner_text()
        form.locator("textarea[name=value]").fill('{"hex": "#f00"}')
        form.locator("button[data-answer-as=json]").click()
        page.wait_for_selector("[data-interrupt-description]")
        assert "answered" in page.locator(".notice.ok").inner_text()
        buttons = page.locator("form[data-interrupt-form] button[data-inbox]")
        assert [buttons.nth(i).get_attribute("data-inbox") for i in range(buttons.count())] == [
            "accept",
            "response",
            "ignore",
        ]  # no edit: its config does not allow it
        assert "Paint it?" in page.locator("[data-interrupt-description]").inner_text()
        page.click("button[data-inbox=accept]")
        page.wait_for_selector("#run-status [data-run-status=succeeded]")
        answers = page.locator("table.decisions pre[data-answer]").all_inner_texts()
        assert len(answers) == 2 and '"accept"' in answers[1]
    with server.client("read") as client:
        shown = client.get("/v1/runs/ui-interrupts").json()
    assert shown["state"]["colour"] == {"hex": "#f00"}
    assert shown["state"]["verdict"] == [{"type": "accept", "args": None}]
    assert [w["actor"] for w in shown["interrupts"]] == ["decider", "decider"]

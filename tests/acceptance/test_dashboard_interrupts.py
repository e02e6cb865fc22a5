"""A graph's own ``interrupt()`` answered from the dashboard, in a real Chromium against a real
``stageline serve``: in the fixture template ``interrupts.py``, a plain JSON value through the
answer form, then an Agent-Inbox ``HumanInterrupt`` with the buttons its ``config`` allows
(accept); then the corpus's interrupting graphs (``tests/fixtures/langgraph_project``: plain
LangGraph, no stageline imports) on SQLite and on Postgres: ``ask_name``'s subgraph
``interrupt()`` answered as text, ``inbox``'s ``HumanInterrupt`` by edit and by respond (and a
second person's late response refused: the first answer wins); each run's records and answers,
with their actor, read back from the API."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from dashboard_browser import SignedIn, start_run
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"


def test_interrupts_are_answered_from_the_inbox_and_the_run_page(
    serve_project: Callable[..., Server], signed_in: SignedIn
) -> None:
    server = serve_project(templates=("interrupts.py",))
    start_run(server, "interrupts", {"topic": "fence"}, "ui-interrupts")
    page = signed_in(server, "decide", start="/ui/inbox")
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
    assert len(answers) == 1 and '"#f00"' in answers[0]  # an accept carries nothing more
    said = page.locator("table.decisions [data-inbox-answer]").all_inner_texts()
    assert said == ["accept"]
    with server.client("read") as client:
        shown = client.get("/v1/runs/ui-interrupts").json()
    assert shown["state"]["colour"] == {"hex": "#f00"}
    assert shown["state"]["verdict"] == [{"type": "accept", "args": None}]
    assert [w["actor"] for w in shown["interrupts"]] == ["decider", "decider"]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest) -> str | None:
    return str(request.getfixturevalue("postgres_url")) if request.param == "postgres" else None


def test_corpus_interrupts_are_answered_from_the_dashboard(
    serve_project: Callable[..., Server], database: str | None, tmp_path: Path, signed_in: SignedIn
) -> None:
    shutil.copytree(CORPUS, tmp_path / "project")
    server = serve_project(database_url=database)
    start_run(server, "ask_name", {}, "ui-ask")
    start_run(server, "inbox", {"email": "the invoice"}, "ui-edit")
    start_run(server, "inbox", {"email": "the meeting"}, "ui-respond")
    page = signed_in(server, "decide", start="/ui/inbox")
    rows = page.locator("tr[data-kind=interrupt]")
    assert rows.count() == 3
    page.locator("tr[data-run=ui-ask] a.button").click()
    assert page.locator("pre[data-interrupt-value]").inner_text() == "What is your name?"
    form = page.locator("form[data-interrupt-form]")
    form.locator("textarea[name=value]").fill("Ada")
    form.locator("button[data-answer-as=text]").click()
    page.wait_for_selector("#run-status [data-run-status=succeeded]")

    page.goto(server.url + "/ui/runs/ui-edit")
    buttons = page.locator("form[data-interrupt-form] button[data-inbox]")
    assert [buttons.nth(i).get_attribute("data-inbox") for i in range(buttons.count())] == [
        "accept",
        "edit",
        "response",
        "ignore",
    ]
    assert "Send this reply?" in page.locator("[data-interrupt-description]").inner_text()
    page.fill("textarea[name=edit_args]", json.dumps({"reply": "Paid, thank you."}))
    page.click("button[data-inbox=edit]")
    page.wait_for_selector("#run-status [data-run-status=succeeded]")
    said = page.locator("table.decisions tr[data-wait-status=applied]")
    assert said.locator("[data-inbox-answer]").inner_text() == "edit"
    assert json.loads(said.locator("[data-answer]").inner_text()) == {"reply": "Paid, thank you."}

    late = signed_in(server, "admin", start="/ui/runs/ui-respond")  # another person, same page
    late.fill("textarea[name=response]", "Fine by me")  # typing: the page does not reload
    page.goto(server.url + "/ui/runs/ui-respond")
    page.click("button[data-inbox=response]")  # no text yet: the browser asks for it
    response = page.locator("textarea[name=response]")
    assert response.evaluate("el => el.validationMessage") == "Write the response first"
    response.evaluate("el => el.setCustomValidity('')")  # past the browser: the server
    respond = page.locator("button[data-inbox=response]")
    respond.evaluate("el => el.removeAttribute('data-needs-note')")
    respond.click()
    assert "write the response" in page.locator(".notice.error").inner_text()
    response.fill("Which meeting?")
    page.fill("textarea[name=edit_args]", "{not json")  # holds back only an edit
    page.click("button[data-inbox=response]")
    page.wait_for_selector("#run-status [data-run-status=succeeded]")
    said = page.locator("table.decisions tr[data-wait-status=applied]")
    assert said.locator("[data-inbox-answer]").inner_text() == "response"
    assert said.locator("[data-answer]").inner_text() == "Which meeting?"
    late.click("button[data-inbox=response]")  # the first answer wins
    assert "already answered by decider" in late.locator(".notice.info").inner_text()
    with server.client("read") as client:
        runs = {r: client.get(f"/v1/runs/{r}").json() for r in ("ui-ask", "ui-edit", "ui-respond")}
    asked = runs["ui-ask"]
    assert asked["state"]["greeting"] == "Hello, Ada"
    assert [(r["node"], r["status"]) for r in asked["records"]] == [
        ("prepare", "succeeded"),
        ("asker", "succeeded"),
        ("asker/ask", "succeeded"),
        ("greet", "succeeded"),
    ]
    assert runs["ui-edit"]["state"]["reply"] == "Paid, thank you."
    assert runs["ui-respond"]["state"]["reply"] == "Thanks for: the meeting"
    for run in runs.values():
        assert run["run"]["status"] == "succeeded"
        assert {r["status"] for r in run["records"]} == {"succeeded"}
    answered = {
        r: [(w["name"], w["status"], w["actor"], w["answer"]) for w in run["interrupts"]]
        for r, run in runs.items()
    }
    assert answered == {
        "ui-ask": [("asker/ask", "applied", "decider", "Ada")],
        "ui-edit": [
            (
                "review",
                "applied",
                "decider",
                [
                    {
                        "type": "edit",
                        "args": {"action": "send_email", "args": {"reply": "Paid, thank you."}},
                    }
                ],
            )
        ],
        "ui-respond": [
            ("review", "applied", "decider", [{"type": "response", "args": "Which meeting?"}])
        ],
    }

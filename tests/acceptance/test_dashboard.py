"""The dashboard in a real Chromium against a real ``stageline serve``: sign in, look, decide.

Every test watches its pages: no script error, no console error, no request to another host.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from dashboard_browser import SignedIn, Watch, new_page, sign_in, start_run
from server_fixtures import Server, http_post

pytestmark = pytest.mark.timeout(300)


def _run(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as client:
        answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _csrf(page: Any) -> str:
    return str(page.locator("input[name=csrf]").first.get_attribute("value"))


def test_sign_in_refuses_a_bad_token_and_sets_a_strict_http_only_cookie(
    server: Server, chromium: Any, watch: Watch
) -> None:
    page = new_page(chromium, watch)
    page.goto(server.url + "/")
    assert page.url.endswith("/ui/login?next=/ui/")
    page.fill("input[name=token]", "sl_not-a-token")
    page.click("form button[type=submit]")
    assert "unknown or revoked" in page.locator(".notice.error").inner_text()
    assert page.locator("input[type=password][name=token]").count() == 1
    sign_in(page, server, "read")
    assert page.url == server.url + "/ui/"
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert server.tokens["read"] not in cookie["value"]
    assert page.locator("header .chip").inner_text() == "reader · read"
    page.click("header button:has-text('Sign out')")
    page.goto(server.url + "/ui/runs")
    assert "/ui/login" in page.url


def test_runs_list_filters_and_links_to_a_waiting_blog_post_whose_gate_is_drawn_waiting(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "blog_post", {"topic": "graphs in the browser"}, "ui-list-1")
    start_run(server, "ten_nodes", {"seed": 3}, "ui-list-2")
    page = signed_in(server, "read")
    page.goto(server.url + "/ui/runs")
    row = page.locator("tr[data-run=ui-list-1]")
    assert row.get_attribute("data-status") == "waiting"
    assert "gate editor_approval" in row.inner_text()
    page.check("input[name=status][value=waiting]")
    page.click("form#filters button[type=submit]")
    statuses = page.locator("#runs-rows tr[data-run]").evaluate_all(
        "rows => rows.map(r => r.dataset.status)"
    )
    assert statuses and set(statuses) == {"waiting"}
    page.fill("#q", "graphs in the browser")
    page.click("form#filters button[type=submit]")
    assert page.locator("#runs-rows tr[data-run]").evaluate_all(
        "rows => rows.map(r => r.dataset.run)"
    ) == ["ui-list-1"]
    page.click("a:has-text('ui-list-1')")
    gate = page.locator("svg.graph g[data-node=editor_approval]")
    assert gate.get_attribute("data-status") == "waiting"
    assert page.locator("svg.graph g[data-node=draft]").get_attribute("data-status") == "succeeded"
    assert (
        page.locator("svg.graph g[data-node=publish]").get_attribute("data-status") == "not_reached"
    )
    loop = page.locator("svg.graph path[data-edge='editor_approval->draft']")
    assert loop.get_attribute("data-loop") == "true"


def test_approving_a_gate_from_the_page_finishes_the_run_and_records_the_actor(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "blog_post", {"topic": "approve me"}, "ui-approve")
    page = signed_in(server, "decide", start="/ui/runs/ui-approve")
    assert page.url.endswith("/ui/runs/ui-approve")
    page.fill("textarea[name=note]", "reads well")
    page.click("button[data-decision=approve]")
    page.wait_for_selector("#run-status [data-run-status=succeeded]")
    assert "approve" in page.locator(".notice.ok").inner_text()
    assert (
        page.locator("svg.graph g[data-node=publish]").get_attribute("data-status") == "succeeded"
    )
    shown = _run(server, "ui-approve")
    assert shown["run"]["status"] == "succeeded"
    [decision] = shown["decisions"]
    assert (decision["actor"], decision["decision"], decision["note"]) == (
        "decider",
        "approve",
        "reads well",
    )
    assert page.locator("table.decisions").inner_text().count("decider") == 1


def test_a_parked_run_is_taken_over_from_the_page(server: Server, signed_in: SignedIn) -> None:
    start_run(server, "blog_post", {"topic": "no takeover here"}, "ui-gate")
    start_run(server, "sdlc", {"task": "add a login page", "review_threshold": 1.5}, "ui-park")
    answers = {"scope": "a login page at /login", "priority": "normal", "done_when": "CI passes"}
    with server.client("decide") as client:
        client.post("/v1/runs/ui-park/answer", json={"answers": answers})
    assert _run(server, "ui-park")["run"]["status"] == "parked"
    page = signed_in(server, "decide", start="/ui/runs")
    parked = page.locator("tr[data-run=ui-park]")
    assert parked.get_attribute("data-status") == "parked"
    assert "gate plan_parked" in parked.inner_text()  # what it waits on, like a waiting run
    waiting_colour = _background(page.locator("tr[data-run=ui-gate] .status"))
    parked_colour = _background(parked.locator(".status"))
    assert parked_colour != waiting_colour  # a badge of its own
    filters = page.locator("fieldset.statuses .status")
    assert {"parked", "taken_over"} <= set(filters.all_inner_texts())
    page.check("input[name=status][value=parked]")
    page.click("form#filters button[type=submit]")
    assert page.locator("#runs-rows tr[data-run]").evaluate_all(
        "rows => rows.map(r => r.dataset.run)"
    ) == ["ui-park"]
    page.goto(server.url + "/ui/inbox")
    assert page.locator("tr[data-run=ui-park] [data-run-status=parked]").count() == 1
    assert page.locator("tr[data-run=ui-gate] [data-run-status]").count() == 0
    page.goto(server.url + "/ui/runs/ui-gate")
    assert page.locator("button[data-decision=takeover]").count() == 0  # not a park gate
    page.goto(server.url + "/ui/runs/ui-park")
    assert _background(page.locator("#run-status .status")) == parked_colour
    assert "at gate plan_parked" in page.locator("[data-run-notice=parked]").inner_text()
    page.fill("textarea[name=note]", "I will plan it myself")
    page.click("button[data-decision=takeover]")
    page.wait_for_selector("#run-status [data-run-status=taken_over]")
    shown = _run(server, "ui-park")
    assert shown["run"]["status"] == "taken_over"
    assert shown["decisions"][-1]["decision"] == "takeover"
    page.reload()
    taken_colour = _background(page.locator("#run-status .status"))
    assert taken_colour not in (parked_colour, waiting_colour)
    notice = page.locator("[data-run-notice=taken_over]").inner_text()
    assert "taken over at gate 'plan_parked'" in notice and "I will plan it myself" in notice
    page.goto(server.url + "/ui/runs?status=taken_over")
    row = page.locator("tr[data-run=ui-park]")
    assert _background(row.locator(".status")) == taken_colour


def _background(locator: Any) -> str:
    return str(locator.evaluate("e => getComputedStyle(e).backgroundColor"))


def test_a_finished_runs_graph_shows_each_node_as_the_ledger_records_it(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "blog_post", {"topic": "as data"}, "ui-ledger")
    with server.client("decide") as client:
        client.post("/v1/runs/ui-ledger/decide", json={"decision": "changes", "note": "again"})
        client.post("/v1/runs/ui-ledger/decide", json={"decision": "approve"})
    shown = _run(server, "ui-ledger")
    assert shown["run"]["status"] == "succeeded"
    latest: dict[str, dict[str, Any]] = {}
    for record in sorted(
        shown["records"], key=lambda r: (r["attempt"], r["started_at"], r["try_no"])
    ):
        latest[record["node"]] = record
    page = signed_in(server, "read", start="/ui/runs/ui-ledger")
    drawn = dict(
        page.locator("svg.graph g[data-node]").evaluate_all(
            "gs => gs.map(g => [g.dataset.node, g.dataset.status])"
        )
    )
    for node, status in drawn.items():
        if node in ("__start__", "__end__"):
            continue
        if node in latest:
            assert status == latest[node]["status"], node
        else:
            assert status in ("skipped", "not_reached"), node
    assert set(latest) <= set(drawn)
    assert drawn["__end__"] == "succeeded"
    loop = page.locator("svg.graph path[data-edge='editor_approval->draft']")
    assert loop.get_attribute("data-iterations") == "1"
    bars = page.locator("svg.timeline g.bar[data-bar-node=draft]").count()
    assert bars == len([r for r in shown["records"] if r["node"] == "draft"]) == 2
    assert page.locator("svg.timeline line[data-restart=resumed]").count() == 2  # two decisions
    assert page.locator("details.step").count() >= 8


def test_an_sdlc_question_set_is_answered_through_its_form(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "sdlc", {"task": "add rate limiting to the public API"}, "ui-sdlc")
    page = signed_in(server, "decide", start="/ui/runs/ui-sdlc")
    form = page.locator("form[data-question-form]")
    assert form.locator("[data-question=priority] select option").all_inner_texts() == [
        "low",
        "normal",
        "high",
        "urgent",
    ]
    assert form.locator("[data-question=scope] textarea").get_attribute("required") is not None
    page.select_option("[data-question=priority] select", "high")
    page.click("button[data-action=answer]")  # scope is required: the browser keeps the form
    assert page.url.endswith("/ui/runs/ui-sdlc")
    assert _run(server, "ui-sdlc")["run"]["status"] == "waiting"
    page.fill("[data-question=scope] textarea", "the public endpoints only")
    page.click("button[data-action=answer]")
    page.wait_for_selector(".notice.ok")
    shown = _run(server, "ui-sdlc")
    # Answered: the run went on through plan and review to the plan-approval gate.
    assert shown["run"]["status"] == "waiting"
    assert [w["name"] for w in shown["waiting"]] == ["plan_approval"]
    [asked] = shown["questions"]
    assert asked["actor"] == "decider"
    assert asked["answers"] == {
        "scope": "the public endpoints only",
        "priority": "high",
        "done_when": "",
    }


def test_the_server_checks_answers_again_and_stale_decisions_are_notices(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "sdlc", {"task": "fix the login bug"}, "ui-sdlc-bad")
    start_run(server, "blog_post", {"topic": "twice"}, "ui-twice")
    page = signed_in(server, "decide", start="/ui/runs/ui-sdlc-bad")
    csrf, qid = _csrf(page), page.locator("input[name=question_id]").get_attribute("value")
    sent = page.request.post(
        server.url + "/ui/runs/ui-sdlc-bad/answer",
        form={"csrf": csrf, "question_id": str(qid), "a.scope": "login", "a.priority": "whenever"},
    )
    assert sent.status == 200 and sent.url.endswith("/ui/runs/ui-sdlc-bad")  # back to the run
    assert "&#39;whenever&#39; is not a choice" in sent.text()
    assert _run(server, "ui-sdlc-bad")["questions"][0]["status"] == "pending"

    other = signed_in(server, "admin", start="/ui/runs/ui-twice")
    page.goto(server.url + "/ui/runs/ui-twice")
    page.fill("textarea[name=note]", "not like this")  # a form being filled is not reloaded
    other.click("button[data-decision=approve]")
    other.wait_for_selector("#run-status [data-run-status=succeeded]")
    page.click("button[data-decision=reject]")  # too late: a notice, not an error
    notice = page.locator(".notice.info")
    assert re.search(r"already|not waiting", notice.inner_text())
    assert (
        page.locator("#run-status [data-run-status]").get_attribute("data-run-status")
        == "succeeded"
    )
    assert _run(server, "ui-twice")["decisions"][0]["actor"] == "admin"


def test_a_read_session_sees_no_decide_buttons_and_a_forged_post_is_refused(
    server: Server, signed_in: SignedIn
) -> None:
    start_run(server, "blog_post", {"topic": "read only"}, "ui-read")
    page = signed_in(server, "read", start="/ui/runs/ui-read")
    assert page.locator("[data-node=editor_approval]").get_attribute("data-status") == "waiting"
    assert page.locator("button[data-decision], button[data-action]").count() == 0
    assert page.locator("[data-readonly]").count() == 1
    forged = page.request.post(
        server.url + "/ui/runs/ui-read/decide",
        form={"csrf": _csrf(page), "gate": "editor_approval", "decision": "approve"},
    )
    assert forged.status == 403 and "scope read" in forged.text()
    assert _run(server, "ui-read")["run"]["status"] == "waiting"

    decider = signed_in(server, "decide", start="/ui/runs/ui-read")
    cookie = decider.context.cookies()[0]["value"]
    jar = {"stageline_session": cookie}
    no_csrf = http_post(
        server.url + "/ui/runs/ui-read/decide", cookies=jar, data={"decision": "approve"}
    )
    cross = http_post(
        server.url + "/ui/runs/ui-read/decide",
        cookies=jar,
        headers={"Origin": "https://evil.example"},
        data={"csrf": _csrf(decider), "decision": "approve"},
    )
    assert (no_csrf.status_code, cross.status_code) == (403, 403)
    assert _run(server, "ui-read")["run"]["status"] == "waiting"
    anonymous = http_post(server.url + "/ui/runs/ui-read/decide", data={"decision": "approve"})
    assert anonymous.status_code == 401


def test_inbox_stats_and_templates_pages(server: Server, watch: Watch, signed_in: SignedIn) -> None:
    start_run(server, "blog_post", {"topic": "inbox one"}, "ui-inbox-1")
    start_run(server, "sdlc", {"task": "inbox two for the team"}, "ui-inbox-2")
    page = signed_in(server, "read", start="/ui/inbox")
    rows = page.locator("table.inbox tr[data-wait]")
    runs = rows.evaluate_all("rs => rs.map(r => r.dataset.run)")
    assert runs.index("ui-inbox-1") < runs.index("ui-inbox-2")
    countdown = page.locator("tr[data-run=ui-inbox-1] time.countdown")
    assert re.fullmatch(r"in 1d 23h|in 2d 0h", countdown.inner_text())
    assert page.locator("tr[data-run=ui-inbox-1] ol.policy li").count() >= 1
    page.goto(server.url + "/ui/stats?template=blog_post")
    assert page.locator("[data-stat-node='blog_post/draft'] svg.chart").count() >= 1
    page.goto(server.url + "/ui/templates")
    card = page.locator("[data-template=blog_post]")
    assert card.locator("svg.graph g[data-node=editor_approval]").count() == 1
    assert "2+" in card.locator("table").inner_text()
    assert watch.hosts == {"127.0.0.1"}


def test_the_screenshot_helper_shows_every_main_page_without_errors(
    serve_project: Any, tmp_path: Any, chromium: Any
) -> None:
    """What ``scripts/screenshots.py`` does for docs/, on a project with a failed run too."""
    from dashboard_browser import PAGES, screenshots, seed_runs

    server = serve_project(templates=("flaky.py",))
    seed_runs(server)
    with server.client("read") as client:
        retried = client.get("/v1/runs/flaky-1").json()
        failed = client.get("/v1/runs/flaky-2").json()
    assert (retried["run"]["status"], retried["run"]["attempt"]) == ("succeeded", 2)
    assert failed["run"]["status"] == "failed"
    made = screenshots(server, tmp_path / "shots", chromium)
    assert sorted(p.name for p in made) == sorted(f"{name}.png" for name in PAGES)
    assert all(p.stat().st_size > 10_000 for p in made)


def test_a_json_answer_is_checked_in_the_browser_and_again_by_the_server(
    server: Server, signed_in: SignedIn
) -> None:
    import shutil

    from server_fixtures import FIXTURES

    shutil.copy(FIXTURES / "json_question.py", server.project / "templates")
    start_run(server, "json_question", {"topic": "limits"}, "ui-json")
    page = signed_in(server, "decide", start="/ui/runs/ui-json")
    field = page.locator("[data-question=limits] textarea")
    page.select_option("[data-question=tier] select", "pro")
    field.fill("{rps: 5")
    assert "not valid JSON" in page.locator("[data-question=limits] .json-error").inner_text()
    page.click("button[data-action=answer]")  # the browser keeps an invalid form
    assert page.locator(".notice").count() == 0
    field.fill("[1, 2]")
    assert (
        "must be a JSON object" in page.locator("[data-question=limits] .json-error").inner_text()
    )
    field.fill('{"rps": "fast"}')  # an object, so the browser lets it go: the server says no
    assert page.locator("[data-question=limits] .json-error").inner_text() == ""
    page.click("button[data-action=answer]")
    assert "does not fit its schema" in page.locator(".notice.error").inner_text()
    assert _run(server, "ui-json")["run"]["status"] == "waiting"
    page.fill("[data-question=limits] textarea", '{"rps": 5}')
    page.select_option("[data-question=tier] select", "pro")
    page.click("button[data-action=answer]")
    page.wait_for_selector("#run-status [data-run-status=succeeded]")
    [asked] = _run(server, "ui-json")["questions"]
    assert asked["answers"] == {"limits": {"rps": 5}, "tier": "pro"}


def test_text_from_a_run_is_shown_as_text_never_as_markup(
    server: Server, signed_in: SignedIn
) -> None:
    evil = '<img src=x onerror="document.title=1"><script>document.title=2</script>'
    start_run(server, "blog_post", {"topic": evil}, "ui-evil")
    page = signed_in(server, "read", start="/ui/runs/ui-evil")
    assert page.locator("img[src=x]").count() == 0
    assert evil in page.locator("pre").filter(has_text="onerror").first.inner_text()
    page.goto(server.url + "/ui/runs?q=onerror")
    assert page.locator("#runs-rows tr[data-run]").count() == 1
    assert page.locator("img[src=x]").count() == 0
    assert page.title() == "Runs · stageline"


def test_retry_fork_and_cancel_from_the_page_as_the_scope_allows(
    server: Server, signed_in: SignedIn
) -> None:
    import shutil

    from server_fixtures import FIXTURES

    shutil.copy(FIXTURES / "flaky.py", server.project / "templates")
    start_run(server, "flaky", {"topic": "retry from the page"}, "ui-flaky")
    start_run(server, "blog_post", {"topic": "cancel me"}, "ui-cancel")
    decider = signed_in(server, "decide", start="/ui/runs/ui-flaky")
    assert decider.locator("[data-node=second]").get_attribute("data-status") == "failed"
    assert "ok.flag is missing" in decider.locator("[data-run-error]").inner_text()
    assert decider.locator("[data-action=cancel], [data-action=fork]").count() == 0  # admin's
    (server.project / "ok.flag").write_text("ok")
    try:
        decider.click("button[data-action=retry]")
        decider.wait_for_selector("#run-status [data-run-status=succeeded]")
    finally:
        (server.project / "ok.flag").unlink()
    assert decider.locator("svg.timeline line[data-restart=retried]").count() == 1
    assert _run(server, "ui-flaky")["run"]["attempt"] == 2

    admin = signed_in(server, "admin", start="/ui/runs/ui-flaky")
    admin.on("dialog", lambda dialog: dialog.accept())
    admin.click("summary[data-action=fork]")
    admin.fill("textarea[name=changes]", '{"topic": "forked"}')
    admin.click("form[action$='/fork'] button")
    admin.wait_for_selector("text=Forked from")
    forked = admin.url.rsplit("/", 1)[-1]
    assert forked != "ui-flaky"
    shown = _run(server, forked)
    assert shown["run"]["inputs"]["topic"] == "forked"
    admin.goto(server.url + "/ui/runs/ui-cancel")
    admin.click("button[data-action=cancel]")
    admin.wait_for_selector("#run-status [data-run-status=cancelled]")
    assert _run(server, "ui-cancel")["run"]["status"] == "cancelled"

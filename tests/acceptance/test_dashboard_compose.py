"""The dashboard's "New pipeline" page in a real Chromium (issue 27): a goal composed, its graph
shown before saving; a reader may preview but not save; an admin saves into templates/."""

from __future__ import annotations

import pytest

from dashboard_browser import SignedIn
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

GOAL = "Write a blog post about browsers, reviewed by two critics; an editor approves"


def test_a_goal_is_previewed_as_a_graph_then_saved_by_an_admin(
    server: Server, signed_in: SignedIn
) -> None:
    target = server.project / "templates" / "browser_post.yaml"
    page = signed_in(server, "read")
    page.click("header nav a:has-text('New pipeline')")
    critic = page.locator("#catalog tr[data-stage='blog.critic_a']")
    assert "review" in critic.inner_text() and "reviews" in critic.inner_text()
    page.fill("textarea[name=goal]", GOAL)
    page.fill("input[name=name]", "browser_post")
    page.click("#compose-form button[type=submit]")
    card = page.locator("[data-composed=browser_post]")
    assert "passed the template checks" in card.inner_text()
    graph = card.locator(".graph-wrap")
    for node in ("critic_a", "critic_b", "aggregate", "editor_approval", "publish"):
        assert node in graph.inner_text()
    assert card.locator("button:has-text('Save')").is_disabled()  # a reader cannot save
    assert not target.exists()

    admin = signed_in(server, "admin", start="/ui/compose")
    admin.fill("textarea[name=goal]", GOAL)
    admin.fill("input[name=name]", "browser_post")
    admin.click("#compose-form button[type=submit]")
    admin.click("[data-composed=browser_post] button:has-text('Save')")
    assert "/ui/templates?name=browser_post" in admin.url
    assert "saved" in admin.locator(".notice.ok").inner_text()
    assert "critic_a" in admin.locator("[data-template=browser_post] .graph-wrap").inner_text()
    assert target.is_file()


def test_a_goal_no_stage_can_do_says_so_on_the_page(server: Server, signed_in: SignedIn) -> None:
    page = signed_in(server, "read", start="/ui/compose")
    page.fill("textarea[name=goal]", "Translate the README into French")
    page.click("#compose-form button[type=submit]")
    assert "translation" in page.locator("[data-compose-error]").inner_text()
    assert page.locator("[data-composed]").count() == 0

"""Hostile text in a real Chromium: a run started from a template file whose name is markup shows
that name as text (while the template loads, and once it cannot), and the API's docs pages
still render under the server's Content-Security-Policy."""

from __future__ import annotations

from typing import Any

import pytest

from dashboard_browser import SignedIn, Watch, new_page, sign_in
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

HOSTILE = "<img src=x onerror=alert(1)>"
TEMPLATE = """
name: hostile_file
state:
  text: str
stages:
  write: hostile_stages:write
gates:
  approval: {}
edges:
  - [write, approval]
"""
STAGES = """
async def write(state, ctx):
    return {"text": "draft"}
"""


def _no_script_ran(page: Any, dialogs: list[str]) -> None:
    assert page.locator("img[src=x]").count() == 0  # no element was injected
    assert dialogs == []  # and no script ran


def test_a_template_file_named_as_markup_is_shown_as_text_loaded_or_not(
    server: Server, chromium: Any, watch: Watch
) -> None:
    (server.project / "hostile_stages.py").write_text(STAGES)
    path = server.project / f"{HOSTILE}.yaml"
    path.write_text(TEMPLATE)
    done = server.cli("run", path.name, "--run-id", "ui-hostile-file", check=False)
    assert done.returncode == 3, done.stdout + done.stderr  # waiting at its gate
    dialogs: list[str] = []
    page = new_page(chromium, watch)
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in(page, server, "read", start="/ui/runs/ui-hostile-file")
    assert page.locator("svg.graph g[data-node=approval]").get_attribute("data-status") == (
        "waiting"
    )
    assert HOSTILE in page.locator("body").inner_text()
    _no_script_ran(page, dialogs)
    page.goto(server.url + "/ui/runs")
    assert HOSTILE in page.locator("tr[data-run=ui-hostile-file]").inner_text()
    _no_script_ran(page, dialogs)

    path.rename(server.project / "moved.yaml")  # the run's template can no longer be loaded
    page.goto(server.url + "/ui/runs/ui-hostile-file")
    notice = page.locator("[data-no-graph]").inner_text()
    assert f"{HOSTILE}.yaml' cannot be loaded" in notice
    _no_script_ran(page, dialogs)


def test_the_api_docs_and_link_pages_render_under_the_content_security_policy(
    server: Server, chromium: Any, watch: Watch, signed_in: SignedIn
) -> None:
    page = signed_in(server, "read")
    page.goto(server.url + "/ui/docs")
    page.wait_for_selector(".swagger-ui .info .title")
    assert "stageline" in page.locator(".swagger-ui .info .title").inner_text()
    assert page.locator(".opblock").count() > 5  # the routes, read from /ui/openapi.json
    context = chromium.new_context(
        extra_http_headers={"Authorization": f"Bearer {server.tokens['read']}"}
    )
    try:
        bearer = watch.attach(context.new_page())
        bearer.goto(server.url + "/docs")
        bearer.wait_for_selector(".swagger-ui .opblock")
        bearer.goto(server.url + "/redoc")
        bearer.wait_for_selector("[data-section-id]", timeout=60_000)
        assert "stageline" in bearer.locator("h1").first.inner_text()
    finally:
        context.close()
    page.goto(server.url + "/links/not-a.token")  # a link page: its inline style, by hash only
    assert page.locator("h1").inner_text() == "This link cannot decide anything"
    assert page.locator("body").evaluate("b => getComputedStyle(b).maxWidth") != "none"
    answered = "console: Failed to load resource: the server responded with a status of 404"
    assert watch.errors.count(answered + " (Not Found)") == 1  # links are off here: a 404 page
    watch.errors.remove(answered + " (Not Found)")
    # ReDoc's footer asks its CDN for a logo: the policy refuses it, as it should; nothing else
    # may be refused or fail.
    logo = "https://cdn.redoc.ly/redoc/logo-mini.svg"
    assert watch.foreign == [logo]
    watch.foreign = []
    watch.errors = [e for e in watch.errors if not (logo in e and "Content Security" in e)]

"""Driving the dashboard in Debian's Chromium with Playwright (never ``playwright install``).

The one place the browser tests (``tests/acceptance/test_dashboard*.py`` and the others that
look at a page) and ``scripts/screenshots.py`` get a browser from: ``browser()`` launches
Chromium; ``Watch`` records every script error, console error and request to another host of a
page; ``sign_in`` signs a page in with a token; ``seed_runs`` makes the runs the screenshots
show; ``screenshots`` saves the main pages as PNG files. The pytest fixtures ``chromium`` (one
per module), ``watch`` (checked as the test ends) and ``signed_in`` (a watched page, signed
in) are registered for the acceptance suites by their ``conftest.py``; ``http_session`` is the
same sign-in without a browser.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from server_fixtures import Server

VIEWPORT = {"width": 1280, "height": 900}


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium (the system's): ``with browser() as b: page = b.new_page()``."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    assert path, "chromium is not installed (apt-get install chromium)"
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Watch:
    """What a page did that it must not: script errors, console errors, foreign requests."""

    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)

    def attach(self, page: Any) -> Any:
        page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        page.on(
            "console",
            lambda msg: msg.type == "error" and self.errors.append(f"console: {msg.text}"),
        )

        def request(req: Any) -> None:
            host = urlsplit(req.url).hostname or ""
            if req.url.startswith(("data:", "about:", "blob:")):
                return
            self.hosts.add(host)
            if host != "127.0.0.1":
                self.foreign.append(req.url)

        page.on("request", request)
        return page

    def check(self) -> None:
        assert not self.errors, self.errors
        assert not self.foreign, self.foreign


def new_page(b: Any, watch: Watch, viewport: dict[str, int] | None = None) -> Any:
    """A page in a context of its own (its own cookies), watched by ``watch``."""
    context = b.new_context(viewport=viewport or VIEWPORT)
    return watch.attach(context.new_page())


def sign_in(page: Any, server: Server, scope: str = "decide", *, start: str = "/ui/") -> None:
    page.goto(server.url + start)
    page.fill("input[name=token]", server.tokens[scope])
    page.click("form button[type=submit]")
    page.wait_for_selector("header .chip")


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the tests of a module."""
    with browser() as b:
        yield b


@pytest.fixture
def watch() -> Iterator[Watch]:
    """The test's ``Watch``, checked when the test ends (a test may first take out what it
    expected to see)."""
    found = Watch()
    yield found
    found.check()


SignedIn = Callable[..., Any]
"""``signed_in(server, scope="decide", start="/ui/")``: a new watched page, signed in."""


@pytest.fixture
def signed_in(chromium: Any, watch: Watch) -> SignedIn:
    """Opens a page of its own in ``chromium``, watched by the test's ``watch``, and signs it
    in to ``server`` with the token of ``scope`` at ``start``."""

    def open_page(
        server: Server,
        scope: str = "decide",
        *,
        start: str = "/ui/",
        viewport: dict[str, int] | None = None,
    ) -> Any:
        page = new_page(chromium, watch, viewport)
        sign_in(page, server, scope, start=start)
        return page

    return open_page


def start_run(server: Server, template: str, inputs: dict[str, Any], run_id: str) -> dict[str, Any]:
    """A run started through the API, answered when it ends or waits."""
    with server.client("admin") as client:
        answer = client.post(
            "/v1/runs",
            json={"template": template, "inputs": inputs, "run_id": run_id, "wait": True},
        )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def seed_runs(server: Server) -> dict[str, str]:
    """The runs the screenshots show: waiting at a gate, at questions, finished, retried,
    failed, parked and taken over (the server's project needs the ``flaky.py`` fixture
    template)."""
    start_run(server, "blog_post", {"topic": "durable pipelines for agents"}, "blog-done")
    with server.client("admin") as client:
        client.post(
            "/v1/runs/blog-done/decide",
            json={"decision": "changes", "note": "shorter intro, please"},
        )
        client.post("/v1/runs/blog-done/decide", json={"decision": "approve", "note": "ship"})
    start_run(server, "blog_post", {"topic": "checkpoints, explained"}, "blog-wait")
    start_run(server, "sdlc", {"task": "add rate limiting to the public API"}, "sdlc-ask")
    assert (server.project / "templates" / "flaky.py").exists(), "seed_runs needs flaky.py"
    start_run(server, "flaky", {"topic": "retry me"}, "flaky-1")
    (server.project / "ok.flag").write_text("ok")
    with server.client("admin") as client:
        client.post("/v1/runs/flaky-1/retry")
    (server.project / "ok.flag").unlink()
    start_run(server, "flaky", {"topic": "still failing"}, "flaky-2")
    answers = {"scope": "a login page at /login", "priority": "normal", "done_when": "CI passes"}
    for run_id in ("sdlc-parked", "sdlc-mine"):  # no plan passes review: parked
        start_run(server, "sdlc", {"task": "add a login page", "review_threshold": 1.5}, run_id)
        with server.client("admin") as client:
            client.post(f"/v1/runs/{run_id}/answer", json={"answers": answers})
    with server.client("admin") as client:
        client.post(
            "/v1/runs/sdlc-mine/decide", json={"decision": "takeover", "note": "I plan it myself"}
        )
    return {
        "waiting": "blog-wait",
        "done": "blog-done",
        "question": "sdlc-ask",
        "parked": "sdlc-parked",
        "taken_over": "sdlc-mine",
    }


PAGES = {
    "runs": "/ui/runs",
    "run-waiting": "/ui/runs/blog-wait",
    "run-finished": "/ui/runs/blog-done",
    "run-question": "/ui/runs/sdlc-ask",
    "run-failed": "/ui/runs/flaky-2",
    "run-parked": "/ui/runs/sdlc-parked",
    "inbox": "/ui/inbox",
    "stats": "/ui/stats?template=blog_post",
    "templates": "/ui/templates",
    "sign-in": "/ui/login",
}


def screenshots(server: Server, folder: Path, chromium: Any = None) -> list[Path]:
    """Each page of ``PAGES`` as ``folder/NAME.png`` (1280 wide, whole page), signed in as
    the admin token, in ``chromium`` (else one launched here); checks on the way that no page
    errs or reaches another host."""
    if chromium is None:
        with browser() as launched:
            return screenshots(server, folder, launched)
    folder.mkdir(parents=True, exist_ok=True)
    made: list[Path] = []
    watch = Watch()
    b = chromium
    page = new_page(b, watch)
    anonymous = new_page(b, watch)
    anonymous.goto(server.url + PAGES["sign-in"])
    made.append(folder / "sign-in.png")
    anonymous.screenshot(path=str(made[-1]))
    sign_in(page, server, "admin")
    for name, path in PAGES.items():
        if name == "sign-in":
            continue
        page.goto(server.url + path)
        page.wait_for_load_state("load")
        made.append(folder / f"{name}.png")
        page.screenshot(path=str(made[-1]), full_page=True)
    watch.check()
    return made


@contextmanager
def http_session(url: str, secret: str, *, headers: dict[str, str] | None = None) -> Iterator[Any]:
    """An httpx client signed in to the dashboard at ``url`` with token ``secret`` (its cookie
    jar holds the session; no browser), sending ``headers`` with every request:
    ``with http_session(url, token) as c: ...``."""
    import httpx

    with httpx.Client(base_url=url, headers=headers, timeout=60.0) as client:
        signed = client.post("/ui/login", data={"token": secret})
        assert signed.status_code == 303 and "stageline_session" in client.cookies, signed.text
        yield client


def page_csrf(html: str) -> str:
    """The CSRF token in a dashboard page's forms."""
    return html.split('name="csrf" value="', 1)[1].split('"', 1)[0]

"""Dashboard sessions over real ``stageline serve`` processes: kept in the ledger, they survive a
restart and are shared by two servers on one SQLite file; sign-out and revoking the token end
them on the server; signing in again and again ends only that token's oldest sessions."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing

import pytest

from dashboard_browser import http_session, page_csrf, start_run
from server_fixtures import Server, http_get
from stageline.ledger import SessionPolicy, hash_token

pytestmark = pytest.mark.timeout(300)

COOKIE = "stageline_session"


def _works(url: str, cookie: str) -> bool:
    """Whether ``cookie`` signs a page in on the server at ``url`` (else: to the sign-in)."""
    page = http_get(
        f"{url}/ui/runs",
        cookies={COOKIE: cookie},
        headers={"Accept": "text/html"},
        follow_redirects=False,
        timeout=60,
    )
    assert page.status_code in (200, 303), page.text
    return page.status_code == 200


def _sign_in(url: str, secret: str) -> str:
    with http_session(url, secret) as client:
        return str(client.cookies[COOKIE])


def test_a_session_survives_a_restart_and_works_on_a_second_server_of_the_database(
    serve_project: Callable[..., Server],
) -> None:
    first = serve_project()
    cookie = _sign_in(first.url, first.tokens["read"])
    second = Server(project=first.project, env=first.env, tokens=first.tokens).start()
    try:
        assert _works(second.url, cookie)
        first.kill()
        first.start()
        assert _works(first.url, cookie)
    finally:
        second.kill()
    db = first.project / ".stageline" / "stageline.db"
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT * FROM stageline_sessions").fetchall()
    assert any(hash_token(cookie) in row for row in rows)
    assert not any(cookie in str(value) for row in rows for value in row)  # only its hash


def test_signing_out_ends_the_session_on_the_server_with_or_without_the_csrf_field(
    server: Server,
) -> None:
    for send_csrf in (True, False):
        with http_session(server.url, server.tokens["read"]) as client:
            cookie = str(client.cookies[COOKIE])
            form = {"csrf": page_csrf(client.get("/ui/runs").text)} if send_csrf else {}
            cross = client.post("/ui/logout", data=form, headers={"Origin": "https://evil.x"})
            assert cross.status_code == 403 and _works(server.url, cookie)
            out = client.post("/ui/logout", data=form)
            assert out.status_code == 303 and out.headers["location"] == "/ui/login"
        assert not _works(server.url, cookie), send_csrf  # the old cookie signs nothing in


def test_revoking_a_token_ends_its_sessions_and_no_other(server: Server) -> None:
    mine = _sign_in(server.url, server.create_token("short-lived", "read"))
    theirs = _sign_in(server.url, server.tokens["read"])
    assert _works(server.url, mine)
    server.cli("token", "revoke", "short-lived")
    assert not _works(server.url, mine)
    assert _works(server.url, theirs)
    fragment = http_get(f"{server.url}/ui/runs", cookies={COOKIE: mine}, timeout=60)
    assert fragment.status_code == 401


def test_signing_in_past_the_cap_ends_that_tokens_oldest_session_only(server: Server) -> None:
    cap = SessionPolicy().per_token
    quiet = _sign_in(server.url, server.tokens["admin"])
    secret = server.create_token("busy-signer", "read")
    made = [_sign_in(server.url, secret) for _ in range(cap + 1)]
    assert not _works(server.url, made[0])
    assert all(_works(server.url, c) for c in made[1:])
    assert _works(server.url, quiet)


def test_signing_in_again_in_the_same_browser_ends_its_previous_session(server: Server) -> None:
    with http_session(server.url, server.tokens["read"]) as client:
        before = str(client.cookies[COOKIE])
        again = client.post("/ui/login", data={"token": server.tokens["decide"]})
        assert again.status_code == 303
        after = str(client.cookies[COOKIE])
    assert after != before
    assert _works(server.url, after) and not _works(server.url, before)


def test_a_notice_waits_for_the_page_past_the_refreshes_of_other_tabs(server: Server) -> None:
    """A form's answer is told on the page it leads to, even when another tab of the session
    refreshed itself in between (the fragments a page's script fetches show no notice)."""
    start_run(server, "ten_nodes", {"seed": 2}, "notice-run")
    with http_session(server.url, server.tokens["decide"]) as client:
        csrf = page_csrf(client.get("/ui/runs/notice-run").text)
        sent = client.post(
            "/ui/runs/notice-run/respond", data={"csrf": csrf, "as": "text", "value": "hi"}
        )
        assert sent.status_code == 303
        assert client.get("/ui/runs/notice-run/live").status_code == 200  # another tab's
        assert client.get("/ui/runs/rows").status_code == 200
        page = client.get("/ui/runs/notice-run").text
    assert "run notice-run is succeeded, not waiting for a person" in page, page

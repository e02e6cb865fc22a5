"""Every answer of a real ``stageline serve`` carries safe headers, errors and streams too, and
a cross-site dashboard post is refused before anything it sent is looked at."""

from __future__ import annotations

import httpx
import pytest

from dashboard_browser import http_session, page_csrf, start_run
from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

HOSTILE_ID = "<svg onload=alert(1)>"


def _assert_safe(answer: httpx.Response) -> None:
    where = f"{answer.request.method} {answer.request.url.path} -> {answer.status_code}"
    headers = answer.headers
    assert headers.get("content-type"), where
    csp = headers.get("content-security-policy", "")
    assert (
        "frame-ancestors 'none'" in csp
        and "'unsafe-inline'" not in csp.split("script-src", 1)[-1].split(";")[0]
    ), (where, csp)
    assert headers.get("x-frame-options") == "DENY", where
    assert headers.get("x-content-type-options") == "nosniff", where
    assert headers.get("referrer-policy") in ("same-origin", "no-referrer"), where


def test_every_kind_of_answer_has_a_content_type_csp_and_no_sniffing(server: Server) -> None:
    start_run(server, "ten_nodes", {"seed": 1}, "hdr-done")
    with server.client("admin") as client, server.client(None) as anonymous:
        answers = {
            "json": client.get("/v1/runs/hdr-done"),
            "404": client.get("/v1/nothing-here"),
            "404 run": client.get("/v1/runs/no-such-run"),
            "405": client.delete("/ok"),
            "422": client.post("/v1/runs", json={"template": 5}),
            "401": anonymous.get("/v1/runs"),
            "413": client.post("/v1/runs", content=b"x" * 2_000_000),
            "links": anonymous.get("/links/not-a.token"),
            "links bad": anonymous.get("/links/%3Cb%3E"),
            "static": anonymous.get("/ui/static/app.css"),
            "docs assets": anonymous.get("/docs/assets/swagger-ui.css"),
            "dashboard": anonymous.get("/ui/login"),
            "dashboard 401": anonymous.get("/ui/runs", headers={"Accept": "text/plain"}),
            "ok": anonymous.get("/ok"),
            "docs": client.get("/docs"),
            "redoc": client.get("/redoc"),
            "sse": client.get("/v1/runs/hdr-done/events/stream"),
        }
    assert answers["json"].status_code == 200
    assert answers["sse"].headers["content-type"].startswith("text/event-stream")
    assert "event: run.succeeded" in answers["sse"].text
    assert answers["static"].headers["content-type"].startswith("text/css")
    expected = {"404": 404, "405": 405, "422": 422, "401": 401, "413": 413, "static": 200}
    for name, status in expected.items():
        assert answers[name].status_code == status, (name, answers[name].text)
    for answer in answers.values():
        _assert_safe(answer)
    assert answers["links"].headers["referrer-policy"] == "no-referrer"  # its URL is a secret


def test_a_cross_site_post_with_a_hostile_run_id_is_refused_before_the_id_is_read(
    server: Server,
) -> None:
    path = f"/ui/runs/{HOSTILE_ID}/decide"
    with http_session(server.url, server.tokens["decide"]) as browser:
        csrf = page_csrf(browser.get("/ui/runs").text)
        cross = browser.post(
            path, headers={"Origin": "https://evil.example"}, data={"decision": "approve"}
        )
        no_csrf = browser.post(path, data={"decision": "approve"})
        same = browser.post(path, data={"decision": "approve", "csrf": csrf})
    assert (cross.status_code, no_csrf.status_code) == (403, 403)
    for refused in (cross, no_csrf):
        assert "<svg" not in refused.text, refused.text
        _assert_safe(refused)
    assert same.status_code == 404  # past the checks: only then is the id looked at
    assert same.headers["content-type"].startswith("text/plain")
    _assert_safe(same)

"""``GET /v1/stages`` and ``POST /v1/compose`` over a real ``stageline serve`` (issue 27):
tokens required, the catalog with measured runs, a preview that writes nothing, a save into
the templates folder that the server can then run, 4xx JSON for bad input."""

from __future__ import annotations

import pytest

from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)

GOAL = "Write a blog post about caching, reviewed by two critics"


def test_the_routes_need_a_token_and_compose_needs_admin(server: Server) -> None:
    with server.client(None) as anonymous:
        assert anonymous.get("/v1/stages").status_code == 401
        assert anonymous.post("/v1/compose", json={"goal": GOAL}).status_code == 401
    with server.client("decide") as decider:
        assert decider.get("/v1/stages").status_code == 200
        refused = decider.post("/v1/compose", json={"goal": GOAL})
        assert refused.status_code == 403 and refused.json()


def test_the_catalog_lists_stages_with_measured_runs(server: Server) -> None:
    ran = server.cli("run", "blog_post", "-i", "topic=catalogs", check=False)  # waits: gate
    assert ran.returncode == 3, ran.stderr
    with server.client("read") as client:
        review = client.get("/v1/stages", params={"capability": "review"}).json()
    critics = {e["ref"]: e for e in review}
    assert {"blog.critic_a", "blog.critic_b", "sdlc.review"} <= set(critics)
    assert all(e["capability"] == "review" for e in review)
    measured = critics["blog.critic_a"]["measured"]
    assert measured["runs"] >= 1 and measured["failure_rate"] == 0.0
    assert critics["blog.critic_a"]["writes"] == ["reviews"]


def test_compose_previews_then_saves_a_template_the_server_runs(server: Server) -> None:
    folder = server.project / "templates"
    with server.client("admin") as client:
        preview = client.post("/v1/compose", json={"goal": GOAL, "name": "reviewed_post"})
        assert preview.status_code == 200, preview.text
        shown = preview.json()
        assert shown["path"] is None and "critic_a" in shown["mermaid"]
        assert "fanout:" in shown["yaml"] and not (folder / "reviewed_post.yaml").exists()
        saved = client.post(
            "/v1/compose", json={"goal": GOAL, "name": "reviewed_post", "save": True}
        )
        assert saved.status_code == 200, saved.text
        assert saved.json()["path"] == str(folder / "reviewed_post.yaml")
        assert (folder / "reviewed_post.yaml").read_text() == shown["yaml"]
        again = client.post(
            "/v1/compose", json={"goal": GOAL, "name": "reviewed_post", "save": True}
        )
        assert again.status_code == 409 and "force" in again.json()["detail"]
        listed = {t["name"] for t in client.get("/v1/templates").json()}
    assert "reviewed_post" in listed
    done = server.cli("run", "reviewed_post", "-i", "topic=caching")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"goal": "Translate the README into French"}, 400),
        ({"goal": ""}, 422),
        ({"goal": GOAL, "name": "../escape"}, 422),
        ({"goal": GOAL, "save": "yes please"}, 422),
        ({}, 422),
    ],
)
def test_bad_compose_requests_get_a_json_4xx(
    server: Server, body: dict[str, object], status: int
) -> None:
    with server.client("admin") as client:
        answer = client.post("/v1/compose", json=body)
    assert answer.status_code in (status, 400), answer.text
    assert answer.json()
    if "Translate" in str(body.get("goal")):
        assert "translation" in answer.json()["detail"]
    assert not (server.project / "templates" / "escape.yaml").exists()

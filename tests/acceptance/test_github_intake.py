"""GitHub issue intake against a real ``stageline serve``: webhooks signed as GitHub signs
them, the fake GitHub REST API on loopback, a bare git repository as the remote. A labelled
issue starts exactly one run however often it is delivered; a forged or unsigned delivery
starts nothing. ``stageline github intake`` and ``[github] poll_issues`` start runs from the
same labelled issues, once. The run tells its issue what it does (the comment mirror)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_github import FakeGitHub

from forge_fixtures import REPO, TOKEN, WEBHOOK_SECRET, GitRemote, github_toml
from server_fixtures import Server, make_project
from stageline.forge import sign

pytestmark = pytest.mark.timeout(300)

ENV = {"GITHUB_TOKEN": TOKEN, "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET}


def project(root: Path, fake: FakeGitHub, remote: GitRemote, *, poll: bool = False) -> Server:
    server = make_project(root, templates=("forge_intake.py",), env=ENV)
    extra = 'intake_template = "forge_intake"\n' + ("poll_issues = true\n" if poll else "")
    (root / "stageline.toml").write_text(github_toml(fake.url, remote.checkout, extra=extra))
    return server


@pytest.fixture
def served(tmp_path: Path, fake_github: FakeGitHub, git_remote: GitRemote) -> Iterator[Server]:
    server = project(tmp_path / "project", fake_github, git_remote).start()
    yield server
    server.kill()


def deliver(
    server: Server,
    event: str,
    payload: dict[str, Any],
    delivery: str,
    *,
    secret: str | None = WEBHOOK_SECRET,
) -> httpx.Response:
    """A delivery as GitHub sends it (no stageline token)."""
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "User-Agent": "GitHub-Hookshot/test",
    }
    if secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        return client.post("/v1/github/webhook", content=body, headers=headers)


def runs(server: Server) -> list[dict[str, Any]]:
    with server.client("read") as client:
        answer = client.get("/v1/runs", params={"template": "forge_intake"})
    assert answer.status_code == 200, answer.text
    return list(answer.json()["runs"])


def wait_status(server: Server, run_id: str, status: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with server.client("read") as client:
            run = client.get(f"/v1/runs/{run_id}").json()["run"]
        if run.get("status") == status:
            return dict(run)
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} is {run.get('status')}, not {status}: {server.log()}")


def test_a_labelled_issue_starts_exactly_one_run(
    served: Server, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.add_issue(REPO, 12, "Add a --verbose flag", "Print each step.", ("stageline",))
    payload = fake_github.issues_payload(REPO, 12, "labeled", "stageline")
    first = deliver(served, "issues", payload, "delivery-1")
    assert first.status_code == 201, first.text
    run_id = first.json()["run_id"]
    assert first.json()["started"] is True
    for _ in range(2):  # GitHub redelivers it (the same delivery id)
        again = deliver(served, "issues", payload, "delivery-1")
        assert again.status_code == 200 and again.json() == {"duplicate": "delivery-1"}
    opened = fake_github.issues_payload(REPO, 12, "opened")
    late = deliver(served, "issues", opened, "delivery-2")  # another event for the same issue
    assert late.json() == {"run_id": run_id, "started": False}
    [run] = runs(served)
    assert run["run_id"] == run_id
    assert run["inputs"] == {
        "task": "Add a --verbose flag\n\nPrint each step.",
        "forge_repo": REPO,
        "issue_number": 12,
        "repo": str(git_remote.checkout.resolve()),
    }
    wait_status(served, run_id, "waiting")  # advanced by the server up to its gate
    assert len(runs(served)) == 1
    said = fake_github.wait_for(  # the issue is told, once
        lambda: len(bodies := fake_github.comment_bodies(REPO, 12)) >= 2 and bodies,
        what="the comments of issue 12",
    )
    assert said[0].startswith(f"🤖 stageline took this issue: run `{run_id}` (forge_intake).")
    assert said[1].startswith("⏸️ Waiting for a decision at gate `review`:")
    assert len([b for b in said if "took this issue" in b]) == 1


def test_a_forged_or_unsigned_delivery_is_refused_and_starts_nothing(
    served: Server, fake_github: FakeGitHub
) -> None:
    fake_github.add_issue(REPO, 13, "Drop the tables", labels=("stageline",))
    payload = fake_github.issues_payload(REPO, 13, "labeled", "stageline")
    forged = deliver(served, "issues", payload, "forged-1", secret="not-the-secret")
    unsigned = deliver(served, "issues", payload, "unsigned-1", secret=None)
    for refused in (forged, unsigned):
        assert refused.status_code == 401
        assert refused.json() == {"detail": "missing or invalid X-Hub-Signature-256 signature"}
    ping = deliver(served, "ping", {"zen": "Speak like a human.", "hook_id": 1}, "ping-1")
    assert ping.status_code == 200 and ping.json()["ok"] is True
    assert runs(served) == []
    assert fake_github.requests == []  # nothing reached GitHub either


def test_cli_intake_and_the_servers_poll_start_each_labelled_issue_once(
    tmp_path: Path, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.add_issue(REPO, 20, "First", labels=("stageline",))
    fake_github.add_issue(REPO, 21, "Not for us", labels=("question",))
    server = project(tmp_path / "project", fake_github, git_remote, poll=True)
    done = server.cli("github", "intake")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "acme/app#20: started run gh-acme-app-20" in done.stdout
    again = server.cli("github", "intake")
    assert "acme/app#20: has run gh-acme-app-20" in again.stdout, again.stdout
    fake_github.add_issue(REPO, 22, "Second", labels=("stageline",))
    server.start()
    try:
        fake_github.wait_for(
            lambda: {r["run_id"] for r in runs(server)} == {"gh-acme-app-20", "gh-acme-app-22"},
            what="the poll's run for issue 22",
        )
        labelled = fake_github.of("GET", f"/repos/{REPO}/issues")
        assert labelled and all(r.query["labels"] == "stageline" for r in labelled)
        wait_status(server, "gh-acme-app-22", "waiting")
    finally:
        server.kill()
    assert len(runs(server.start())) == 2
    server.kill()

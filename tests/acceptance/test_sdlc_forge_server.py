"""sdlc against GitHub through a real ``stageline serve``: a labelled issue (a signed ``issues``
webhook) starts the run; a person answers clarify and approves the plan over the API; the
branch is pushed to a bare remote; CI on the fake GitHub fails once, then passes, each time
completed by a signed ``workflow_run`` webhook (or, in the second test, by the server's
polling); the run ends at a draft pull request with the plan. While it waits for CI the run
holds no lease, and a person's answer to that wait is refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fake_github import FakeGitHub

from fake_http import wait_for
from forge_fixtures import REPO, TOKEN, WEBHOOK_SECRET, GitRemote, github_toml
from server_fixtures import Server, make_project
from stageline.forge import sign

pytestmark = pytest.mark.timeout(300)

ENV = {"GITHUB_TOKEN": TOKEN, "GITHUB_WEBHOOK_SECRET": WEBHOOK_SECRET}
ANSWERS = {"scope": "calc.py gains a subtract function", "priority": "normal", "done_when": "CI"}
ISSUE = 7


@pytest.fixture
def poll_interval() -> str:
    """How often the server polls a CI wait (a test of webhooks polls not at all, in effect,
    lest a poll move the run between CI's completion and the webhook's delivery)."""
    return "1s"


@pytest.fixture
def served(
    tmp_path: Path, fake_github: FakeGitHub, git_remote: GitRemote, poll_interval: str
) -> Iterator[Server]:
    server = make_project(tmp_path / "project", env=ENV)
    toml = github_toml(fake_github.url, git_remote.checkout, poll_interval=poll_interval)
    (server.project / "stageline.toml").write_text(toml)
    server.start()
    yield server
    server.kill()


def deliver(server: Server, event: str, payload: dict[str, Any], delivery: str) -> httpx.Response:
    """A delivery signed as GitHub signs it (no stageline token)."""
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": sign(WEBHOOK_SECRET, body),
    }
    with httpx.Client(base_url=server.url, timeout=60) as client:
        return client.post("/v1/github/webhook", content=body, headers=headers)


def run_of(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as client:
        found = client.get(f"/v1/runs/{run_id}")
    assert found.status_code == 200, found.text
    return dict(found.json())


def wait_until(server: Server, run_id: str, check: Any, what: str, timeout: float = 120) -> Any:
    seen: dict[str, Any] = {}

    def found() -> dict[str, Any] | None:
        seen["detail"] = run_of(server, run_id)
        return seen["detail"] if check(seen["detail"]) else None

    return wait_for(
        found,
        timeout=timeout,
        every=0.2,
        failure=lambda: f"run {run_id}: no {what}: {seen.get('detail')}\n{server.log()}",
    )


def waiting_at(kind: str, build: int | None = None) -> Any:
    def check(detail: dict[str, Any]) -> bool:
        waits = [w for w in detail["waiting"] if w["kind"] == kind]
        return (
            detail["run"]["status"] == "waiting"
            and bool(waits)
            and (build is None or waits[0]["payload"]["ci"]["build_round"] == build)
        )

    return check


def planned(server: Server, fake: FakeGitHub) -> str:
    """A run from a labelled issue, through clarify and plan approval over the API, built,
    pushed and waiting for its first CI run."""
    fake.add_issue(REPO, ISSUE, "Add subtract", "calc.py needs subtract.", ("stageline",))
    started = deliver(
        server, "issues", fake.issues_payload(REPO, ISSUE, "labeled", "stageline"), "i-1"
    )
    assert started.status_code == 201, started.text
    run_id = str(started.json()["run_id"])
    wait_until(server, run_id, waiting_at("question"), "clarify question")
    with server.client("decide") as client:
        answered = client.post(f"/v1/runs/{run_id}/answer", json={"answers": ANSWERS})
        assert answered.status_code == 200, answered.text
        gate = [w["name"] for w in answered.json()["waiting"]]
        assert gate == ["plan_approval"], answered.text
        approved = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "gate": "plan_approval"}
        )
        assert approved.status_code == 200, approved.text
    return run_id


def check_ci_wait(server: Server, run_id: str, remote: GitRemote) -> dict[str, Any]:
    """The run waits for CI: no lease, the branch pushed, no person may answer."""
    detail = wait_until(server, run_id, waiting_at("ci", 1), "CI wait")
    assert detail["run"]["lease_holder"] is None
    [ci] = [w for w in detail["waiting"] if w["kind"] == "ci"]
    assert remote.head(detail["state"]["branch"]) == ci["payload"]["ci"]["head_sha"]
    with server.client("decide") as client:
        for path, body in (
            ("respond", {"value": {"conclusion": "success"}}),
            ("decide", {"decision": "approve"}),
        ):
            refused = client.post(f"/v1/runs/{run_id}/{path}", json=body)
            assert refused.status_code == 409, refused.text
            assert "only the forge completes" in refused.json()["detail"]
        pending = client.get(f"/v1/runs/{run_id}/pending")
        assert pending.json() == []
    return detail


def check_draft_pr(detail: dict[str, Any], fake: FakeGitHub, remote: GitRemote) -> None:
    [gate] = detail["waiting"]
    assert gate["name"] == "apply" and "ready for review" in gate["payload"]["show"]["apply_action"]
    [pull] = fake.pulls.values()
    state = detail["state"]
    assert pull["draft"] is True and pull["html_url"] == state["pr_url"]
    assert pull["head"]["ref"] == state["branch"] and pull["base"]["ref"] == "main"
    assert state["plan"].splitlines()[0] in pull["body"]
    assert "Builds taken: 2" in pull["body"] and f"Closes #{ISSUE}" in pull["body"]
    assert remote.head(state["branch"]) == state["pushed_sha"]
    assert [w["actor"] for w in detail["ci"]] == ["github", "github"]
    assert [w["ci"]["conclusion"] for w in detail["ci"]] == ["failure", "success"]


STORY = (
    "stageline took this issue",
    "Questions",
    "The plan",
    "dispatched on stageline/",
    "failure (build 1); back to build",
    "dispatched on stageline/",
    "success (build 2)",
    "draft pull request #",
)
"""What the issue's comments tell, in this order (others in between)."""


def told_in_order(bodies: list[str]) -> bool:
    at = 0
    for said in STORY:
        found = next((i for i in range(at, len(bodies)) if said in bodies[i]), None)
        if found is None:
            return False
        at = found + 1
    return True


@pytest.mark.parametrize("poll_interval", ["1h"])
def test_ci_by_webhooks_fails_then_passes_and_ends_at_a_draft_pr(
    served: Server, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.ci_conclusions = ["failure", "success"]
    fake_github.ci_logs = ["collecting\nFAILED tests/test_calc.py::test_subtract", "ok"]
    run_id = planned(served, fake_github)
    check_ci_wait(served, run_id, git_remote)
    shown = served.cli("show", run_id).stdout
    assert "waiting on CI: workflow run" in " ".join(shown.split()), shown
    pending = " ".join(served.cli("pending", run_id).stdout.split())
    assert "nothing waits for a person" in pending and "waiting on CI" in pending, pending
    refused = served.cli("approve", run_id, check=False)
    assert refused.returncode == 4, refused.stdout + refused.stderr
    assert "only the forge completes" in " ".join((refused.stdout + refused.stderr).split())
    with httpx.Client(base_url=served.url, timeout=60) as browser:
        login = browser.post("/ui/login", data={"token": served.tokens["read"]})
        assert login.status_code in (200, 303), login.text
        page = browser.get(f"/ui/runs/{run_id}")
        assert page.status_code == 200 and "Waiting on CI" in page.text
    first = fake_github.complete()
    moved = deliver(served, "workflow_run", fake_github.workflow_run_payload(first), "ci-1")
    assert moved.status_code == 202 and moved.json() == {"runs": [run_id]}, moved.text
    again = wait_until(served, run_id, waiting_at("ci", 2), "second CI wait")
    assert "FAILED tests/test_calc.py::test_subtract" in again["state"]["build_feedback"]
    second = fake_github.wait_for(lambda: len(fake_github.runs) == 2 and fake_github.runs[1])
    fake_github.complete(second.id)
    moved = deliver(served, "workflow_run", fake_github.workflow_run_payload(second), "ci-2")
    assert moved.json() == {"runs": [run_id]}, moved.text
    done = wait_until(served, run_id, waiting_at("gate"), "apply gate")
    check_draft_pr(done, fake_github, git_remote)
    try:
        fake_github.wait_for(lambda: told_in_order(fake_github.comment_bodies(REPO, ISSUE)))
    except AssertionError:
        raise AssertionError("\n---\n".join(fake_github.comment_bodies(REPO, ISSUE))) from None
    with served.client("decide") as client:
        ready = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "gate": "apply"}
        )
    assert ready.status_code == 200, ready.text
    assert ready.json()["run"]["status"] == "succeeded"
    assert ready.json()["state"]["pr_state"] == "ready"
    assert next(iter(fake_github.pulls.values()))["draft"] is False


def test_ci_by_polling_fails_then_passes_and_ends_at_a_draft_pr(
    served: Server, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.ci_conclusions = ["failure", "success"]
    run_id = planned(served, fake_github)
    check_ci_wait(served, run_id, git_remote)
    fake_github.complete()
    wait_until(served, run_id, waiting_at("ci", 2), "second CI wait")
    fake_github.wait_for(lambda: len(fake_github.runs) == 2)
    fake_github.complete()
    done = wait_until(served, run_id, waiting_at("gate"), "apply gate")
    check_draft_pr(done, fake_github, git_remote)

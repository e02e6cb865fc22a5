"""``GitHubClient`` against the fake GitHub on loopback: every call, its records, and GitHub's
refusals as one ``ForgeError`` (status and GitHub's message, never the token)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from fake_github import FakeGitHub
from fake_github_app import FakeApp

from forge_fixtures import REPO, TOKEN, GitRemote
from stageline.errors import ForgeError
from stageline.forge import GitHubClient, GitHubSettings, PullRequest, RepoSettings
from stageline.forge._settings import AppSignIn


def forge_settings(fake: FakeGitHub, checkout: Path, token: str = TOKEN) -> GitHubSettings:
    return GitHubSettings(
        api_url=fake.url,
        token=token,
        repositories={REPO: RepoSettings(name=REPO, checkout=checkout, workflow="ci.yml")},
    )


@pytest.fixture
async def client(fake_github: FakeGitHub, git_remote: GitRemote) -> AsyncIterator[GitHubClient]:
    async with GitHubClient(forge_settings(fake_github, git_remote.checkout)) as opened:
        yield opened


def push_branch(remote: GitRemote, branch: str, text: str) -> str:
    remote.git("checkout", "-q", "-B", branch, "main")
    (remote.checkout / "app.py").write_text(text)
    remote.git("add", "app.py")
    remote.git("commit", "-q", "-m", f"change on {branch}")
    remote.git("push", "-q", "origin", branch)
    return remote.head(branch)


async def test_issues_and_comments(client: GitHubClient, fake_github: FakeGitHub) -> None:
    fake_github.add_issue(REPO, 3, "Add a flag", "the body", labels=("stageline", "bug"))
    fake_github.add_issue(REPO, 4, "Unlabelled")
    fake_github.add_issue(REPO, 5, "Second", labels=("stageline",))
    issue = await client.get_issue(REPO, 3)
    assert (issue.number, issue.title, issue.body, issue.state) == (
        3,
        "Add a flag",
        "the body",
        "open",
    )
    assert issue.labels == ("stageline", "bug")
    assert issue.url == "https://github.com/acme/app/issues/3"
    listed = await client.list_labelled_issues(REPO, "stageline")
    assert [i.number for i in listed] == [3, 5]
    first = await client.comment(REPO, 3, "one <!-- stageline:r:1 -->")
    second = await client.comment(REPO, 3, "two")
    assert first != second
    comments = await client.comments(REPO, 3)
    assert [(c.id, c.body) for c in comments] == [
        (first, "one <!-- stageline:r:1 -->"),
        (second, "two"),
    ]
    assert all(r.auth == f"token {TOKEN}" for r in fake_github.requests)
    posted = fake_github.of("POST", "/issues/3/comments")
    assert [r.json for r in posted] == [{"body": "one <!-- stageline:r:1 -->"}, {"body": "two"}]


async def test_refs_dispatch_runs_and_log_tail(
    client: GitHubClient, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    sha = push_branch(git_remote, "stageline/run-1", "print(1)\n")
    assert await client.ref_sha(REPO, "stageline/run-1") == sha
    assert await client.ref_sha(REPO, "no-such-branch") is None
    fake_github.ci_conclusions = ["failure", "success"]
    fake_github.ci_logs = ["collecting\nE   assert 1 == 2\nFAILED test_app.py\n"]
    await client.dispatch_workflow(REPO, "ci.yml", "stageline/run-1")
    dispatched = fake_github.of("POST", "/actions/workflows/ci.yml/dispatches")
    assert dispatched[0].json == {"ref": "stageline/run-1", "inputs": {}}
    [run] = await client.workflow_runs(REPO, "ci.yml", head_sha=sha)
    assert (run.status, run.conclusion, run.head_sha, run.kind) == (
        "queued",
        None,
        sha,
        "workflow_run",
    )
    assert run.url.endswith(f"/acme/app/actions/runs/{run.id}")
    assert await client.workflow_runs(REPO, "ci.yml", head_sha="0" * 40) == []
    assert [r.id for r in await client.workflow_runs(REPO, branch="stageline/run-1")] == [run.id]
    fake_github.complete(run.id)
    done = await client.workflow_run(REPO, run.id)
    assert done.completed and done.conclusion == "failure"
    tail = await client.ci_log_tail(REPO, done, lines=2)
    assert tail == "E   assert 1 == 2\nFAILED test_app.py"
    suites = await client.check_suites(REPO, sha)
    assert [(s.kind, s.conclusion, s.name) for s in suites] == [
        ("check_suite", "failure", "GitHub Actions")
    ]
    assert "FAILED test_app.py" in await client.ci_log_tail(REPO, suites[0])


async def test_check_suites_of_a_pushed_commit(
    client: GitHubClient, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    sha = push_branch(git_remote, "feature", "x = 1\n")
    assert await client.check_suites(REPO, sha) == []
    fake_github.ci_on_push = True
    [suite] = await client.check_suites(REPO, sha)
    assert (suite.status, suite.head_sha) == ("queued", sha)
    fake_github.complete()
    [suite] = await client.check_suites(REPO, sha)
    assert (suite.status, suite.conclusion) == ("completed", "success")
    assert (suite.app, suite.check_runs, suite.checks_nothing) == ("github-actions", 1, False)
    fake_github.silent_apps = ["dependabot"]  # installed, checks nothing: no check runs
    idle, suite = await client.check_suites(REPO, sha)
    assert (idle.app, idle.status, idle.check_runs, idle.checks_nothing) == (
        "dependabot",
        "queued",
        0,
        True,
    )


async def test_draft_pull_request_ready_and_merge(
    client: GitHubClient, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    push_branch(git_remote, "stageline/run-2", "y = 2\n")
    pr = await client.open_draft_pr(
        REPO, head="stageline/run-2", base="main", title="Add y", body="The plan"
    )
    assert pr.draft and pr.url == f"https://github.com/acme/app/pull/{pr.number}"
    assert (pr.head, pr.base, pr.state) == ("stageline/run-2", "main", "open")
    again = await client.open_draft_pr(
        REPO, head="stageline/run-2", base="main", title="Add y", body="The plan"
    )
    assert again.number == pr.number and len(fake_github.of("POST", "/pulls")) == 1
    with pytest.raises(ForgeError, match=r"HTTP 405: Pull Request is still a draft"):
        await client.merge(REPO, pr)
    ready = await client.mark_ready(REPO, pr)
    assert not ready.draft
    [graphql] = fake_github.of("POST", "/graphql")
    assert graphql.json["variables"] == {"id": pr.node_id}
    assert await client.mark_ready(REPO, ready) == ready  # already ready: no call
    assert len(fake_github.of("POST", "/graphql")) == 1
    assert await client.merge(REPO, ready)
    assert fake_github.of("PUT", "/merge")[-1].json == {"merge_method": "squash"}
    merged = await client.get_pr(REPO, pr.number)
    assert merged.merged and merged.state == "closed"
    assert await client.find_pr(REPO, "stageline/run-2") is None


async def test_refusals_are_one_forge_error_without_the_token(
    fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    async with GitHubClient(forge_settings(fake_github, git_remote.checkout, "ghp-wrong")) as bad:
        with pytest.raises(ForgeError) as caught:
            await bad.get_issue(REPO, 1)
    assert caught.value.status == 401
    assert (
        str(caught.value) == "GitHub: reading issue acme/app#1 failed (HTTP 401: Bad credentials)"
    )
    async with GitHubClient(forge_settings(fake_github, git_remote.checkout)) as client:
        with pytest.raises(ForgeError, match=r"HTTP 404: Not Found"):
            await client.get_issue(REPO, 99)
        fake_github.add_issue(REPO, 1, "t")
        fake_github.fail_next = [(502, "Server Error")]
        with pytest.raises(ForgeError, match=r"commenting on acme/app#1 failed \(HTTP 502"):
            await client.comment(REPO, 1, "hi")
        with pytest.raises(ForgeError, match=r"No ref found for: nope"):
            await client.dispatch_workflow(REPO, "ci.yml", "nope")
        with pytest.raises(ForgeError, match=r"Could not resolve to a node"):
            ghost = PullRequest(number=7, url="", node_id="PR_ghost", draft=True)
            await client.mark_ready(REPO, ghost)
    async with GitHubClient(forge_settings(fake_github, git_remote.checkout), timeout=0.5) as slow:
        fake_github.slow, fake_github.slow_for = (lambda m, p: True), 2.0
        with pytest.raises(ForgeError, match=r"no answer before the timeout"):
            await slow.get_issue(REPO, 1)
    fake_github.close()
    async with GitHubClient(forge_settings(fake_github, git_remote.checkout)) as gone:
        with pytest.raises(ForgeError, match=r"cannot reach GitHub \(ConnectError\)") as down:
            await gone.get_issue(REPO, 1)
    assert down.value.status is None
    for error in (caught.value, down.value):
        assert TOKEN not in str(error) and "ghp-wrong" not in str(error)


async def test_a_github_app_signs_in_and_reuses_its_installation_token(
    fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    """Signed in as a GitHub App: a JWT signed with its private key buys an installation
    token, which the calls then send (one token for many calls, till it nears its expiry). A
    key GitHub does not know is refused 401; one that cannot sign is one ForgeError, and
    neither says the key."""
    app = FakeApp()
    fake_github.app = app
    fake_github.add_issue(REPO, 3, "Add a flag")
    signed_in = replace(
        forge_settings(fake_github, git_remote.checkout),
        token=None,
        app=AppSignIn(
            app_id=app.app_id, installation_id=app.installation_id, private_key=app.private_pem
        ),
    )
    async with GitHubClient(signed_in) as client:
        assert (await client.get_issue(REPO, 3)).title == "Add a flag"
        await client.comment(REPO, 3, "hi")
    assert len(app.issued) == 1 and app.refused == []
    asked = [r for r in fake_github.requests if r.path.endswith("/access_tokens")]
    assert [r.path for r in asked] == [f"/app/installations/{app.installation_id}/access_tokens"]
    stranger = FakeApp()  # an App GitHub does not know, signing in to this installation
    other = replace(
        signed_in,
        app=replace(signed_in.app, app_id=stranger.app_id, private_key=stranger.private_pem),
    )
    async with GitHubClient(other) as client:
        with pytest.raises(ForgeError, match=r"HTTP 401: signing in as the GitHub App") as refused:
            await client.get_issue(REPO, 3)
    assert app.refused and len(app.issued) == 1
    broken_id = FakeApp().app_id  # nothing cached for it: it must sign
    broken = replace(
        signed_in, app=replace(signed_in.app, app_id=broken_id, private_key=BROKEN_PEM)
    )
    async with GitHubClient(broken) as client:
        with pytest.raises(ForgeError, match=r"private key cannot sign") as unsigned:
            await client.get_issue(REPO, 3)
    for error in (refused.value, unsigned.value):
        assert "PRIVATE KEY" not in str(error) and "MII" not in str(error)


BROKEN_PEM = "-----BEGIN PRIVATE KEY-----\nMIInotakey\n-----END PRIVATE KEY-----\n"

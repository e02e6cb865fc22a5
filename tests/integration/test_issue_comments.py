"""The issue comment mirror against the fake GitHub: a run driven through the runner tells its
issue, in order, that it took it, its questions, the plan at its gate, the decisions, CI and
the pull request, and how it ended; GitHub failing or answering late loses and duplicates
nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from fake_github import FakeGitHub

from forge_fixtures import REPO, TOKEN, GitRemote
from stageline.config import Settings
from stageline.events import Deliverer, SinkSpec
from stageline.forge import GitHubClient, GitHubSettings, RepoSettings
from stageline.runner import Runner
from stageline.server.forge import IssueCommentSink, marker
from stageline.server.forge._comments import COMMENTS_FILTER, COMMENTS_POLICY
from stageline.templates import Template

pytestmark = pytest.mark.timeout(120)

ISSUE = 9
PLAN = "1. Add the flag\n2. Test it"


class State(TypedDict, total=False):
    task: str
    repo: str
    forge_repo: str
    issue_number: int
    answers: dict[str, Any]
    qa_history: list[dict[str, Any]]
    plan: str


async def plan(state: State, ctx: Any) -> dict[str, Any]:
    return {"plan": PLAN}


async def build(state: State, ctx: Any) -> dict[str, Any]:
    url = f"https://github.com/{REPO}/actions/runs/"
    for n, conclusion in ((1, "failure"), (2, "success")):
        ctx.log.info(f"CI run {n} dispatched", ci_run_id=n, ci_url=f"{url}{n}", build_round=n)
        ctx.log.info(
            f"CI run {n}: {conclusion}", ci_run_id=n, ci_url=f"{url}{n}", conclusion=conclusion
        )
    pull = f"https://github.com/{REPO}/pull/10"
    ctx.log.info("draft pull request opened", pr_url=pull, pr_number=10, pr_state="draft")
    return {}


def story() -> Template:
    template = Template("forge_story", state=State)
    template.add_question(
        "clarify",
        questions=[
            {"id": "scope", "text": "What is in scope?"},
            {"id": "priority", "text": "How urgent?", "choices": ["low", "high"]},
        ],
        answers_key="answers",
    )
    template.add_stage("plan", plan)
    template.add_gate("plan_approval", show=("plan",))
    template.add_stage("build", build)
    template.add_sequence("clarify", "plan", "plan_approval", "build")
    return template


def forge_settings(fake: FakeGitHub, checkout: Path) -> GitHubSettings:
    return GitHubSettings(
        api_url=fake.url,
        token=TOKEN,
        repositories={REPO: RepoSettings(name=REPO, checkout=checkout)},
    )


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def mirror(
    runner: Runner, forge: GitHubSettings, client: GitHubClient
) -> tuple[Deliverer, IssueCommentSink]:
    sink = IssueCommentSink(forge, runner.ledger, lambda: client, public_url="https://sl.example")
    spec = SinkSpec(sink=sink, filter=COMMENTS_FILTER, policy=COMMENTS_POLICY, sink_id="t:comments")
    deliverer = Deliverer(runner.ledger, [spec])
    await deliverer.register()
    return deliverer, sink


async def drain(deliverer: Deliverer, fake: FakeGitHub, count: int) -> list[str]:
    """Deliver until the issue has ``count`` comments (failed batches are retried after their
    backoff), then once more: nothing else may come."""
    for _ in range(400):
        await deliverer.deliver_due()
        if len(fake.comment_bodies(REPO, ISSUE)) >= count:
            break
        await asyncio.sleep(0.05)
    await deliverer.deliver_due()
    return fake.comment_bodies(REPO, ISSUE)


async def drive(runner: Runner) -> str:
    inputs = {"task": "Add --verbose", "forge_repo": REPO, "issue_number": ISSUE}
    summary = await runner.start(story(), inputs)
    run_id = summary.run.run_id
    await runner.answer(run_id, {"scope": "the CLI", "priority": "high"}, actor="ann")
    await runner.approve(run_id, actor="bob", note="ship it")
    return run_id


async def test_a_runs_story_is_told_on_its_issue_in_order(
    runner: Runner, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.add_issue(REPO, ISSUE, "Add --verbose", labels=("stageline",))
    forge = forge_settings(fake_github, git_remote.checkout)
    async with GitHubClient(forge) as client:
        deliverer, _ = await mirror(runner, forge, client)
        run_id = await drive(runner)
        said = await drain(deliverer, fake_github, 11)
    texts = [body.split("\n\n<!-- stageline:")[0] for body in said]
    assert texts[0] == (
        f"🤖 stageline took this issue: run `{run_id}` (forge_story). "
        f"Follow it: [the run](https://sl.example/ui/runs/{run_id})"
    )
    assert texts[1].startswith("❓ **Questions**")
    assert "1. What is in scope?\n2. How urgent? _(low, high)_" in texts[1]
    assert texts[2].startswith("➜ ") and "by ann" in texts[2]
    assert texts[3].startswith("📋 **The plan**, waiting for approval at gate `plan_approval`:")
    assert PLAN in texts[3]
    assert texts[4].startswith("➜ ") and "approve" in texts[4] and "bob" in texts[4]
    assert "ship it" in texts[4]
    url = f"https://github.com/{REPO}/actions/runs/"
    assert texts[5:10] == [
        f"🔧 CI run 1 dispatched: [CI run 1]({url}1)",
        f"❌ CI run 1: failure: [CI run 1]({url}1)",
        f"🔧 CI run 2 dispatched: [CI run 2]({url}2)",
        f"✅ CI run 2: success: [CI run 2]({url}2)",
        f"🔀 draft pull request opened: [pull request #10](https://github.com/{REPO}/pull/10)",
    ]
    assert texts[10:] == ["✅ The run succeeded."]
    assert all(f"<!-- stageline:{run_id}:" in body for body in said)  # each has its marker
    assert said[0].endswith(marker(run_id, "taken"))


async def test_github_failing_or_answering_late_loses_and_duplicates_nothing(
    runner: Runner, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    fake_github.add_issue(REPO, ISSUE, "Add --verbose", labels=("stageline",))
    forge = forge_settings(fake_github, git_remote.checkout)
    async with GitHubClient(forge, timeout=1.0) as client:
        deliverer, _ = await mirror(runner, forge, client)
        inputs = {"task": "Add --verbose", "forge_repo": REPO, "issue_number": ISSUE}
        run_id = (await runner.start(story(), inputs)).run.run_id
        fake_github.fail_next = [(502, "Server Error"), (503, "Unavailable")]
        first = await drain(deliverer, fake_github, 2)  # taken, questions
        assert len(first) == 2
        # GitHub takes the next comment but answers after the client gave up
        fake_github.slow, fake_github.slow_for = (lambda m, p: m == "POST"), 2.0
        await runner.answer(run_id, {"scope": "the CLI", "priority": "low"}, actor="ann")
        said = await drain(deliverer, fake_github, 4)  # answered, the plan
    assert len(said) == 4 and len(set(said)) == 4
    assert fake_github.slow is None  # the slow answer did happen
    posts = fake_github.of("POST", f"/issues/{ISSUE}/comments")
    assert len(posts) == 5  # the 4 comments, and the one GitHub refused (502): none twice
    lookups = fake_github.of("GET", f"/issues/{ISSUE}/comments")
    assert lookups  # the late one was looked for by its marker before posting again


async def test_runs_without_an_issue_or_of_another_repository_get_no_comment(
    runner: Runner, fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    forge = forge_settings(fake_github, git_remote.checkout)
    async with GitHubClient(forge) as client:
        deliverer, _ = await mirror(runner, forge, client)
        await runner.start(story(), {"task": "no issue"})
        await runner.start(story(), {"task": "x", "forge_repo": "evil/repo", "issue_number": 1})
        for _ in range(3):
            await deliverer.deliver_due()
    assert fake_github.requests == []

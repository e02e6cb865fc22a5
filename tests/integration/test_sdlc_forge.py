"""sdlc in forge mode over a runner, a fake GitHub and a bare git remote: the branch is pushed,
CI is dispatched and waited for (no lease held; only the forge completes it, here by polling),
a failure goes back to build with the CI log's tail, a pass opens a draft pull request, and
the apply gate marks it ready for review."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from forge_fixtures import REPO, TOKEN, GitRemote, github_toml
from stageline.cli._render import when
from stageline.cli._render_waits import qa_lines, waiting_lines
from stageline.config import load_settings
from stageline.errors import InputError, InvalidTransition
from stageline.ledger import RunStatus, WaitKind
from stageline.runner import Runner, RunSummary
from stageline.runner._forge_ci import next_poll_at
from stageline.testing import memory_runner

ANSWERS = {"scope": "calc.py gains a subtract function", "priority": "normal", "done_when": "CI"}
LATER = 1800  # seconds: any poll made here is due by then (and no CI wait times out: 2h)


@pytest.fixture(params=["ci.yml"])
async def runner(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    git_remote: GitRemote,
    fake_github: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Runner]:
    """A runner whose project has ``acme/app`` with the workflow the param names (``""``: the
    pushed commit's check suites are waited for; ``+merge``: ``merge = true``)."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    project = tmp_path / "project"
    project.mkdir()
    workflow, _, merge = str(request.param).partition("+")
    toml = github_toml(fake_github.url, git_remote.checkout, workflow=workflow or None)
    toml += "merge = true\n" if merge else ""  # the repository's table is the last one
    (project / "stageline.toml").write_text(toml)
    settings = load_settings(cwd=project, env={"STAGELINE_HOME": str(project / ".stageline")})
    async with memory_runner(settings) as opened:
        yield opened


async def planned(runner: Runner, **inputs: Any) -> RunSummary:
    """A forge-mode run through clarify and plan approval, as a person answers them."""
    started = await runner.start(
        "sdlc", {"task": "Add subtract", "review_threshold": 0.0, "forge_repo": REPO, **inputs}
    )
    run_id = started.run.run_id
    assert started.state["repo"] == started.run.inputs["repo"]  # the configured checkout
    await runner.answer(run_id, ANSWERS, actor="ana")
    return await runner.approve(run_id, gate="plan_approval", actor="ana")


async def poll(runner: Runner) -> RunSummary | None:
    """One poll of every CI wait (as if its time had come), then the advances it started."""
    moved = await runner.forge_ci.poll_due(now=time.time() + LATER)
    await runner.forge_ci.idle()
    return await runner.status(moved[0]) if moved else None


async def test_ci_fails_then_passes_by_polling_and_ends_at_a_draft_pr(
    runner: Runner, fake_github: Any, git_remote: GitRemote
) -> None:
    fake_github.ci_conclusions = ["failure", "success"]
    fake_github.ci_logs = ["collecting tests\nFAILED tests/test_calc.py::test_subtract", "ok"]
    waiting = await planned(runner, issue_number=7)
    run_id = waiting.run.run_id
    # Waiting on CI: a wait the ledger keeps, no lease held, and no person may pass it.
    assert waiting.status is RunStatus.WAITING, waiting.run.error
    [ci] = waiting.waiting
    assert ci.kind is WaitKind.CI
    assert ci.payload["ci"]["repository"] == REPO
    assert waiting.run.lease_holder is None
    branch = waiting.state["branch"]
    assert git_remote.head(branch) == ci.payload["ci"]["head_sha"]  # pushed for real
    assert len(fake_github.of("POST", "/dispatches")) == 1
    with pytest.raises(InvalidTransition, match="only the forge completes"):
        await runner.respond(run_id, {"ok": True}, actor="ana")
    with pytest.raises(InvalidTransition, match="only the forge completes"):
        await runner.approve(run_id, actor="ana")
    assert await runner.pending(run_id) == []  # a person's to-do list does not show it
    with pytest.raises(InvalidTransition, match="waits on CI"):  # nor may a state edit pass it
        await runner.update_state(run_id, {"ci_conclusion": "success"}, as_node="dispatch")
    assert await runner.forge_ci.poll_due(now=time.time() + LATER) == []  # CI still runs
    # CI fails: back to build with the log's tail, pushed again, CI dispatched again.
    fake_github.complete()
    again = await poll(runner)
    assert again is not None and again.status is RunStatus.WAITING, again and again.run.error
    assert "FAILED tests/test_calc.py::test_subtract" in again.state["build_feedback"]
    assert again.state["build_round"] == 2
    [ci2] = again.waiting
    assert ci2.kind is WaitKind.CI and ci2.payload["ci"]["build_round"] == 2
    assert git_remote.head(branch) == ci2.payload["ci"]["head_sha"] != ci.payload["ci"]["head_sha"]
    # CI passes: a draft pull request with the plan, and the apply gate offering "ready".
    fake_github.complete()
    done = await poll(runner)
    assert done is not None and done.status is RunStatus.WAITING, done and done.run.error
    [gate] = done.waiting
    assert gate.name == "apply"
    assert "ready for review" in gate.payload["show"]["apply_action"]
    assert done.state["pr_state"] == "draft"
    [pull] = fake_github.pulls.values()
    assert pull["draft"] is True and pull["head"]["ref"] == branch
    assert done.state["plan"].splitlines()[0] in pull["body"]
    assert "Builds taken: 2" in pull["body"] and "Closes #7" in pull["body"]
    answered = [w for w in done.waits if w.kind is WaitKind.CI]
    assert [w.actor for w in answered] == ["github", "github"]
    logs = [e.data for e in await runner.ledger.events(run_id) if e.kind == "stage.log"]
    assert [d["conclusion"] for d in logs if d.get("conclusion")] == ["failure", "success"]
    assert [d["build_round"] for d in logs if d.get("conclusion")] == [1, 2]
    started = [d for d in logs if d.get("head_sha")]  # CI dispatched: told once per build
    assert [d["build_round"] for d in started] == [1, 2]
    assert any(d.get("pr_url") == pull["html_url"] for d in logs)
    # The person approves: the pull request is marked ready for review; the checkout is
    # left as it was.
    before = git_remote.git("status", "--porcelain")
    ready = await runner.approve(run_id, gate="apply", actor="ana")
    assert ready.status is RunStatus.SUCCEEDED, ready.run.error
    assert ready.state["pr_state"] == "ready"
    assert pull["draft"] is False
    assert git_remote.git("status", "--porcelain") == before


async def test_a_repository_not_configured_is_refused(runner: Runner) -> None:
    with pytest.raises(InputError, match=r"not in \[github.repositories\]"):
        await runner.start("sdlc", {"task": "x", "forge_repo": "acme/other"})
    with pytest.raises(InputError, match="is not the checkout of"):
        await runner.start("sdlc", {"task": "x", "forge_repo": REPO, "repo": "/tmp"})


async def test_a_push_the_remote_refuses_fails_the_run_in_source_preparation(
    runner: Runner, git_remote: GitRemote
) -> None:
    # Someone else's commit on the run's branch at GitHub: the push must not overwrite it.
    main = git_remote.head("main")
    git_remote.git("update-ref", "refs/heads/stageline/forge-push", main, cwd=git_remote.bare)
    started = await runner.start(
        "sdlc",
        {"task": "Add subtract", "review_threshold": 0.0, "forge_repo": REPO},
        run_id="forge-push",
    )
    await runner.answer("forge-push", ANSWERS, actor="ana")
    failed = await runner.approve("forge-push", gate="plan_approval", actor="ana")
    assert failed.status is RunStatus.FAILED
    assert failed.run.failed_node == "dispatch"
    assert failed.run.failure_phase == "source_preparation"
    assert "pushing stageline/forge-push to origin" in (failed.run.error or "")
    assert git_remote.head("stageline/forge-push") == main
    assert started.run.run_id == "forge-push"


async def test_cancel_ends_a_ci_wait(runner: Runner, fake_github: Any) -> None:
    waiting = await planned(runner)
    cancelled = await runner.cancel(waiting.run.run_id, actor="ana")
    assert cancelled.status is RunStatus.CANCELLED
    assert await runner.forge_ci.waiting() == []


async def test_workflow_run_webhooks_complete_the_wait_once(
    runner: Runner, fake_github: Any
) -> None:
    fake_github.ci_conclusions = ["success"]
    waiting = await planned(runner)
    run_id = waiting.run.run_id
    [run] = fake_github.runs
    early = fake_github.workflow_run_payload(run, action="in_progress")
    assert await runner.forge_ci.on_webhook("workflow_run", early) == []
    fake_github.complete()
    payload = fake_github.workflow_run_payload(run)
    other = {**payload, "repository": {**payload["repository"], "full_name": "acme/other"}}
    assert await runner.forge_ci.on_webhook("workflow_run", other) == []
    assert await runner.forge_ci.on_webhook("workflow_run", payload) == [run_id]
    assert await runner.forge_ci.on_webhook("workflow_run", payload) == []  # delivered twice
    await runner.forge_ci.idle()
    done = await runner.status(run_id)
    assert [w.name for w in done.waiting] == ["apply"], done.run.error
    assert done.state["ci_run_id"] == str(run.id) and done.state["build_round"] == 1


@pytest.mark.parametrize("runner", [""], indirect=True)
async def test_without_a_workflow_the_commits_check_suites_are_waited_for(
    runner: Runner, fake_github: Any, git_remote: GitRemote
) -> None:
    fake_github.ci_on_push = True  # GitHub runs the repository's checks on a push
    fake_github.ci_conclusions = ["failure", "success"]
    waiting = await planned(runner)
    run_id = waiting.run.run_id
    [ci] = waiting.waiting
    assert ci.kind is WaitKind.CI and ci.payload["ci"]["workflow"] is None
    assert fake_github.of("POST", "/dispatches") == []
    assert await poll(runner) is None  # the checks run
    [suite] = fake_github.runs
    fake_github.complete()
    payload = fake_github.check_suite_payload(suite)
    assert await runner.forge_ci.on_webhook("check_suite", payload) == [run_id]
    await runner.forge_ci.idle()
    again = await runner.status(run_id)
    assert again.state["build_round"] == 2 and [w.kind for w in again.waiting] == [WaitKind.CI]
    assert await poll(runner) is None
    fake_github.complete()
    done = await poll(runner)
    assert done is not None and [w.name for w in done.waiting] == ["apply"], done.run.error
    assert done.state["pr_state"] == "draft"


@pytest.mark.parametrize("runner", [""], indirect=True)
async def test_an_app_that_checks_nothing_does_not_hold_the_checks_up(
    runner: Runner, fake_github: Any
) -> None:
    """GitHub makes a check suite on every push for each installed app; one that checks
    nothing stays queued with no check runs for ever. Only suites with check runs decide, and
    with none yet the run waits."""
    fake_github.silent_apps = ["dependabot"]
    waiting = await planned(runner)
    run_id = waiting.run.run_id
    assert await poll(runner) is None  # only the idle suite: CI has not started
    assert [w.kind for w in (await runner.status(run_id)).waiting] == [WaitKind.CI]
    fake_github.ci_on_push = True  # now the repository's checks run too
    assert await poll(runner) is None
    [suite] = fake_github.runs
    fake_github.complete()
    payload = fake_github.check_suite_payload(suite)
    assert await runner.forge_ci.on_webhook("check_suite", payload) == [run_id]
    await runner.forge_ci.idle()
    done = await runner.status(run_id)
    assert [w.name for w in done.waiting] == ["apply"], done.run.error
    assert done.state["ci_run_id"] == str(suite.check_suite_id)


@pytest.mark.parametrize("runner", ["ci.yml", ""], indirect=True)
async def test_ci_that_never_reports_times_out_as_a_failure(
    runner: Runner, fake_github: Any, git_remote: GitRemote
) -> None:
    """[github] ci_timeout (2h by default): a CI wait older than it ends timed_out, answered
    by github, and the workflow run it waited on is cancelled on GitHub; verify sends the run
    back to build saying so, and after the builds allowed the run parks."""
    waiting = await planned(runner)
    run_id = waiting.run.run_id
    [ci] = waiting.waiting
    assert ci.payload["ci_timeout"] == 7200.0
    deadline = ci.requested_at + 7200.0
    shown = " ".join(str(line) for line in waiting_lines(run_id, [ci]))  # stageline show
    assert f"failed if not reported by {when(deadline, '%H:%M:%S')}" in shown, shown
    assert await runner.forge_ci.poll_due(now=deadline - 1) == []  # still within it
    assert await runner.forge_ci.poll_due(now=deadline) == [run_id]
    await runner.forge_ci.idle()
    again = await runner.status(run_id)
    assert again.status is RunStatus.WAITING, again.run.error
    assert again.state["build_round"] == 2 and again.state["ci_conclusion"] == "timed_out"
    assert "did not report within the timeout (2h" in again.state["build_feedback"]
    [ended] = [w for w in again.waits if w.kind is WaitKind.CI and w.response]
    assert ended.actor == "github" and ended.response is not None
    assert ended.response["ci"]["conclusion"] == "timed_out"
    # A dispatched workflow run is cancelled on GitHub; a commit's check suites are the apps'.
    workflow = bool(ci.payload["ci"].get("workflow"))
    assert ended.response["ci"]["cancelled_on_forge"] is workflow
    cancels = [r.path for r in fake_github.requests if r.path.endswith("/cancel")]
    assert len(cancels) == int(workflow), cancels
    if workflow:
        [cancelled] = [r for r in fake_github.runs if f"/runs/{r.id}/cancel" in cancels[0]]
        assert (cancelled.status, cancelled.conclusion) == ("completed", "cancelled")
    assert "timed_out: " in " ".join(str(line) for line in qa_lines([ended]))
    assert "(not reported within 2h00m)" in " ".join(str(line) for line in qa_lines([ended]))
    logs = [e.data for e in await runner.ledger.events(run_id) if e.kind == "stage.log"]
    assert [d["conclusion"] for d in logs if d.get("conclusion")] == ["timed_out"]
    for _ in range(2):  # the next builds' CI does not report either: the run parks
        [ci] = (await runner.status(run_id)).waiting
        assert await runner.forge_ci.poll_due(now=ci.requested_at + 7200.0) == [run_id]
        await runner.forge_ci.idle()
    parked = await runner.status(run_id)
    assert parked.status is RunStatus.PARKED, parked.run.error
    assert [w.name for w in parked.waiting] == ["build_rounds"]
    assert fake_github.pulls == {}


@pytest.mark.parametrize("runner", ["ci.yml+merge"], indirect=True)
async def test_with_merge_the_apply_gate_also_merges(runner: Runner, fake_github: Any) -> None:
    waiting = await planned(runner)
    fake_github.complete()
    done = await poll(runner)
    assert done is not None, waiting.run.error
    [gate] = done.waiting
    assert "ready for review and merge it (squash)" in gate.payload["show"]["apply_action"]
    merged = await runner.approve(done.run.run_id, gate="apply", actor="ana")
    assert merged.state["pr_state"] == "merged", merged.run.error
    [pull] = fake_github.pulls.values()
    assert pull["draft"] is False and pull["merged"] is True


async def test_a_rejected_apply_leaves_the_draft(runner: Runner, fake_github: Any) -> None:
    await planned(runner)
    fake_github.complete()
    done = await poll(runner)
    assert done is not None
    rejected = await runner.reject(done.run.run_id, gate="apply", actor="ana")
    assert rejected.status is RunStatus.REJECTED
    [pull] = fake_github.pulls.values()
    assert pull["draft"] is True and fake_github.of("POST", "/graphql") == []


async def test_ci_failing_every_build_parks_with_the_logs_tail(
    runner: Runner, fake_github: Any
) -> None:
    fake_github.ci_conclusions = ["failure"] * 3
    fake_github.ci_logs = [f"build {n}: AssertionError in test_subtract" for n in (1, 2, 3)]
    waiting = await planned(runner)
    for _ in range(3):
        fake_github.complete()
        last = await poll(runner)
    assert last is not None and last.status is RunStatus.PARKED, waiting.run.error
    assert [w.name for w in last.waiting] == ["build_rounds"]
    assert "build 3: AssertionError in test_subtract" in last.state["build_feedback"]
    parked = Path(last.state["pr_summary_path"]).read_text()
    assert "build 3: AssertionError in test_subtract" in parked
    assert fake_github.pulls == {}


def test_polls_back_off_from_the_poll_interval_up_to_ten_minutes() -> None:
    from stageline.ledger import Wait

    def at(step: int) -> float:
        wait = Wait(
            run_id="r",
            wait_id="w",
            kind=WaitKind.CI,
            name="ci",
            node="dispatch",
            attempt=1,
            interrupt_id="i",
            payload={"poll_interval": 30.0},
            requested_at=0.0,
            policy_step=step,
        )
        return next_poll_at(wait)

    assert [at(n) for n in range(6)] == [30, 90, 210, 450, 930, 1530]


async def test_any_process_over_the_database_polls_and_carries_the_run_on(
    tmp_path: Path,
    git_remote: GitRemote,
    fake_github: Any,
    shared_backend_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One runner takes the run to its CI wait and closes; another, over the same database,
    makes the poll (the wait's poll count is in the ledger) and carries the run on."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    project = tmp_path / "project"
    project.mkdir()
    (project / "stageline.toml").write_text(github_toml(fake_github.url, git_remote.checkout))
    env = {
        "STAGELINE_HOME": str(project / ".stageline"),
        "STAGELINE_DATABASE_URL": shared_backend_url,
    }
    settings = load_settings(cwd=project, env=env)
    async with Runner.open(settings, deliver=False) as first:
        waiting = await planned(first)
        assert waiting.status is RunStatus.WAITING and waiting.run.lease_holder is None
    fake_github.complete()
    async with (
        Runner.open(settings, deliver=False) as second,
        Runner.open(settings, deliver=False) as third,
    ):
        later = time.time() + LATER
        moved = [
            *await second.forge_ci.poll_due(now=later),
            *await third.forge_ci.poll_due(now=later),
        ]
        assert moved == [waiting.run.run_id]  # one poll, by one of them
        await second.forge_ci.idle()
        done = await second.status(waiting.run.run_id)
        assert [w.name for w in done.waiting] == ["apply"], done.run.error
        [ci] = [w for w in done.waits if w.kind is WaitKind.CI]
        assert ci.policy_step == 1 and ci.actor == "github"


async def test_a_ci_answer_whose_advance_never_ran_is_asked_again_and_polled_again(
    tmp_path: Path, git_remote: GitRemote, fake_github: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process that recorded CI's end died before the run went on: the run is resumed
    (its lease ran out), the CI wait is asked again, and the next poll completes it."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    project = tmp_path / "project"
    project.mkdir()
    (project / "stageline.toml").write_text(github_toml(fake_github.url, git_remote.checkout))
    settings = load_settings(cwd=project, env={"STAGELINE_HOME": str(project / ".stageline")})
    async with memory_runner(settings, lease_ttl=0.5) as runner:
        waiting = await planned(runner)
        run_id = waiting.run.run_id
        [ci] = waiting.waiting
        fake_github.complete()
        result = {**ci.payload["ci"], "id": 1, "conclusion": "success", "kind": "workflow_run"}
        await runner.decisions.complete_ci(run_id, ci, result, actor="github")  # never applied
        assert (await runner.status(run_id)).status is RunStatus.RUNNING
        await asyncio.sleep(0.6)  # its lease runs out
        again = await runner.resume(run_id)
        assert again.status is RunStatus.WAITING, again.run.error
        [asked] = again.waiting
        assert asked.kind is WaitKind.CI and asked.round == 2
        done = await poll(runner)
        assert done is not None and [w.name for w in done.waiting] == ["apply"], done

"""The sdlc build half over the in-memory runner: routing, the planning-only path, CI errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.errors import ConflictError, InputError
from stageline.ledger import RunStatus
from stageline.llm import Completion
from stageline.runner import Runner, RunSummary
from stageline.templates.builtin._sdlc_build import SERVICE_CI_COMMAND, route_verify
from stageline.testing import memory_runner

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdlc_sample"
ANSWERS = {
    "scope": "calc.py gains a subtract function",
    "priority": "normal",
    "done_when": "CI passes",
}


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo)
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "sample"]):
        subprocess.run([*git, *args], check=True)
    return repo


async def run_answered(
    runner: Runner, inputs: dict[str, Any], services: dict[str, Any] | None = None
) -> RunSummary:
    waiting = await runner.start(
        "sdlc", {"task": "Add subtract", "review_threshold": 0.0, **inputs}, services=services
    )
    assert waiting.status is RunStatus.WAITING
    planned = await runner.answer(waiting.run.run_id, ANSWERS, services=services)
    assert planned.status is RunStatus.WAITING  # the plan-approval gate: a person decides
    assert [w.name for w in planned.waiting] == ["plan_approval"]
    assert "build" not in [r.node for r in planned.records]
    return await runner.approve(waiting.run.run_id, gate="plan_approval", services=services)


def test_route_verify() -> None:
    assert route_verify({"ci_conclusion": "success"}) == "approved"
    assert route_verify({"ci_conclusion": "failure"}) == "build"
    assert route_verify({"ci_conclusion": "timed_out"}) == "build"


async def test_without_a_repo_the_run_ends_at_the_approved_plan(runner: Runner) -> None:
    done = await run_answered(runner, {})
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["outcome"] == "approved"
    assert "build" not in [r.node for r in done.records]


async def test_a_ci_command_service_overrides_the_repo_file(runner: Runner, sample: Path) -> None:
    done = await run_answered(runner, {"repo": str(sample)}, {SERVICE_CI_COMMAND: "exit 0"})
    assert done.state["outcome"] == "approved", done.run.error
    failing = {SERVICE_CI_COMMAND: "exit 7"}
    failed = await run_answered(runner, {"repo": str(sample)}, failing)
    assert failed.state["outcome"] == "parked"
    assert "exit code 7" in failed.state["build_feedback"]
    # each CI run and each failure's way back to build is an event naming the CI run (the
    # Slack thread tells them)
    told = [
        (e.node, e.message)
        for e in await runner.ledger.events(failed.run.run_id)
        if e.kind == "stage.log" and e.data.get("ci_run_id")
    ]
    assert told[:2] == [
        ("dispatch", f"CI run {failed.run.run_id}-ci1: failure"),
        ("verify", f"CI run {failed.run.run_id}-ci1: failure; back to build"),
    ]
    # out of builds: parked, at a gate where a person grants more rounds or rejects
    assert failed.status is RunStatus.PARKED
    assert [w.name for w in failed.waiting] == ["build_rounds"]
    pending = {w.run_id: w.name for w in await runner.pending()}
    assert pending == {failed.run.run_id: "build_rounds", done.run.run_id: "apply"}
    again = await runner.approve(failed.run.run_id, gate="build_rounds", services=failing)
    builds = [r for r in again.records if r.node == "build" and r.status == "succeeded"]
    assert again.status is RunStatus.PARKED and len(builds) == 6  # three more rounds ran
    ended = await runner.reject(failed.run.run_id, gate="build_rounds", note="taking over")
    assert ended.status is RunStatus.REJECTED


def _status(repo: Path) -> str:
    """``git status --porcelain`` of the person's checkout."""
    return subprocess.check_output(["git", "-C", str(repo), "status", "--porcelain"], text=True)


async def test_the_checkout_changes_only_once_the_apply_gate_is_approved(
    runner: Runner, sample: Path
) -> None:
    assert not (sample / "CHANGELOG.md").exists()  # the offline build creates it
    done = await run_answered(runner, {"repo": str(sample)}, {SERVICE_CI_COMMAND: "exit 0"})
    assert done.status is RunStatus.WAITING, done.run.error
    assert [w.name for w in done.waiting] == ["apply"]
    assert "CHANGELOG.md" in done.waiting[0].payload["show"]["changes"]
    nodes = [r.node for r in done.records]
    assert nodes[-5:] == ["build", "dispatch", "verify", "approved", "apply"]
    assert _status(sample) == "" and not (sample / "CHANGELOG.md").exists()
    applied = await runner.approve(done.run.run_id, gate="apply")
    assert applied.status is RunStatus.SUCCEEDED, applied.run.error
    assert applied.state["applied"] == ["CHANGELOG.md"]
    assert _status(sample) == "?? CHANGELOG.md\n"  # in the working tree, for a person to commit
    assert "- Add subtract (stageline run" in (sample / "CHANGELOG.md").read_text()


async def test_the_apply_input_applies_at_once_and_a_reject_leaves_the_branch(
    runner: Runner, sample: Path
) -> None:
    ci = {SERVICE_CI_COMMAND: "exit 0"}
    at_once = await run_answered(runner, {"repo": str(sample), "apply": True}, ci)
    assert at_once.status is RunStatus.SUCCEEDED, at_once.run.error
    assert "apply" not in [r.node for r in at_once.records]
    assert at_once.state["applied"] == ["CHANGELOG.md"] and _status(sample) != ""
    (sample / "CHANGELOG.md").unlink()
    waiting = await run_answered(runner, {"repo": str(sample)}, ci)
    ended = await runner.reject(waiting.run.run_id, gate="apply", note="not now")
    assert ended.status is RunStatus.REJECTED and _status(sample) == ""
    branch = ended.state["branch"]
    assert (
        subprocess.run(
            ["git", "-C", str(sample), "rev-parse", branch], capture_output=True, check=False
        ).returncode
        == 0
    )


async def test_a_ci_command_input_cannot_run_a_command(
    runner: Runner, sample: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    done = await run_answered(runner, {"repo": str(sample), "ci_command": f"touch {marker}"})
    assert (done.status, done.run.failed_node) == (RunStatus.FAILED, "dispatch")
    assert "the ci_command input is refused" in (done.run.error or "")
    assert not marker.exists()


async def test_a_ci_file_the_agent_writes_in_the_worktree_is_not_run(
    runner: Runner, sample: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    script = [
        {"write": ".stageline-ci", "content": f"touch {marker}\n"},
        {"event": {"type": "result", "status": "succeeded", "summary": "ok"}},
    ]
    done = await run_answered(runner, {"repo": str(sample), "script": script})
    assert done.state["outcome"] == "approved", done.run.error  # the repository's own CI ran
    assert not marker.exists()


async def test_a_bad_repo_or_task_is_an_input_error_before_a_run_exists(
    runner: Runner, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for repo, why in (
        (plain, "is not inside a git repository"),
        (tmp_path / "gone", "does not exist"),
        (SAMPLE / "calc.py", "not a folder"),
    ):
        with pytest.raises(InputError, match=f"input 'repo': .*{why}"):
            await runner.start("sdlc", {"task": "Add subtract", "repo": str(repo)})
    with pytest.raises(InputError, match="missing required input 'task'"):
        await runner.start("sdlc", {"task": "  "})
    assert await runner.ledger.list_runs() == []  # nothing was created


class _Model:
    """A configured chat model (not the offline one): it plans, reviews and asks."""

    name = "stub-model"

    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        self.prompts.append(prompt)
        if "Review this plan" in prompt:
            text = "Covers the edge cases.\nSCORE: 0.95"
        elif "reply with a JSON list" in prompt:
            text = "NONE"
        else:
            text = "1. Add subtract() to calc.py\n2. Test it with negatives"
        return Completion(text=text, model=self.name, input_tokens=10, output_tokens=5, latency=0.0)


async def test_a_configured_model_writes_the_plan_and_review_and_the_build_uses_the_plan(
    memory_settings: Settings, sample: Path
) -> None:
    model = _Model()
    async with memory_runner(memory_settings, model=model) as runner:
        waiting = await runner.start(
            "sdlc",
            {"task": "Add subtract", "repo": str(sample)},
            services={SERVICE_CI_COMMAND: "exit 0"},
        )
        planned = await runner.answer(waiting.run.run_id, ANSWERS)
        assert [w.name for w in planned.waiting] == ["plan_approval"]
        assert "1. Add subtract() to calc.py" in planned.state["plan"]
        assert planned.state["reviews"][-1]["score"] == 0.95
        assert any("reply with a JSON list" in p for p in model.prompts)  # clarify asked it
        done = await runner.approve(
            waiting.run.run_id, gate="plan_approval", services={SERVICE_CI_COMMAND: "exit 0"}
        )
    assert done.status is RunStatus.WAITING and done.state["outcome"] == "approved"
    assert [w.name for w in done.waiting] == ["apply"]  # a person brings the branch in
    assert "1. Add subtract() to calc.py" in done.state["plan"]


async def test_changes_at_plan_approval_send_the_note_to_the_planner(runner: Runner) -> None:
    waiting = await runner.start("sdlc", {"task": "Add subtract", "review_threshold": 0.0})
    await runner.answer(waiting.run.run_id, ANSWERS)
    again = await runner.request_changes(
        waiting.run.run_id, gate="plan_approval", note="also handle overflow"
    )
    assert [w.name for w in again.waiting] == ["plan_approval"]
    assert again.state["plan_revision"] == 2
    assert "## Feedback addressed\n\nalso handle overflow" in again.state["plan"]
    ended = await runner.reject(waiting.run.run_id, gate="plan_approval")
    assert ended.status is RunStatus.REJECTED
    assert "build" not in [r.node for r in ended.records]


async def test_a_parked_plan_is_taken_over_and_only_a_park_gate_takes_a_takeover(
    runner: Runner,
) -> None:
    waiting = await runner.start("sdlc", {"task": "Add subtract", "review_threshold": 1.5})
    with pytest.raises(ConflictError, match="not waiting at a gate"):
        await runner.take_over(waiting.run.run_id)  # a question is no park gate
    parked = await runner.answer(waiting.run.run_id, ANSWERS)
    assert parked.status is RunStatus.PARKED, parked.run.error
    [gate] = parked.waiting
    taken = await runner.take_over(waiting.run.run_id, gate=gate.name, note="mine", actor="ann")
    assert taken.status is RunStatus.TAKEN_OVER and taken.status.terminal
    [event] = [
        e for e in await runner.ledger.events(taken.run.run_id) if e.kind == "run.taken_over"
    ]
    assert event.message == f"taken over at gate {gate.name!r} by ann (mine)"
    assert "build" not in [r.node for r in taken.records]


async def test_offline_reviews_score_the_task_not_where_or_when_it_runs(
    runner: Runner, sample: Path, tmp_path: Path
) -> None:
    # The plan's text holds the repository's path and the question ids, which differ from run to
    # run; the offline reviewer's score must not, or the same task parks on some machines only.
    scores = []
    for place in ("one", "two"):
        repo = tmp_path / place
        shutil.copytree(sample, repo)
        waiting = await runner.start("sdlc", {"task": "add login", "repo": str(repo)})
        done = await runner.answer(waiting.run.run_id, ANSWERS)
        scores.append([review["score"] for review in done.state["reviews"]])
    assert scores[0] == scores[1]
    assert len(scores[0]) == 3  # "add login" fails review twice, then passes (0.62, 0.54, 0.89)
    assert scores[0][-1] >= 0.7 > max(scores[0][:2])

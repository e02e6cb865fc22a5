"""The sdlc build half over the in-memory runner: routing, the planning-only path, CI errors."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.ledger import RunStatus
from stageline.runner import Runner, RunSummary
from stageline.templates.builtin._sdlc_build import SERVICE_CI_COMMAND, route_verify
from stageline.testing import memory_runner

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdlc_sample"
ANSWERS = {"scope": "calc.py gains a subtract function", "priority": "normal",
           "done_when": "CI passes"}


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


async def run_answered(runner: Runner, inputs: dict[str, Any],
                       services: dict[str, Any] | None = None) -> RunSummary:
    waiting = await runner.start("sdlc", {"task": "Add subtract", "review_threshold": 0.0,
                                          **inputs}, services=services)
    assert waiting.status is RunStatus.WAITING
    return await runner.answer(waiting.run.run_id, ANSWERS, services=services)


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
    failed = await run_answered(runner, {"repo": str(sample)}, {SERVICE_CI_COMMAND: "exit 7"})
    assert failed.state["outcome"] == "parked"
    assert "exit code 7" in failed.state["build_feedback"]


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
    script = [{"write": ".stageline-ci", "content": f"touch {marker}\n"},
              {"event": {"type": "result", "status": "succeeded", "summary": "ok"}}]
    done = await run_answered(runner, {"repo": str(sample), "script": script})
    assert done.state["outcome"] == "approved", done.run.error  # the repository's own CI ran
    assert not marker.exists()


async def test_a_repo_that_is_not_git_fails_the_build_in_source_preparation(
    runner: Runner, tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    done = await run_answered(runner, {"repo": str(plain)})
    assert (done.status, done.run.failed_node) == (RunStatus.FAILED, "build")
    assert done.run.failure_phase == "source_preparation"
    assert "is not inside a git repository" in (done.run.error or "")

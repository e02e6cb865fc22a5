"""Inputs cannot start processes: a scripted ``spawn`` step needs an opt-in made in code."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stageline.config import Settings
from stageline.errors import HarnessNotReady
from stageline.harnesses import HarnessRequest, ScriptedHarness
from stageline.harnesses._scripted import AGENT
from stageline.ledger import RunStatus
from stageline.operations import SERVICE_HARNESS, OperationInputs, operation_stage
from stageline.runner import Runner
from stageline.templates import Template
from stageline.testing import memory_runner


class OpState(OperationInputs, total=False):
    repo: str


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    (path / "README.md").write_text("# repo\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(path)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*git, *args], check=True)
    return path


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def op_template() -> Template:
    work = operation_stage("op", prompt=lambda s, op: "work", repo=lambda s: s["repo"])
    return Template("op", state=OpState).add_stage("work", work)


def spawn_script(marker: Path) -> list[dict[str, object]]:
    return [
        {"spawn": ["touch", str(marker)]},
        {"sleep": 0.3},
        {"event": {"type": "result", "status": "succeeded", "summary": "done"}},
    ]


async def test_a_spawn_step_from_the_inputs_is_refused(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    request = HarnessRequest(
        kind="scripted",
        model=None,
        repo_root=repo,
        prompt="p",
        options={"script": spawn_script(marker)},
    )
    with pytest.raises(HarnessNotReady, match="step 1 would start a process"):
        await ScriptedHarness().ensure_ready(request)
    assert not marker.exists()


async def test_a_run_whose_script_input_spawns_fails_and_starts_nothing(
    runner: Runner, repo: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "spawned"
    summary = await runner.start(op_template(), {"repo": str(repo), "script": spawn_script(marker)})
    assert summary.status is RunStatus.FAILED
    assert summary.run.failure_phase == "harness_readiness"
    assert "would start a process" in (summary.run.error or "")
    assert not marker.exists()


async def test_code_may_opt_in_to_spawning(runner: Runner, repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    harness = ScriptedHarness(spawn_script(marker), allow_spawn=True)
    summary = await runner.start(
        op_template(), {"repo": str(repo)}, services={SERVICE_HARNESS: harness}
    )
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    assert marker.exists()


def test_the_agent_itself_refuses_spawn_without_the_flag(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "spawned"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(spawn_script(marker)))
    refused = subprocess.run(
        [sys.executable, str(AGENT), str(script)],
        cwd=repo,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert refused.returncode == 2 and "would start a process" in refused.stderr
    assert not marker.exists()
    allowed = subprocess.run(
        [sys.executable, str(AGENT), "--allow-spawn", str(script)],
        cwd=repo,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert marker.exists()

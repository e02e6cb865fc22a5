"""Cancel wins over finishing: a `run` in one process, `cancel` from another.

The template's stages wait on files the test writes, so each step ends exactly when the test
says: no sleeps decide the order.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _procs import cli, cli_env

TEMPLATE = """
import asyncio
import os
from pathlib import Path
from typing import Any, TypedDict

from stageline.templates import Template

SYNC = Path(os.environ["CANCEL_SYNC"])


class State(TypedDict, total=False):
    done: list


def held(name: str):
    async def stage(state: State, ctx: Any) -> dict[str, Any]:
        (SYNC / f"{name}.started").touch()
        while not (SYNC / f"{name}.go").exists():
            await asyncio.sleep(0.01)
        return {"done": [*state.get("done", []), name]}
    return stage


template = Template("held_steps", state=State)
template.add_stage("first", held("first")).add_stage("last", held("last"))
template.add_sequence("first", "last")
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    (tmp_path / "held.py").write_text(TEMPLATE)
    sync = tmp_path / "sync"
    sync.mkdir()
    return sync, cli_env(tmp_path / "home", CANCEL_SYNC=str(sync))


def _start(tmp_path: Path, env: dict[str, str], run_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "stageline.cli", "run", "held.py", "--run-id", run_id],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, proc: subprocess.Popen[str]) -> None:
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)


def _shown(tmp_path: Path, env: dict[str, str], run_id: str) -> dict[str, object]:
    done = cli(["show", run_id, "--json"], tmp_path, env)
    assert done.returncode == 0, done
    return json.loads(done.stdout)


@pytest.mark.parametrize("during", ["first", "last"])
def test_a_cancel_accepted_before_the_last_step_ends_cancels_the_run(
    tmp_path: Path, project: tuple[Path, dict[str, str]], during: str
) -> None:
    sync, env = project
    if during == "last":
        (sync / "first.go").touch()
    proc = _start(tmp_path, env, "c1")
    try:
        _wait_for(sync / f"{during}.started", proc)
        asked = cli(["cancel", "c1"], tmp_path, env)
        assert asked.returncode == 0 and "cancel requested" in asked.stdout, asked
        (sync / f"{during}.go").touch()  # the step ends at once, well inside a lease renewal
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err  # cancelled
    shown = _shown(tmp_path, env, "c1")
    run = shown["run"]
    assert isinstance(run, dict) and run["status"] == "cancelled", run
    ran = {r["node"] for r in shown["records"]}  # type: ignore[union-attr]
    assert ran == ({"first"} if during == "first" else {"first", "last"})
    assert not (sync / "last.started").exists() or during == "last"  # stopped between steps
    again = cli(["cancel", "c1"], tmp_path, env)
    assert (again.returncode, again.stderr.strip()) == (4, "error: run c1 already cancelled")


def test_a_cancel_after_the_run_ended_is_refused_with_exit_4(
    tmp_path: Path, project: tuple[Path, dict[str, str]]
) -> None:
    sync, env = project
    (sync / "first.go").touch()
    (sync / "last.go").touch()
    assert cli(["run", "held.py", "--run-id", "c2"], tmp_path, env).returncode == 0
    refused = cli(["cancel", "c2"], tmp_path, env)
    assert (refused.returncode, refused.stderr.strip()) == (4, "error: run c2 already succeeded")
    run = _shown(tmp_path, env, "c2")["run"]
    assert isinstance(run, dict)
    assert (run["status"], run["cancel_requested"]) == ("succeeded", False)

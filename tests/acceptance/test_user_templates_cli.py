"""A Python template in the project's ``templates/`` folder, as a user writes one: the same
version in every process, so a second process resumes what the first one started."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TEMPLATE = """
from __future__ import annotations

from typing import Any, TypedDict

from stageline.stages import stage
from stageline.templates import Template


class State(TypedDict, total=False):
    topic: str
    draft: str
    published: bool


@stage(retry=2)
async def write(state: State, ctx: Any) -> dict[str, Any]:
    return {"draft": f"about {state.get('topic')}"}


@stage
async def publish(state: State, ctx: Any) -> dict[str, Any]:
    return {"published": True}


template = Template("gated", state=State)
template.add_stage(write).add_gate("check").add_stage(publish)
template.add_edge("write", "check")
template.add_edge("check", "publish")
"""


def _project(tmp_path: Path) -> Path:
    (tmp_path / "stageline.toml").write_text("[stageline]\n")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "gated.py").write_text(TEMPLATE)
    return tmp_path


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``stageline ARGS`` as a process of its own (a fresh interpreter, a fresh hash seed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_MODEL="offline", COLUMNS="200", PYTHONIOENCODING="utf-8", PYTHONHASHSEED="random"
    )
    done = subprocess.run(
        [sys.executable, "-m", "stageline.cli", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _show(project: Path, run_id: str) -> dict[str, object]:
    done = _cli(project, "show", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["run"]  # type: ignore[no-any-return]


def test_a_run_waiting_at_a_gate_is_approved_from_another_process(tmp_path: Path) -> None:
    project = _project(tmp_path)
    first = _cli(project, "run", "gated", "-i", "topic=x", "--run-id", "g1")
    assert first.returncode == 3, (first.stdout, first.stderr)  # waiting at the gate
    version = _show(project, "g1")["template_version"]

    approved = _cli(project, "approve", "g1")
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    run = _show(project, "g1")
    assert run["status"] == "succeeded" and run["template_version"] == version


def test_a_detached_run_is_advanced_by_the_local_worker(tmp_path: Path) -> None:
    project = _project(tmp_path)
    queued = _cli(project, "run", "gated", "-i", "topic=x", "--run-id", "d1", "--detach")
    assert queued.returncode == 0, queued.stderr
    home = project / ".stageline"
    try:
        deadline = time.monotonic() + 90  # a guard against a hang, not a speed claim
        status = "queued"
        while status in ("queued", "running") and time.monotonic() < deadline:
            time.sleep(0.3)
            status = str(_show(project, "d1")["status"])
        log = home / "runs" / "d1" / "worker.log"
        assert status == "waiting", log.read_text() if log.exists() else "no worker log"
        approved = _cli(project, "approve", "d1")
        assert approved.returncode == 0, (approved.stdout, approved.stderr)
        assert _show(project, "d1")["status"] == "succeeded"
    finally:
        _stop_local_worker(home)


def _stop_local_worker(home: Path) -> None:
    """Stop the local worker this test's ``--detach`` started, by the pid in its lock file."""
    import signal

    lock = home / "worker.lock"
    text = lock.read_text().strip() if lock.exists() else ""
    if text.isdigit():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(text), signal.SIGTERM)


@pytest.mark.parametrize("seed", ["1", "2"])
def test_the_version_is_the_same_under_any_hash_seed(tmp_path: Path, seed: str) -> None:
    project = _project(tmp_path)
    code = (
        "from pathlib import Path; from stageline.templates import load_template; "
        "t = load_template('gated', [Path('templates')]); "
        "print(t.full_version, t.stage_of('write').name)"
    )
    outs = set()
    for s in (seed, "99"):
        env = {**os.environ, "PYTHONHASHSEED": s}
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        outs.add(done.stdout.strip())
    assert len(outs) == 1, outs
    assert str(tmp_path) not in outs.pop()  # nothing of where this machine keeps the project

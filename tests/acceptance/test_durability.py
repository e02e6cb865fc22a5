"""SIGKILL a real `stageline run` in the middle of a 10-node run, then `stageline resume` it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent.parent / "fixtures" / "ten_nodes.py"
NODES = [f"n{i}" for i in range(1, 11)]
CLI = [sys.executable, "-m", "stageline.cli"]


def _env(tmp_path: Path, trail: Path, hang: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env["STAGELINE_HOME"] = str(tmp_path / ".stageline")
    env["STAGELINE_TEST_TRAIL"] = str(trail)
    if hang:
        env["STAGELINE_TEST_HANG"] = hang
    return env


def _show(tmp_path: Path, run_id: str, trail: Path) -> dict[str, object]:
    out = subprocess.run(
        [*CLI, "show", run_id, "--json"],
        cwd=tmp_path,
        env=_env(tmp_path, trail),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def _wait_for(trail: Path, line: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if trail.exists() and any(x.startswith(line) for x in trail.read_text().splitlines()):
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run exited early: {proc.communicate()}")
        time.sleep(0.05)
    raise AssertionError(f"never saw {line!r} in the trail")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("clean")
    trail = tmp / "trail.txt"
    subprocess.run(
        [*CLI, "run", str(FIXTURE), "-i", "seed:=7", "--run-id", "clean"],
        cwd=tmp,
        env=_env(tmp, trail),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return _show(tmp, "clean", trail)


@pytest.mark.parametrize("killed", ["n1", "n5", "n10"])
def test_sigkill_mid_run_then_resume(
    tmp_path: Path, killed: str, uninterrupted: dict[str, object]
) -> None:
    trail = tmp_path / "trail.txt"
    proc = subprocess.Popen(
        [*CLI, "run", str(FIXTURE), "-i", "seed:=7", "--run-id", "victim"],
        cwd=tmp_path,
        env=_env(tmp_path, trail, hang=killed),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(trail, f"start {killed}", proc)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    resumed = subprocess.run(
        [*CLI, "resume", "victim"],
        cwd=tmp_path,
        env=_env(tmp_path, trail),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout

    lines = trail.read_text().splitlines()
    starts = Counter(x.split()[1] for x in lines if x.startswith("start "))
    ends = Counter(x.split()[1] for x in lines if x.startswith("end "))
    killed_at = NODES.index(killed)
    for node in NODES:
        expected_starts = 2 if node == killed else 1
        assert starts[node] == expected_starts, (node, lines)
        assert ends[node] == 1, (node, lines)
    # Nodes before the kill ran once, in the first process, and never again.
    assert [x.split()[1] for x in lines if x.startswith("end ")] == NODES
    assert (
        lines.index(f"start {killed} attempt=1") > lines.index(f"end {NODES[killed_at - 1]}")
        if killed_at
        else True
    )

    shown = _show(tmp_path, "victim", trail)
    assert shown["run"]["status"] == "succeeded"  # type: ignore[index]
    assert shown["state"] == uninterrupted["state"]
    records = shown["records"]  # type: ignore[assignment]
    succeeded = Counter(r["node"] for r in records if r["status"] == "succeeded")  # type: ignore[index]
    assert succeeded == Counter(NODES)

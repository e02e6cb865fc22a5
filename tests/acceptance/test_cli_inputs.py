"""Declared input types at the command line: refused with exit 2 before a run exists, or
converted where the conversion is exact."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]

SLEEPY = """
name: sleepy
state:
  sleep: float
  n: int
  done: bool
stages:
  nap: tests_fixtures_yaml_stages_noop
"""

STAGES = """
from stageline import stage


@stage(name="tests_fixtures_yaml_stages_noop")
async def noop(state, ctx):
    return {"done": True}
"""


def _project(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "sleepy.yaml").write_text(SLEEPY)
    (tmp_path / "templates" / "_stages.py").write_text(STAGES)


def test_a_value_that_does_not_fit_the_declared_type_exits_2_naming_the_key(
    cli: Cli, tmp_path: Path
) -> None:
    _project(tmp_path)
    for args in (["-i", "sleep=abc"], ["-i", "n=3.5"], ["-i", "done=perhaps"]):
        done = cli("run", "sleepy", *args)
        key = args[1].split("=")[0]
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: input {key!r}"), done.stderr
        assert "sleepy" in lines[0]
        detached = cli("run", "sleepy", *args, "--detach")
        assert detached.returncode == 2, detached.stderr
    assert json.loads(cli("runs", "--json").stdout) == []  # no run was made


def test_exact_conversions_are_made(cli: Cli, tmp_path: Path) -> None:
    _project(tmp_path)
    done = cli("run", "sleepy", "-i", "sleep=0.5", "-i", "n=3", "--run-id", "s1")
    assert done.returncode == 0, (done.stdout, done.stderr)
    shown = json.loads(cli("show", "s1", "--json").stdout)
    assert shown["state"] == {"sleep": 0.5, "n": 3, "done": True}
    assert shown["run"]["inputs"] == {"sleep": 0.5, "n": 3}

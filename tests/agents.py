"""Fake ``claude`` and ``codex`` executables on a PATH, replaying recorded streams (fixtures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "agents"


class FakeAgents:
    """A folder holding fake agents; ``path`` is a PATH that finds them first."""

    def __init__(self, folder: Path) -> None:
        self.bin = folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("claude", "codex"):
            exe = folder / name
            exe.write_text(
                f"#!{sys.executable}\nimport runpy\n"
                f"runpy.run_path({str(FIXTURES / 'fake_agent.py')!r}, "
                f"init_globals={{'AGENT': {str(exe)!r}}}, run_name='__main__')\n"
            )
            exe.chmod(0o755)
            self.scenario(name, streams=[])

    @property
    def path(self) -> str:
        return f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}"

    def scenario(self, name: str, **scenario: Any) -> None:
        (self.bin / f"{name}.scenario.json").write_text(json.dumps(scenario))

    def calls(self, name: str) -> list[dict[str, Any]]:
        path = self.bin / f"{name}.calls.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def agent_cli(
    cwd: Path, home: Path, agents: FakeAgents
) -> Callable[..., subprocess.CompletedProcess[str]]:
    """``stageline ARGS`` as a user runs it in ``cwd``, with the fake agents first on PATH;
    returns the finished process (a traceback fails the test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_HOME=str(home),
        STAGELINE_MODEL="offline",
        PYTHONIOENCODING="utf-8",
        COLUMNS="200",
        PATH=agents.path,
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [sys.executable, "-m", "stageline.cli", *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=120,
            check=False,
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    return run

"""Fake ``claude`` and ``codex`` executables on a PATH, replaying recorded streams (fixtures)."""

from __future__ import annotations

import json
import os
import sys
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

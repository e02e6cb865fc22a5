"""A scripted coding agent: replays a script, printing generic JSON lines, editing real files.

Run as ``python -m stageline.harnesses._scripted_agent [--allow-spawn] SCRIPT.json`` (or by
file path; it needs nothing but the standard library) in the repository. The prompt arrives on
standard input and is ignored. ``SCRIPT.json`` is a list of steps, or ``{"steps": [...]}``;
each step is one of::

    {"event": {"type": "message", "text": "..."}}   print one event line
    {"write": "path/in/repo.md", "content": "..."}  write a file (and report it)
    {"delete": "path/in/repo.md"}                   delete a file (and report it)
    {"raw": "not json", "newline": true}            print a line as is (malformed input)
    {"stderr": "text"}                              write a line to standard error
    {"sleep": 0.5}                                  wait
    {"spawn": ["sleep", "60"], "pidfile": "p"}      start a child process (in our group);
                                                    only with --allow-spawn
    {"exit": 3}                                     stop now with this exit code

Paths are relative to the working folder; a path that leaves it is refused (exit 2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

STEP_KEYS = ("event", "write", "delete", "raw", "stderr", "sleep", "spawn", "exit")


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _inside(path: str) -> Path:
    root = Path.cwd().resolve()
    target = (root / path).resolve()
    if target != root and root not in target.parents:
        sys.stderr.write(f"scripted agent: refusing to touch {path}: outside {root}\n")
        sys.exit(2)
    return target


def steps_of(script: Any, *, allow_spawn: bool = False) -> list[dict[str, Any]]:
    """The script's steps; a ``spawn`` step only when the caller opted in (a script from a
    run's inputs must not choose a process to start)."""
    steps = script.get("steps") if isinstance(script, dict) else script
    if not isinstance(steps, list) or not all(isinstance(s, dict) for s in steps):
        raise ValueError('a script is a list of steps (objects), or {"steps": [...]}')
    for number, step in enumerate(steps, 1):
        if not any(key in step for key in STEP_KEYS):
            raise ValueError(f"step {number} has none of: {', '.join(STEP_KEYS)}")
        if "spawn" in step and not allow_spawn:
            raise ValueError(
                f"step {number} would start a process (spawn); a script may do that only "
                "when the code making the harness allows it (ScriptedHarness(allow_spawn=True))"
            )
    return steps


def _step(step: dict[str, Any]) -> None:
    if "event" in step:
        _emit(dict(step["event"]))
    elif "write" in step:
        target = _inside(str(step["write"]))
        target.parent.mkdir(parents=True, exist_ok=True)
        content = str(step.get("content", ""))
        _emit(
            {
                "type": "tool_use",
                "text": "write_file",
                "name": "write_file",
                "input": {"path": step["write"]},
            }
        )
        target.write_text(content, encoding="utf-8")
        _emit(
            {
                "type": "file_change",
                "text": str(step["write"]),
                "action": "write",
                "bytes": len(content.encode("utf-8")),
            }
        )
    elif "delete" in step:
        target = _inside(str(step["delete"]))
        target.unlink(missing_ok=True)
        _emit({"type": "file_change", "text": str(step["delete"]), "action": "delete"})
    elif "raw" in step:
        sys.stdout.write(str(step["raw"]) + ("\n" if step.get("newline", True) else ""))
        sys.stdout.flush()
    elif "stderr" in step:
        sys.stderr.write(str(step["stderr"]) + "\n")
        sys.stderr.flush()
    elif "sleep" in step:
        time.sleep(float(step["sleep"]))
    elif "spawn" in step:
        child = subprocess.Popen([str(a) for a in step["spawn"]], stdin=subprocess.DEVNULL)
        if step.get("pidfile"):
            Path(step["pidfile"]).write_text(str(child.pid))
        _emit({"type": "status", "text": "spawned a helper process", "pid": child.pid})
    elif "exit" in step:
        sys.stdout.flush()
        sys.exit(int(step["exit"]))


def main(argv: list[str]) -> int:
    allow_spawn = "--allow-spawn" in argv
    argv = [a for a in argv if a != "--allow-spawn"]
    if len(argv) != 1:
        sys.stderr.write(
            "usage: python -m stageline.harnesses._scripted_agent [--allow-spawn] SCRIPT.json\n"
        )
        return 2
    try:
        steps = steps_of(
            json.loads(Path(argv[0]).read_text(encoding="utf-8")), allow_spawn=allow_spawn
        )
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"scripted agent: bad script {argv[0]}: {exc}\n")
        return 2
    if not sys.stdin.isatty():
        sys.stdin.read()  # the prompt: read so the harness's writer is never left blocked
    for step in steps:
        _step(step)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""``run --detach``: a background ``stageline resume RUN`` process, outliving the command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["spawn_resume"]


def spawn_resume(run_id: str, log: Path) -> int:
    """Start ``stageline resume RUN`` in its own session, output to ``log``; its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", "stageline.cli", "resume", run_id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # It outlives us on purpose; mark it reaped so Popen does not warn about it at exit.
    child.returncode = 0
    return child.pid

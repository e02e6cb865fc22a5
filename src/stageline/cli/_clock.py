"""When the command was issued: a decision binds to what waited then (see ``Runner.approve``).

A ``stageline approve`` issued before the run came back to its gate is about the visit its
user saw, however long the process took to start: so the first command of a process counts
from the process's start (Linux), any later one from its own call.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["began", "mark"]

_began: float | None = None


def _process_start() -> float | None:
    """When this process started, by the wall clock (None where that cannot be read)."""
    try:
        fields = Path("/proc/self/stat").read_text().rpartition(")")[2].split()
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return time.time() - max(age, 0.0)


def mark() -> None:
    """Note that a command begins (the console entry point calls this first)."""
    global _began
    _began = (_process_start() if _began is None else None) or time.time()


def began() -> float:
    """When the running command was issued (now, if nothing marked it)."""
    return time.time() if _began is None else _began

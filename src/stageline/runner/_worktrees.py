"""A deleted run's git worktree and branch go with it, so repositories keep no stale ones.

An isolated operation leaves ``RUN_DIR/worktree`` (a worktree of the person's checkout) and
``RUN_DIR/worktree.json`` (the checkout, the branch ``stageline/RUN``, and whether stageline
made that branch). Deleting the run removes the worktree, and the branch when stageline made it
and no worktree has it checked out (a person reviewing it there keeps it).
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from pathlib import Path

__all__ = ["describe_worktree", "remove_worktree"]

_log = logging.getLogger("stageline.runner")

RECORD = "worktree.json"


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False
    )


def _checkout_of(worktree: Path) -> Path | None:
    done = _git(worktree, "rev-parse", "--path-format=absolute", "--git-common-dir")
    return Path(done.stdout.strip()).parent if done.returncode == 0 else None


def _record(run_dir: Path) -> dict[str, object]:
    try:
        found = json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def describe_worktree(run_dir: Path) -> str | None:
    """``on branch B in worktree W (of checkout C)``, for a run whose operation left one."""
    record, worktree = _record(run_dir), run_dir / "worktree"
    if not record or not worktree.exists():
        return None
    return (
        f"on branch {record.get('branch')} in worktree {worktree.resolve()} "
        f"(of checkout {record.get('checkout')})"
    )


def remove_worktree(run_dir: Path, run_id: str) -> list[str]:
    """Remove the run's worktree and its branch (see the module); what was removed. Never
    raises: a repository that moved or broke leaves a warning in the log, not a failed prune."""
    try:
        return _remove(run_dir, run_id)
    except Exception:
        _log.warning("could not remove the worktree of run %s", run_id, exc_info=True)
        return []


def _remove(run_dir: Path, run_id: str) -> list[str]:
    worktree, record_path = run_dir / "worktree", run_dir / RECORD
    record = _record(run_dir)
    checkout = Path(str(record["checkout"])) if record.get("checkout") else None
    if checkout is None and (worktree / ".git").exists():
        checkout = _checkout_of(worktree)
    if checkout is None or not checkout.is_dir():
        return []
    removed: list[str] = []
    if worktree.exists():
        if _git(checkout, "worktree", "remove", "--force", str(worktree)).returncode != 0:
            shutil.rmtree(worktree, ignore_errors=True)
        removed.append(str(worktree))
    _git(checkout, "worktree", "prune")
    branch = f"stageline/{run_id}"
    if record.get("made_branch") and record.get("branch") == branch:
        listing = _git(checkout, "worktree", "list", "--porcelain").stdout.splitlines()
        checked_out = f"branch refs/heads/{branch}" in listing
        if not checked_out and _git(checkout, "branch", "-D", branch).returncode == 0:
            removed.append(branch)
    record_path.unlink(missing_ok=True)
    return removed

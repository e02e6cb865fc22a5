"""One operation's isolation: the paths it may write, what it wrote, and its commit.

An operation whose repository is a git checkout works in the run's worktree (``isolate``) on
branch ``stageline/RUN``. Its allowed paths are relative to the repository (``""``: all of it);
those below the root are carried in from the checkout as they are now, uncommitted changes
included. After the agent, a change outside them fails validation and the worktree goes back to
where the operation started; a success becomes a commit on the branch, which the ``apply`` gate
(or the ``apply`` input) brings into the checkout.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stageline.errors import InputError
from stageline.operations._worktree import Isolation, commit_all, git, isolate

__all__ = [
    "WritesOutside",
    "allowed_paths",
    "isolate_operation",
    "isolation_state",
    "land",
    "written_outside",
]


class WritesOutside(Exception):
    """The agent changed files outside the operation's allowed paths."""

    def __init__(self, paths: Sequence[str], allowed: Sequence[str]) -> None:
        self.paths = list(paths)
        where = ", ".join(allowed)
        noun = "path" if len(allowed) == 1 else "paths"
        shown = [f"{p}: written outside the allowed {noun} {where}" for p in self.paths[:3]]
        more = f" (and {len(self.paths) - 3} more)" if len(self.paths) > 3 else ""
        super().__init__("; ".join(shown) + more)


def allowed_paths(
    checkout: Path, target: Path, given: Sequence[str | Path] | None
) -> tuple[str, ...]:
    """Each allowed path relative to the repository (``""``: the whole of it). Default: the
    path the operation's ``repo`` names (a wiki folder, or the repository itself)."""
    found: list[str] = []
    for item in [target] if given is None else list(given):
        path = Path(item).expanduser()
        path = (path if path.is_absolute() else checkout / path).resolve()
        try:
            rel = path.relative_to(checkout).as_posix()
        except ValueError:
            raise InputError(f"allowed path {item} is outside the repository {checkout}") from None
        found.append("" if rel == "." else rel)
    return tuple(dict.fromkeys(found)) or ("",)


def isolate_operation(
    checkout: Path, run_dir: Path, run_id: str, allowed: Sequence[str]
) -> Isolation:
    """The run's worktree, with the allowed paths below the root carried in from the checkout."""
    carry = [] if "" in allowed else list(allowed)
    try:
        return isolate(checkout, run_dir, run_id, carry=carry)
    except RuntimeError as exc:
        if "no commit" in str(exc):
            raise RuntimeError(
                f"{exc} (an operation works on a branch of its own; or make the stage with "
                "isolation=False to let the agent write in the checkout)"
            ) from exc
        raise


def _changed(worktree: Path, base: str) -> list[str]:
    """Every path that differs from ``base``: committed since (an agent may commit), changed,
    deleted or new (untracked, ignored files aside)."""

    def names(*args: str) -> list[str]:
        done = subprocess.run(
            ["git", "-C", str(worktree), *args], capture_output=True, check=True
        ).stdout
        return [p for p in done.decode("utf-8", "surrogateescape").split("\0") if p]

    changed = names("diff", "--name-only", "-z", "--no-renames", base)
    return changed + names("ls-files", "--others", "--exclude-standard", "-z")


def written_outside(worktree: Path, base: str, allowed: Sequence[str]) -> list[str]:
    """The paths changed since ``base`` that no allowed path covers."""
    if "" in allowed:
        return []
    return sorted(
        {
            rel
            for rel in _changed(worktree, base)
            if not any(rel == a or rel.startswith(a.rstrip("/") + "/") for a in allowed)
        }
    )


def land(iso: Isolation, base: str, message: str) -> tuple[str, str]:
    """Commit the worktree on the branch; the commit and what changed since ``base``."""
    commit = commit_all(iso.worktree, message)
    stat = git(iso.worktree, "diff", "--stat", f"{base}..{commit}")
    return commit, stat or "(no changes)"


def isolation_state(iso: Isolation, base: str, commit: str, changes: str) -> dict[str, Any]:
    """The state keys the ``apply`` step reads (``OperationInputs``)."""
    return {
        "checkout": str(iso.checkout),
        "branch": iso.branch,
        "worktree": str(iso.worktree),
        "base_commit": base,
        "commit": commit,
        "changes": changes,
    }

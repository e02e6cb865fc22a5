"""Isolation: an operation works in a git worktree on a branch of its own, never in the checkout.

``isolate`` makes (or reuses) ``RUN_DIR/worktree`` on branch ``stageline/RUN``, from the
checkout's ``HEAD``, and may carry the checkout's current copy of some folders into it (a wiki
with uncommitted pages), committed as the branch's baseline. The agent writes there; a post
step commits the result on the branch (``commit_all``) or throws it away (``revert``); the
person brings it into their checkout later (``apply_to_checkout``), and only then.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Isolation", "apply_to_checkout", "commit_all", "git", "isolate", "revert"]

WORKTREE_RECORD = "worktree.json"
"""In the run's folder: the checkout, branch and whether stageline made the branch."""
IDENTITY = ["-c", "user.name=stageline", "-c", "user.email=stageline@localhost"]


def git(cwd: Path, *args: str, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, input=stdin, check=False
    )
    if done.returncode != 0:
        text = done.stderr.decode("utf-8", "replace").strip()
        why = (text.splitlines() or ["failed"])[-1]
        raise RuntimeError(f"git {args[0]} in {cwd}: {why}")
    return done.stdout.decode("utf-8", "replace").strip()


def _identity(cwd: Path) -> list[str]:
    configured = (
        subprocess.run(
            ["git", "-C", str(cwd), "config", "user.email"], capture_output=True, check=False
        ).returncode
        == 0
    )
    return [] if configured else IDENTITY


@dataclass(frozen=True, kw_only=True)
class Isolation:
    checkout: Path
    """The person's own working tree (never written by the agent)."""
    worktree: Path
    branch: str
    base: str
    """The commit the operation starts from: ``HEAD`` plus the carried folders."""


def isolate(checkout: Path, run_dir: Path, run_id: str, *, carry: Sequence[str] = ()) -> Isolation:
    """The run's worktree on its branch, made once; ``carry``: folders (relative to the
    checkout) copied in as they are in the checkout now, uncommitted changes included."""
    branch = f"stageline/{run_id}"
    worktree = run_dir / "worktree"
    if not (worktree / ".git").exists():
        try:
            head = git(checkout, "rev-parse", "HEAD")
        except RuntimeError as exc:
            raise RuntimeError(f"{checkout} has no commit to branch from; commit first") from exc
        worktree.parent.mkdir(parents=True, exist_ok=True)
        _ignore_in(checkout, run_dir)
        known = subprocess.run(
            [
                "git",
                "-C",
                str(checkout),
                "rev-parse",
                "--verify",
                "--quiet",
                f"refs/heads/{branch}",
            ],
            capture_output=True,
            check=False,
        )
        if known.returncode == 0:
            git(checkout, "worktree", "add", str(worktree), branch)
        else:
            git(checkout, "worktree", "add", "-b", branch, str(worktree), head)
        # what `prune` removes with the run: this worktree, and the branch if made here
        record = {"checkout": str(checkout), "branch": branch, "made_branch": known.returncode != 0}
        (run_dir / WORKTREE_RECORD).write_text(json.dumps(record))
        for rel in carry:
            _carry(checkout / rel, worktree / rel)
        if git(worktree, "status", "--porcelain"):
            git(worktree, "add", "-A")
            git(
                worktree,
                *_identity(worktree),
                "commit",
                "-q",
                "-m",
                "stageline: the checkout's copy of " + ", ".join(carry),
            )
    worktree = worktree.resolve()
    return Isolation(
        checkout=checkout, worktree=worktree, branch=branch, base=git(worktree, "rev-parse", "HEAD")
    )


def _ignore_in(checkout: Path, run_dir: Path) -> None:
    """stageline's folder inside the checkout (``.stageline``) gets a ``.gitignore`` of ``*``,
    so that ``git status`` and ``git add -A`` there pass over the worktrees it holds."""
    try:
        top = run_dir.resolve().relative_to(checkout.resolve()).parts[0]
    except (ValueError, IndexError):
        return  # the runs live outside the checkout
    ignore = checkout / top / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# stageline's own folder: runs, worktrees, the database\n*\n")


def _carry(source: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    if source.is_dir():
        shutil.copytree(
            source, target, symlinks=True, ignore=shutil.ignore_patterns(".git", ".stageline")
        )
    elif source.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def commit_all(worktree: Path, message: str) -> str:
    """Commit everything changed in the worktree (nothing changed: no commit); the new HEAD."""
    if git(worktree, "status", "--porcelain"):
        git(worktree, "add", "-A")
        git(worktree, *_identity(worktree), "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD")


def revert(worktree: Path, base: str) -> None:
    """Throw away what the agent did: the worktree back at ``base``, untracked files gone."""
    git(worktree, "reset", "-q", "--hard", base)
    git(worktree, "clean", "-q", "-fdx")


def apply_to_checkout(iso: Isolation, commit: str, paths: Sequence[str] = ()) -> list[str]:
    """Apply ``base..commit`` to the checkout's working tree (not its index, not committed);
    refuses as a whole if it does not apply cleanly. Returns the paths it changed."""
    limit = ["--", *paths] if paths else []
    changed = [
        p
        for p in git(
            iso.worktree, "diff", "--name-only", f"{iso.base}..{commit}", *limit
        ).splitlines()
        if p
    ]
    if not changed:
        return []
    patch = subprocess.run(
        ["git", "-C", str(iso.worktree), "diff", "--binary", f"{iso.base}..{commit}", *limit],
        capture_output=True,
        check=True,
    ).stdout
    with tempfile.NamedTemporaryFile(suffix=".patch") as f:
        f.write(patch)
        f.flush()
        try:
            git(iso.checkout, "apply", "--whitespace=nowarn", f.name)
        except RuntimeError as exc:
            raise RuntimeError(
                f"the changes on branch {iso.branch} do not apply to {iso.checkout} cleanly "
                f"({exc}); merge the branch yourself: git merge {iso.branch}"
            ) from exc
    return changed

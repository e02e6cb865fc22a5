"""Fixtures of the forge tests, for every suite (tests/conftest.py imports them): a bare git
repository as the ``origin`` of a local clone (pushes are real), a fake GitHub serving it as
``acme/app``, and the ``[github]`` table of a stageline.toml pointing at both."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from fake_github import FakeGitHub  # noqa: E402

REPO = "acme/app"
TOKEN = "ghp-test-token-0123456789"
WEBHOOK_SECRET = "webhook-secret-for-tests"


@dataclass(frozen=True)
class GitRemote:
    bare: Path
    """The bare repository: GitHub's side."""
    checkout: Path
    """A clone of it (``origin`` is ``bare``) on branch ``main``, one commit in."""

    def git(self, *args: str, cwd: Path | None = None) -> str:
        done = subprocess.run(
            ["git", *args], cwd=cwd or self.checkout, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    def head(self, branch: str = "main") -> str:
        """The commit ``branch`` points at in the bare repository."""
        return self.git("rev-parse", f"refs/heads/{branch}", cwd=self.bare)


def make_git_remote(where: Path) -> GitRemote:
    """A bare repository and a clone of it with one commit pushed on ``main``."""
    bare, checkout = where / "origin.git", where / "checkout"
    env_free = ["-c", "init.defaultBranch=main"]
    subprocess.run(["git", *env_free, "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", *env_free, "init", "-q", str(checkout)], check=True)
    remote = GitRemote(bare=bare, checkout=checkout)
    remote.git("config", "user.email", "tests@example.com")
    remote.git("config", "user.name", "Tests")
    remote.git("remote", "add", "origin", str(bare))
    (checkout / "README.md").write_text("# app\n")
    remote.git("add", "README.md")
    remote.git("commit", "-q", "-m", "first")
    remote.git("push", "-q", "origin", "main")
    return remote


@pytest.fixture
def git_remote(tmp_path: Path) -> GitRemote:
    return make_git_remote(tmp_path / "git")


@pytest.fixture
def fake_github(git_remote: GitRemote) -> Iterator[FakeGitHub]:
    """A fake GitHub whose ``acme/app`` is ``git_remote``'s bare repository."""
    fake = FakeGitHub(token=TOKEN, remotes={REPO: git_remote.bare})
    yield fake
    fake.close()


def github_toml(
    api_url: str,
    checkout: Path,
    *,
    workflow: str | None = "ci.yml",
    label: str = "stageline",
    extra: str = "",
    poll_interval: str = "1s",
) -> str:
    """The ``[github]`` tables of a stageline.toml for ``acme/app`` (token and secret in
    ``GITHUB_TOKEN`` and ``GITHUB_WEBHOOK_SECRET``)."""
    flow = f'workflow = "{workflow}"\n' if workflow else ""
    return (
        f'[github]\napi_url = "{api_url}"\nintake_label = "{label}"\n'
        f'poll_interval = "{poll_interval}"\n'
        f"{extra}"
        f'\n[github.repositories."{REPO}"]\ncheckout = "{checkout.as_posix()}"\n'
        f'base = "main"\n{flow}'
    )

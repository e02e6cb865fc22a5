"""GitHub as the forge of sdlc runs: ``[github]`` settings, the client, webhook signatures.

``GitHubClient`` is loaded on first use: githubkit takes ~0.3 s to import, which the CLI and
a server without ``[github]`` never pay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stageline.errors import ForgeError
from stageline.forge._models import CiRun, Comment, Issue, PullRequest
from stageline.forge._settings import GitHubSettings, RepoSettings, github_settings
from stageline.forge._signature import sign, verify_signature

if TYPE_CHECKING:
    from stageline.forge._client import GitHubClient

__all__ = [
    "CiRun",
    "Comment",
    "ForgeError",
    "GitHubClient",
    "GitHubSettings",
    "Issue",
    "PullRequest",
    "RepoSettings",
    "github_settings",
    "sign",
    "verify_signature",
]


def __getattr__(name: str) -> Any:
    if name == "GitHubClient":
        from stageline.forge._client import GitHubClient

        return GitHubClient
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

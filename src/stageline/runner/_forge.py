"""The forge of one process: ``[github]``'s settings and one GitHub client, made on first use.

Stages reach it as the ``forge`` service; ``runner.forge_ci`` polls CI through it. A process
that never touches a repository never reads the token nor imports the client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stageline.config import Settings

if TYPE_CHECKING:
    from stageline.forge import GitHubClient, GitHubSettings

__all__ = ["ForgeAccess"]


class ForgeAccess:
    """``github`` (the settings, secrets read from the environment) and ``client``, each made
    once, when first asked for (a ``ConfigError`` then if the token is not set)."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._github: GitHubSettings | None = None
        self._client: GitHubClient | None = None

    @property
    def github(self) -> GitHubSettings:
        if self._github is None:
            from stageline.forge import github_settings

            self._github = github_settings(self._settings)
        return self._github

    @property
    def client(self) -> GitHubClient:
        if self._client is None:
            from stageline.forge import GitHubClient  # githubkit: ~0.3 s to import

            self._client = GitHubClient(self.github)
        return self._client

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

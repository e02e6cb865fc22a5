"""The forge of one process: ``[github]``'s settings and one GitHub client, made on first use.

One per process, given to everything there that talks to GitHub: the runner's ``forge``
service and CI polls (``runner.forge_ci``) and, in ``stageline serve``, the webhook, the issue
poll and the issue comment mirror; whoever made it closes it, once. A process that never
touches a repository never reads the token nor imports the client library.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stageline.config import Settings

if TYPE_CHECKING:
    from stageline.forge import GitHubClient, GitHubSettings

__all__ = ["ForgeAccess"]


class ForgeAccess:
    """``github`` (the settings, secrets read from the environment unless given) and
    ``client``, each made once, when first asked for (a ``ConfigError`` then if the token is
    not set)."""

    def __init__(self, settings: Settings, *, github: GitHubSettings | None = None) -> None:
        self._settings = settings
        self._github: GitHubSettings | None = github
        self._client: GitHubClient | None = None

    @classmethod
    def configured(cls, settings: Settings) -> ForgeAccess | None:
        """The forge of ``settings`` when ``[github]`` lists repositories, else None."""
        github = getattr(settings, "github", None)
        return cls(settings) if github is not None and github.enabled else None

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

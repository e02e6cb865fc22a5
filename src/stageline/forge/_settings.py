"""``[github]`` resolved for one process: the token and webhook secret read from the variables
the file names, checkout paths made absolute, durations in seconds."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stageline.config import Settings
from stageline.errors import ConfigError

__all__ = ["AppSignIn", "GitHubSettings", "RepoSettings", "github_settings"]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def _seconds(value: str | float) -> float:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value))
    assert found is not None  # the config schema checked it
    return float(found.group(1)) * _UNITS[found.group(2)]


@dataclass(frozen=True, kw_only=True)
class RepoSettings:
    """One repository stageline may touch (``[github.repositories."OWNER/NAME"]``)."""

    name: str
    """``OWNER/NAME``."""
    checkout: Path
    """The local clone whose ``origin`` is the repository."""
    base: str = "main"
    workflow: str | None = None
    """The workflow to dispatch; None: wait for the pushed commit's check suites."""
    merge: bool = False

    @property
    def owner(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def repo(self) -> str:
        return self.name.split("/", 1)[1]


@dataclass(frozen=True, kw_only=True)
class AppSignIn:
    """A GitHub App's installation to sign in as: githubkit makes its installation token
    (from a JWT signed with the private key) and makes a new one before it expires."""

    app_id: int
    installation_id: int
    private_key: str = field(repr=False)


@dataclass(frozen=True, kw_only=True)
class GitHubSettings:
    """What the forge needs, secrets included (kept out of ``repr``)."""

    api_url: str
    token: str | None = field(default=None, repr=False)
    """A token to send as it is; None when signing in as an App (``app``)."""
    app: AppSignIn | None = None
    webhook_secret: str | None = field(default=None, repr=False)
    """None when the variable ``[github] webhook_secret_env`` names is unset."""
    intake_label: str = "stageline"
    intake_template: str = "sdlc"
    poll_issues: bool = False
    poll_interval: float = 30.0
    """Seconds between polls (issues; the first CI poll)."""
    ci_timeout: float = 7200.0
    """Seconds a run waits for CI to report before CI counts as failed (``timed_out``)."""
    repositories: Mapping[str, RepoSettings] = field(default_factory=dict)

    def repository(self, name: str) -> RepoSettings:
        """The settings of ``name``; a ``ConfigError`` when it is not configured."""
        found = self.repositories.get(name)
        if found is None:
            known = ", ".join(self.repositories) or "none"
            raise ConfigError(
                f"repository {name!r} is not in [github.repositories] of stageline.toml "
                f"(configured: {known}); stageline touches only those"
            )
        return found


def github_settings(settings: Settings, env: Mapping[str, str] | None = None) -> GitHubSettings:
    """``[github]`` of ``settings`` with its secrets read from ``env`` (default: the process
    environment). A ``ConfigError`` when no repository is configured or the token is unset."""
    env = os.environ if env is None else env
    conf = settings.github
    if not conf.enabled:
        raise ConfigError(
            'stageline.toml has no [github.repositories."OWNER/NAME"] table: '
            "configure the repositories stageline may touch"
        )
    token: str | None = None
    app: AppSignIn | None = None
    if conf.app_id is not None and conf.installation_id is not None:
        key = env.get(conf.app_private_key_env, "").strip()
        if "\n" not in key:  # a PEM kept on one line, its line breaks written as \n
            key = key.replace("\\n", "\n")
        if "PRIVATE KEY-----" not in key:
            raise ConfigError(
                f"github.app_private_key_env: the environment variable "
                f"{conf.app_private_key_env} (the GitHub App's private key, PEM) is "
                + ("not set" if not key else "not a PEM private key")
            )
        app = AppSignIn(
            app_id=conf.app_id, installation_id=conf.installation_id, private_key=key + "\n"
        )
    else:
        token = env.get(conf.token_env, "").strip()
        if not token:
            raise ConfigError(
                f"github.token_env: the environment variable {conf.token_env} (the GitHub "
                "token) is not set; or sign in as a GitHub App (app_id, installation_id)"
            )
    repositories = {
        name: RepoSettings(
            name=name,
            checkout=(settings.root / repo.checkout).resolve(),
            base=repo.base,
            workflow=repo.workflow,
            merge=repo.merge,
        )
        for name, repo in conf.repositories.items()
    }
    return GitHubSettings(
        api_url=conf.api_url.rstrip("/"),
        token=token,
        app=app,
        webhook_secret=env.get(conf.webhook_secret_env) or None,
        intake_label=conf.intake_label,
        intake_template=conf.intake_template,
        poll_issues=conf.poll_issues,
        poll_interval=_seconds(conf.poll_interval),
        ci_timeout=_seconds(conf.ci_timeout),
        repositories=repositories,
    )

"""The chat part of the configuration, resolved once per server: secrets read from the
environment, the Web client pointed at Slack (or at a test server)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stageline.config import Settings
from stageline.errors import ConfigError

__all__ = ["ChatSettings", "actor_of"]

_log = logging.getLogger("stageline.server")

SLACK_API = "https://slack.com/api/"


@dataclass(frozen=True, kw_only=True)
class ChatSettings:
    """``[slack]`` and ``public_url``, with the secrets themselves (never logged)."""

    bot_token: str | None = field(default=None, repr=False)
    signing_secret: str | None = field(default=None, repr=False)
    channel: str | None = None
    deciders: tuple[str, ...] = ()
    api_url: str = SLACK_API
    intake_command: str | None = None
    intake_template: str | None = None
    intake_input: str | None = None
    intake_defaults: Mapping[str, Any] = field(default_factory=dict)
    channel_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    public_url: str | None = None

    @property
    def slack(self) -> bool:
        """Whether the Slack app is set up: requests can be checked and answered."""
        return bool(self.signing_secret and self.bot_token)

    @classmethod
    def of(cls, settings: Settings, env: Mapping[str, str] | None = None) -> ChatSettings:
        env = os.environ if env is None else env
        section = settings.slack

        def secret(key: str) -> str | None:
            var = getattr(section, key)
            if not var:
                return None
            value = env.get(var)
            if not value:
                raise ConfigError(f"[slack] {key}: environment variable {var} is not set")
            return value

        api_url = section.api_url or SLACK_API
        if not api_url.startswith(("http://", "https://")):
            raise ConfigError("[slack] api_url must start with http:// or https://")
        return cls(
            bot_token=secret("bot_token_env"),
            signing_secret=secret("signing_secret_env"),
            channel=section.channel,
            deciders=tuple(section.deciders),
            api_url=api_url if api_url.endswith("/") else api_url + "/",
            intake_command=section.intake_command,
            intake_template=section.intake_template,
            intake_input=section.intake_input,
            intake_defaults=dict(section.intake_defaults),
            channel_defaults={k: dict(v) for k, v in section.channel_defaults.items()},
            public_url=settings.public_url.rstrip("/") if settings.public_url else None,
        )

    def client(self) -> Any:
        """An ``AsyncWebClient`` with the bot token, at ``api_url``."""
        from slack_sdk.web.async_client import AsyncWebClient

        return AsyncWebClient(token=self.bot_token, base_url=self.api_url, timeout=10)

    def intake_inputs(self, channel: str | None, text: str) -> dict[str, Any]:
        """The inputs of a run the intake command starts in ``channel`` with ``text``: the
        project's defaults, the channel's over them, the text over both."""
        assert self.intake_input is not None
        inputs = {**self.intake_defaults, **self.channel_defaults.get(channel or "", {})}
        return {**inputs, self.intake_input: text}

    def may_decide(self, user_id: str) -> bool:
        return not self.deciders or user_id in self.deciders

    def announce(self) -> None:
        """Say at start-up what the Slack app allows (nothing secret)."""
        if not self.slack:
            return
        if self.deciders:
            _log.warning("slack: %d people may decide from Slack (deciders)", len(self.deciders))
        else:
            _log.warning(
                "slack: [slack] deciders is not set: ANYONE in the channel may approve, "
                "reject and answer from Slack"
            )


def actor_of(user: Mapping[str, Any]) -> str:
    """The actor recorded for a Slack user: ``slack:ID (name)``."""
    uid = str(user.get("id") or "unknown")
    name = user.get("username") or user.get("name") or user.get("user_name")
    return f"slack:{uid} ({name})" if name else f"slack:{uid}"

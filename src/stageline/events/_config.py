"""Sinks from ``[[sinks]]`` tables in stageline.toml (``Settings.sinks``).

```toml
[[sinks]]
type = "webhook"            # console | webhook | telegram | otel, or a registered type
format = "discord"          # discord | slack | json
url_env = "DISCORD_WEBHOOK_URL"
min_level = "info"          # debug < info < warning < error < critical
kinds = ["run.*", "node.*", "gate.*"]
```

Keys every type takes: ``type``, ``name``, ``min_level``, ``kinds``, ``categories``,
``enabled``, and for queued sinks ``queue_size``, ``batch``, ``linger``, ``retries``,
``backoff``, ``timeout``. A misspelt key is an error, not a silently ignored line; error
messages name the sink and the key, never a secret's value.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from fnmatch import fnmatchcase
from typing import Any, Protocol

from stageline.errors import ConfigError
from stageline.events._console import ConsoleSink
from stageline.events._delivery import AsyncSink, DeliveryPolicy
from stageline.events._filters import LEVELS, EventFilter
from stageline.events._formats import FORMATS
from stageline.events._otel import OtelSink
from stageline.events._sink import Sink, SinkSpec
from stageline.events._telegram import CRITICAL_KINDS, DEFAULT_API_URL, TelegramSink
from stageline.events._webhook import WebhookSink

__all__ = [
    "SecretMissing",
    "SinkFactory",
    "SinkOptions",
    "build_sinks",
    "register_sink_type",
    "sink_types",
]

_COMMON = frozenset({"type", "name", "min_level", "kinds", "categories", "enabled"})
_POLICY = {
    "queue_size": int,
    "batch": int,
    "linger": float,
    "retries": int,
    "backoff": float,
    "timeout": float,
}


class SecretMissing(ConfigError):
    """A sink's secret is not in the environment: that sink cannot deliver in this process."""


class SinkOptions:
    """One ``[[sinks]]`` table's own keys, read once each; what is left unread is an error."""

    def __init__(self, label: str, table: Mapping[str, Any], env: Mapping[str, str]) -> None:
        self.label = label
        self.env = env
        self._left = {k: v for k, v in table.items() if k not in _COMMON and k not in _POLICY}

    def error(self, message: str) -> ConfigError:
        return ConfigError(f"{self.label}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self._left.pop(key, default)
        if value is not default and not isinstance(value, kind):
            names = (
                kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            )
            raise self.error(f"{key} must be a {names}")
        return value

    def secret(self, key: str, *, required: bool = False) -> str | None:
        """``key`` given inline, or read from the variable named by ``{key}_env``."""
        inline: str | None = self.get(key, str)
        var: str | None = self.get(f"{key}_env", str)
        if inline is not None and var is not None:
            raise self.error(f"give {key} or {key}_env, not both")
        if var is not None:
            value = self.env.get(var)
            if not value:
                raise SecretMissing(
                    f"{self.label}: environment variable {var} (from {key}_env) is not set"
                )
            return value
        if inline is None and required:
            raise self.error(f"{key} (or {key}_env) is required")
        return inline

    def finish(self) -> None:
        if self._left:
            raise self.error(f"unknown key {sorted(self._left)[0]!r}")


class SinkFactory(Protocol):
    """Makes a sink from its table's own keys; reads each with ``options`` (which rejects
    keys nobody read) and raises ``options.error(...)`` for a bad one."""

    def __call__(
        self, *, options: SinkOptions, policy: DeliveryPolicy, **future_kwargs: Any
    ) -> Sink | AsyncSink: ...


_TYPES: dict[str, tuple[SinkFactory, DeliveryPolicy, str]] = {}
_ONLY: dict[str, tuple[str, ...]] = {}
"""Types that take only these event kinds (a table's ``kinds`` may narrow them, never widen)."""
_INLINE: set[str] = set()
"""Types whose sinks are called inline by every process (the terminal); the others are
delivered from the ledger's outbox, only by processes that deliver."""


def register_sink_type(
    name: str,
    factory: SinkFactory,
    *,
    policy: DeliveryPolicy | None = None,
    min_level: str = "info",
    inline: bool = False,
    only_kinds: Iterable[str] | None = None,
) -> None:
    """Make ``type = "<name>"`` in ``[[sinks]]`` build sinks with ``factory``; ``policy`` and
    ``min_level`` are the defaults its tables may override. An ``inline`` type is built by
    every process and called as events are written; the others are delivered from the
    ledger (an outbox), by the processes that run things. With ``only_kinds`` (event kinds,
    not globs) its sinks take those kinds alone; a table's ``kinds`` picks among them."""
    _TYPES[name] = (factory, policy or DeliveryPolicy(), min_level)
    if only_kinds is not None:
        _ONLY[name] = tuple(only_kinds)
    else:
        _ONLY.pop(name, None)
    if inline:
        _INLINE.add(name)
    else:
        _INLINE.discard(name)


def sink_types() -> list[str]:
    return sorted(_TYPES)


def build_sinks(
    entries: Iterable[Mapping[str, Any]],
    *,
    env: Mapping[str, str] | None = None,
    which: str = "all",
    missing: list[tuple[str, str]] | None = None,
    extras: Mapping[str, Any] | None = None,
) -> list[SinkSpec]:
    """One ``SinkSpec`` per enabled ``[[sinks]]`` table, in order: ``which`` is ``all``,
    ``inline`` (built by every process) or ``outbox`` (delivered from the ledger). With
    ``missing``, a sink whose secret is not set is left out and noted there as
    ``(sink id, why)`` instead of raising ``SecretMissing``."""
    env = os.environ if env is None else env
    specs = []
    for number, table in enumerate(entries, start=1):
        if not isinstance(table, Mapping):
            raise ConfigError(f"[[sinks]] #{number} must be a table")
        label = f"[[sinks]] #{number}" + (f" ({table['name']})" if "name" in table else "")
        kind = table.get("type")
        if kind not in _TYPES:
            raise ConfigError(f"{label}: type must be one of {', '.join(sink_types())}")
        if table.get("enabled", True) is False:
            continue
        if which != "all" and (kind in _INLINE) != (which == "inline"):
            continue
        factory, policy, min_level = _TYPES[kind]
        options = SinkOptions(label, table, env)
        event_filter = _filter(label, table, min_level, _ONLY.get(kind))
        delivery = _policy(label, table, policy)
        try:
            sink = factory(options=options, policy=delivery, **(extras or {}))
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"{label}: {exc}") from None
        except SecretMissing as exc:
            if missing is None:
                raise
            missing.append((sink_id(table), str(exc)))
            continue
        options.finish()
        if "name" in table and hasattr(sink, "name"):
            sink.name = str(table["name"])
        give_up = table.get("retries") if kind not in _INLINE else None
        specs.append(
            SinkSpec(
                sink=sink,
                filter=event_filter,
                policy=delivery,
                sink_id=sink_id(table),
                give_up_after=give_up,
            )
        )
    return specs


def sink_id(table: Mapping[str, Any]) -> str:
    """A ``[[sinks]]`` table's stable id, its outbox cursors' key: its ``name``, or its type
    and a digest of what says where it delivers (not its filter or retry settings)."""
    if "name" in table:
        return str(table["name"])
    where = {
        k: v for k, v in table.items() if k not in _COMMON and k not in _POLICY and k != "username"
    }
    digest = hashlib.sha256(json.dumps(where, sort_keys=True, default=str).encode()).hexdigest()
    return f"{table.get('type')}:{digest[:12]}"


def _filter(
    label: str, table: Mapping[str, Any], default_level: str, only: tuple[str, ...] | None = None
) -> EventFilter:
    level = table.get("min_level", default_level)
    if not isinstance(level, str) or level.lower() not in LEVELS:
        raise ConfigError(f"{label}: min_level must be one of {', '.join(LEVELS)}")
    lists = {}
    for key in ("kinds", "categories"):
        value = table.get(key, [])
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{label}: {key} must be a list of strings")
        lists[key] = tuple(value)
    if only is not None:
        lists["kinds"] = _narrowed(label, lists["kinds"], only)
    return EventFilter(
        min_level=level.lower(), kinds=lists["kinds"], categories=lists["categories"]
    )


def _narrowed(label: str, patterns: tuple[str, ...], only: tuple[str, ...]) -> tuple[str, ...]:
    """The kinds of ``only`` that ``patterns`` (globs, ``!`` excludes) pick; every pattern must
    pick one, so a table cannot ask for what its type never sends (progress, say)."""
    wanted = [p for p in patterns if not p.startswith("!")]
    for pattern in wanted:
        if not any(fnmatchcase(k, pattern) for k in only):
            raise ConfigError(
                f"{label}: kinds {pattern!r} matches none of the kinds this type sends "
                f"({', '.join(only)})"
            )
    picked = tuple(
        k
        for k in only
        if (not wanted or any(fnmatchcase(k, p) for p in wanted))
        and not any(fnmatchcase(k, p[1:]) for p in patterns if p.startswith("!"))
    )
    if not picked:
        raise ConfigError(f"{label}: kinds leaves none of {', '.join(only)}")
    return picked


def _policy(label: str, table: Mapping[str, Any], default: DeliveryPolicy) -> DeliveryPolicy:
    changes: dict[str, Any] = {}
    for key, kind in _POLICY.items():
        if key not in table:
            continue
        value = table[key]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or value < 0
            or (kind is int and not isinstance(value, int))
        ):
            raise ConfigError(f"{label}: {key} must be a non-negative {kind.__name__}")
        changes[key] = kind(value)
    if changes.get("queue_size") == 0 or changes.get("batch") == 0:
        raise ConfigError(f"{label}: queue_size and batch must be at least 1")
    from dataclasses import replace

    return replace(default, **changes)


# -- the built-in types ------------------------------------------------------------------------


def _console(*, options: SinkOptions, policy: DeliveryPolicy, **future_kwargs: Any) -> Sink:
    return ConsoleSink(stream=options.get("stream", str, "stderr"))


def _webhook(*, options: SinkOptions, policy: DeliveryPolicy, **future_kwargs: Any) -> AsyncSink:
    fmt = options.get("format", str, "json")
    if fmt == "telegram":
        raise options.error('Telegram is its own type: type = "telegram", chat_id, bot_token_env')
    if fmt not in FORMATS:
        raise options.error(f"format must be one of {', '.join(FORMATS)}")
    url = options.secret("url", required=True)
    secret = options.secret("secret")
    if secret and fmt != "json":
        raise options.error("secret signs the json format only; Discord and Slack ignore it")
    username = options.get("username", str, "stageline")
    return WebhookSink(
        url=url or "",
        format=fmt,
        secret=secret,
        username=username,
        timeout=policy.timeout,
        links=future_kwargs.get("links"),
    )


def _telegram(*, options: SinkOptions, policy: DeliveryPolicy, **future_kwargs: Any) -> AsyncSink:
    if options.get("bot_token", str) is not None:
        raise options.error('keep the bot token out of the file: bot_token_env = "VARIABLE"')
    chat_id = options.get("chat_id", (int, str))
    if chat_id is None or isinstance(chat_id, bool) or chat_id == "":
        raise options.error("chat_id is required (the chat, group or @channel to post to)")
    var = options.get("bot_token_env", str)
    if not var:
        raise options.error("bot_token_env is required (the variable holding the bot token)")
    token = options.env.get(var)
    if not token:
        raise SecretMissing(
            f"{options.label}: environment variable {var} (from bot_token_env) is not set"
        )
    links = future_kwargs.get("links")
    return TelegramSink(
        bot_token=token,
        chat_id=chat_id,
        api_url=options.get("api_url", str, DEFAULT_API_URL),
        public_url=future_kwargs.get("public_url") or getattr(links, "public_url", None),
        ledger=future_kwargs.get("ledger"),
        timeout=policy.timeout,
    )


def _otel(*, options: SinkOptions, policy: DeliveryPolicy, **future_kwargs: Any) -> AsyncSink:
    headers = options.get("headers", dict, {})
    if not all(isinstance(v, str) for v in headers.values()):
        raise options.error("headers must map names to strings")
    return OtelSink(
        endpoint=options.get("endpoint", str),
        service_name=options.get("service_name", str, "stageline"),
        headers=headers,
    )


register_sink_type("console", _console, min_level="info", inline=True)
# Webhooks linger a little so a run's burst of events becomes a few messages (Discord allows
# about 5 requests per 2 s per webhook); spans are cheap to make, so OTel takes big batches.
_WEBHOOK_POLICY = DeliveryPolicy(linger=0.25, batch=20, retries=3, backoff=1.0, timeout=5.0)
_OTEL_POLICY = DeliveryPolicy(queue_size=10_000, batch=200, retries=0, timeout=30.0)
register_sink_type("webhook", _webhook, min_level="info", policy=_WEBHOOK_POLICY)
register_sink_type("otel", _otel, min_level="debug", policy=_OTEL_POLICY)
# The critical channel: a message per run's batch (no linger: it is urgent), retried for good.
_TELEGRAM_POLICY = DeliveryPolicy(batch=20, retries=3, backoff=1.0, timeout=10.0)
register_sink_type(
    "telegram", _telegram, min_level="info", policy=_TELEGRAM_POLICY, only_kinds=CRITICAL_KINDS
)

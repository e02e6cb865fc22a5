"""Configuration: ``stageline.toml`` at the project root, overridden by ``STAGELINE_*``.

The file is checked against a schema, one pydantic model per section (``ConfigFile`` for the
top-level keys, ``ServerConfig`` for ``[server]``, ``SlackConfig`` for ``[slack]``,
``GitHubConfig`` for ``[github]``): a wrong
type, an unknown key or a value out of range is a ``ConfigError`` naming the file, the key and
its line. ``STAGELINE_*`` variables go through the same models: ``STAGELINE_<KEY>`` for a
top-level key, ``STAGELINE_<SECTION>_<KEY>`` for a key of a section that lists it. A new
section is one more model and one more field of ``ConfigFile`` (and of ``Settings``).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from stageline.errors import ConfigError

__all__ = [
    "ConfigFile",
    "GitHubConfig",
    "GitHubRepositoryConfig",
    "InterruptsConfig",
    "ServerConfig",
    "Settings",
    "SlackConfig",
    "load_settings",
]

CONFIG_FILE = "stageline.toml"
LANGGRAPH_JSON = "langgraph.json"
"""LangGraph's project file: a folder holding it (or stageline.toml) is a project root."""
ENV_PREFIX = "STAGELINE_"
_DURATION = r"\s*\d+(?:\.\d+)?\s*[smhdw]?\s*"
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class ServerConfig(BaseModel):
    """``[server]``: limits of the HTTP API, used by ``stageline serve``."""

    model_config = _STRICT

    max_body_bytes: int = Field(default=1_000_000, gt=0)
    """The largest request body the API reads, in bytes."""
    workers: int = Field(default=1, ge=1, le=64)
    """Server processes behind the one port, sharing the database (``--workers``)."""


class SlackConfig(BaseModel):
    """``[slack]``: the Slack app, used by ``stageline serve``. Secrets are named by the
    environment variables that hold them, never written in the file."""

    model_config = _STRICT

    bot_token_env: str | None = None
    """The variable holding the bot token (``xoxb-...``)."""
    signing_secret_env: str | None = None
    """The variable holding the signing secret that requests are checked with."""
    channel: str | None = None
    """Where gates and questions are posted."""
    deciders: list[str] = Field(default_factory=list)
    """Slack user ids allowed to decide; empty: anyone in the channel."""
    api_url: str | None = None
    """Slack's Web API base URL (a test server in tests)."""
    intake_command: str | None = None
    """The slash command that starts runs, e.g. ``/stageline``."""
    intake_template: str | None = None
    """The template such a command starts."""
    intake_input: str | None = None
    """The input the command's text goes to."""
    intake_defaults: dict[str, Any] = Field(default_factory=dict)
    """Inputs the intake command adds to its text (such as sdlc's ``repo``, so it builds)."""
    channel_defaults: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Per Slack channel id: inputs over ``intake_defaults`` for commands typed there."""


def _check_duration(value: str | float) -> str | float:
    text = str(value)
    if not re.fullmatch(_DURATION, text) or not float(re.sub(r"[smhdw\s]", "", text)) > 0:
        raise ValueError("must be a duration such as 90s, 15m, 2h or 1d (more than 0)")
    return value


class GitHubRepositoryConfig(BaseModel):
    """``[github.repositories."OWNER/NAME"]``: one repository stageline may touch."""

    model_config = _STRICT

    checkout: str
    """A local clone whose ``origin`` remote is the repository (relative: to the project)."""
    base: str = "main"
    """The branch pull requests go to."""
    workflow: str | None = None
    """The workflow file (``ci.yml``) to dispatch; unset: wait for the pushed commit's checks."""
    merge: bool = False
    """Whether the apply gate may also merge (squash) the pull request."""


class GitHubConfig(BaseModel):
    """``[github]``: GitHub as the forge of sdlc runs. Secrets are named by the environment
    variables that hold them, never written in the file."""

    model_config = _STRICT

    api_url: str = Field(default="https://api.github.com", pattern=r"^https?://\S+$")
    """GitHub's REST API (GitHub Enterprise: ``https://HOST/api/v3``)."""
    token_env: str = "GITHUB_TOKEN"
    """The variable holding the token (a fine-grained or classic personal access token)."""
    app_id: int | None = Field(default=None, gt=0)
    """A GitHub App to sign in as, instead of a token (with ``installation_id``)."""
    installation_id: int | None = Field(default=None, gt=0)
    """The App's installation on the repositories' account."""
    app_private_key_env: str = "GITHUB_APP_PRIVATE_KEY"
    """The variable holding the App's private key (PEM)."""
    webhook_secret_env: str = "GITHUB_WEBHOOK_SECRET"
    """The variable holding the webhook secret; unset: the webhook route answers 404."""
    intake_label: str = Field(default="stageline", min_length=1)
    """An issue with this label starts sdlc for its repository."""
    intake_template: str = Field(default="sdlc", min_length=1)
    """The template an issue starts (a team's own variant of sdlc)."""
    poll_issues: bool = False
    """Whether ``stageline serve`` also polls for labelled issues (without webhooks)."""
    poll_interval: str | float = "30s"
    """How often to poll (issues; CI starts there and backs off up to 10m)."""
    ci_timeout: str | float = "2h"
    """How long a run waits for CI to report; then CI counts as failed (``timed_out``)."""
    repositories: dict[str, GitHubRepositoryConfig] = Field(default_factory=dict)
    """``OWNER/NAME`` -> its settings: the only repositories stageline touches."""

    @field_validator("poll_interval", "ci_timeout")
    @classmethod
    def _a_duration(cls, value: str | float) -> str | float:
        return _check_duration(value)

    @field_validator("repositories")
    @classmethod
    def _names(cls, value: dict[str, GitHubRepositoryConfig]) -> dict[str, GitHubRepositoryConfig]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+", name):
                raise ValueError(f"{name!r} is not a repository name such as 'acme/app'")
        return value

    @model_validator(mode="after")
    def _app_and_installation(self) -> GitHubConfig:
        if (self.app_id is None) != (self.installation_id is None):
            raise ValueError(
                "app_id and installation_id go together: a GitHub App signs in to one "
                "installation (or set neither, and use token_env)"
            )
        return self

    @property
    def enabled(self) -> bool:
        """Whether any repository is configured (else stageline never calls GitHub)."""
        return bool(self.repositories)


class InterruptsConfig(BaseModel):
    """``[interrupts]``: how long a graph's own ``interrupt()`` waits for a person, and what
    the sweeper does then (``park``: the run is parked, its wait still open; ``fail``). A
    run's ``deadlines`` for the node go over ``deadline``."""

    model_config = _STRICT

    deadline: str | float = "24h"
    """Seconds, or a duration such as ``90s``, ``15m``, ``2h``, ``1d``."""
    on_deadline: Literal["park", "fail"] = "park"

    @field_validator("deadline")
    @classmethod
    def _a_duration(cls, value: str | float) -> str | float:
        return _check_duration(value)


class ConfigFile(BaseModel):
    """The top-level keys of ``stageline.toml`` (or of its ``[stageline]`` table)."""

    model_config = _STRICT

    home: str = ".stageline"
    database_url: str | None = None
    model: str | None = None
    template_dirs: list[str] = Field(default_factory=lambda: ["templates"])
    langgraph_json: str = "langgraph.json"
    """The project's LangGraph configuration, whose ``graphs`` are templates too."""
    lease_ttl: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    sqlite_synchronous: Literal["full", "normal"] = "full"
    """SQLite's ``synchronous`` level: ``full`` syncs every commit to disk; ``normal`` (WAL)
    survives a killed process but may lose the last commits to a power loss or OS crash."""
    sinks: list[dict[str, Any]] = Field(default_factory=list)
    """``[[sinks]]`` tables; their own keys are checked when the sinks are built."""
    sink_exit_timeout: float = Field(default=1.5, ge=0, allow_inf_nan=False)
    """Seconds a process that exits waits for its sinks; what is left waits in the ledger."""
    stage_modules: list[str] = Field(default_factory=list)
    """Modules that register stages by name, imported when a YAML template needs one."""
    services: str | None = Field(default=None, pattern=r"^[\w.]+:[\w.]+$")
    """``module:callable`` returning the services every process that advances runs gives its
    stages (CLI, workers, ``stageline serve``)."""
    public_url: str | None = None
    """The URL people reach the server at (links in chat messages), used by
    ``stageline serve``."""
    server: ServerConfig = Field(default_factory=ServerConfig)
    slack: SlackConfig = Field(default_factory=SlackConfig)
    github: GitHubConfig = Field(default_factory=GitHubConfig)
    interrupts: InterruptsConfig = Field(default_factory=InterruptsConfig)


_ENV_KEYS = (
    "home",
    "database_url",
    "model",
    "lease_ttl",
    "sqlite_synchronous",
    "services",
    "public_url",
    "sink_exit_timeout",
)
"""Keys a ``STAGELINE_<KEY>`` variable overrides."""
_ENV_SECTIONS = {"interrupts": ("deadline", "on_deadline"), "server": ("workers",)}
"""Section -> its keys a ``STAGELINE_<SECTION>_<KEY>`` variable overrides."""


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Resolved configuration for one process."""

    root: Path
    """Project root: where stageline.toml is, or the working directory."""
    home: Path
    """Folder for the SQLite file and each run's output (default ``.stageline``)."""
    database_url: str
    """``sqlite:///PATH`` (default, under ``home``) or ``postgresql://...``."""
    model: str | None = None
    """A LangChain ``init_chat_model`` spec such as ``openai:gpt-4o``; None means offline."""
    template_dirs: tuple[Path, ...] = ()
    """The templates folders, then the project's ``langgraph.json`` where there is one."""
    lease_ttl: float = 30.0
    """Seconds a run's lease lives without renewal; it is renewed every third of that."""
    sqlite_synchronous: str = "full"
    """SQLite's ``synchronous`` level (``database_url`` carries it as ``?synchronous=``)."""
    sinks: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    sink_exit_timeout: float = 1.5
    """Seconds a process that exits waits for its sinks; what is left waits in the ledger."""
    stage_modules: tuple[str, ...] = ()
    """Modules that register stages by name (``@stage(name=...)``), imported when a YAML
    template names a stage not registered yet (as are the templates folders' Python files)."""
    services: str | None = None
    """``module:callable`` making the services every advancing process gives its stages."""
    public_url: str | None = None
    """The server's public URL (``stageline serve``)."""
    server: ServerConfig = field(default_factory=ServerConfig)
    slack: SlackConfig = field(default_factory=SlackConfig)
    github: GitHubConfig = field(default_factory=GitHubConfig)
    interrupts: InterruptsConfig = field(default_factory=InterruptsConfig)

    def run_dir(self, run_id: str) -> Path:
        """The run's output folder (posts, transcripts); ``run_id`` must be a valid run id."""
        from stageline.names import check_run_id, path_under

        return path_under(self.home / "runs", check_run_id(run_id))


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file() or (folder / LANGGRAPH_JSON).is_file():
            return folder
    return start


def _header(line: str) -> str | None:
    """The dotted name of a ``[table]`` header line, quotes and ``stageline.`` left out."""
    found = re.match(r"^\s*\[\[?([^\]]+)\]\]?\s*(#.*)?$", line)
    if found is None:
        return None
    name = re.sub(r"\s*\.\s*", ".", found.group(1).strip()).replace('"', "").replace("'", "")
    return name.removeprefix("stageline.")


def _line_of(text: str, loc: tuple[Any, ...]) -> int | None:
    """The line of the key at ``loc`` (``("server", "max_body_bytes")``) in the TOML text."""
    lines = text.splitlines()
    start = 0
    names = [str(part) for part in loc if isinstance(part, str)]
    if not names:
        return None
    dotted = ".".join(names[:-1])  # [github.repositories."acme/app"]
    whole = next((n for n, line in enumerate(lines) if _header(line) == dotted), None)
    if whole is not None:
        start = whole + 1
    for table in names[:-1] if whole is None else ():  # [server], [stageline.server]
        header = re.compile(rf"^\s*\[\[?\s*(stageline\.)?{re.escape(table)}\s*\]\]?")
        found = next((n for n in range(start, len(lines)) if header.match(lines[n])), None)
        if found is not None:
            start = found + 1
    key = re.escape(names[-1])
    pattern = re.compile(rf"^\s*(\"?{key}\"?\s*=|\[\[?\s*(stageline\.)?{key}\s*[\].])")
    for number in range(start, len(lines)):
        if pattern.match(lines[number]):
            return number + 1
    return None


def _message(error: Any, model: type[BaseModel]) -> str:
    """One pydantic error in the words of a config file: what is wrong with the key."""
    loc = tuple(error["loc"])
    if error["type"] == "extra_forbidden":
        known: list[str] = list(model.model_fields)
        current: Any = model
        for part in loc[:-1]:
            if get_origin(current) is dict:  # a table of tables: the value's model
                current = get_args(current)[1]
            elif isinstance(current, type) and issubclass(current, BaseModel):
                sub = current.model_fields.get(str(part))
                current = sub.annotation if sub is not None else None
            if isinstance(current, type) and issubclass(current, BaseModel):
                known = list(current.model_fields)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(known)}"
        return f"unknown key{hint}"
    value = error.get("input")
    shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
    if error["type"] == "string_pattern_mismatch" and loc[-1] == "api_url":
        return f"must be an http(s) URL such as 'https://api.github.com' (got {shown})"
    if error["type"] == "string_pattern_mismatch":  # services
        return f"must be 'module:callable', e.g. 'myapp.services:make' (got {shown})"
    if error["type"] == "value_error":  # a validator's own words
        return f"{error['ctx']['error']!s} (got {shown})"
    return f"{error['msg'][0].lower()}{error['msg'][1:]} (got {shown})"


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in loc).replace(".[", "[")


def _validate_file(path: Path, text: str, data: dict[str, Any]) -> ConfigFile:
    try:
        return ConfigFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = tuple(first["loc"])
        line = _line_of(text, loc)
        where = f"{path}:{line}" if line else str(path)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise ConfigError(f"{where}: {_key(loc)}: {_message(first, ConfigFile)}{more}") from None


def _apply_env(base: ConfigFile, env: dict[str, str]) -> ConfigFile:
    """``base`` with each set ``STAGELINE_<KEY>`` (and ``STAGELINE_<SECTION>_<KEY>``) over
    it, checked by the same model."""
    given: dict[str, Any] = {
        k: env[ENV_PREFIX + k.upper()] for k in _ENV_KEYS if env.get(ENV_PREFIX + k.upper())
    }
    for section, keys in _ENV_SECTIONS.items():
        names = {k: f"{ENV_PREFIX}{section.upper()}_{k.upper()}" for k in keys}
        if found := {k: env[name] for k, name in names.items() if env.get(name)}:
            given[section] = {**getattr(base, section).model_dump(), **found}
    if not given:
        return base
    try:
        checked = ConfigFile.model_validate(given, strict=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ENV_PREFIX + "_".join(str(p) for p in first["loc"][:2]).upper()
        raise ConfigError(f"environment variable {name}: {_message(first, ConfigFile)}") from None
    return base.model_copy(update={k: getattr(checked, k) for k in given})


def _read(path: Path) -> ConfigFile:
    if not path.is_file():
        return ConfigFile()
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    table = data.pop("stageline", None)
    if table is not None:
        if not isinstance(table, dict):
            raise ConfigError(
                f"{path}:{_line_of(text, ('stageline',))}: stageline must be a table ([stageline])"
            )
        data = {**data, **table}
    return _validate_file(path, text, data)


def load_settings(cwd: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read stageline.toml (searching upward from ``cwd``) and apply ``STAGELINE_*``."""
    env = dict(os.environ if env is None else env)
    root = _find_root((cwd or Path.cwd()).resolve())
    conf = _apply_env(_read(root / CONFIG_FILE), env)
    home = Path(conf.home)
    if not home.is_absolute():
        home = root / home
    url = with_sqlite_synchronous(
        conf.database_url or f"sqlite:///{home / 'stageline.db'}", conf.sqlite_synchronous
    )
    return Settings(
        root=root,
        home=home,
        database_url=url,
        model=conf.model if conf.model and conf.model != "offline" else None,
        template_dirs=(
            *(root / d for d in conf.template_dirs),
            *([root / conf.langgraph_json] if (root / conf.langgraph_json).is_file() else []),
        ),
        lease_ttl=conf.lease_ttl,
        sqlite_synchronous=conf.sqlite_synchronous,
        sinks=tuple(conf.sinks),
        sink_exit_timeout=conf.sink_exit_timeout,
        stage_modules=tuple(conf.stage_modules),
        services=conf.services,
        public_url=conf.public_url,
        server=conf.server,
        slack=conf.slack,
        github=conf.github,
        interrupts=conf.interrupts,
    )


def with_sqlite_synchronous(url: str, level: str) -> str:
    """A SQLite URL with ``?synchronous=`` set to ``level`` unless it sets it already (the URL
    wins); ``full``, the default, leaves it as it is. Other URLs are returned unchanged."""
    if level == "full" or not url.startswith("sqlite") or "synchronous=" in url.partition("?")[2]:
        return url
    return f"{url}{'&' if '?' in url else '?'}synchronous={level}"


def with_overrides(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with some fields changed."""
    return replace(settings, **changes)

"""Configuration: ``stageline.toml`` at the project root, overridden by ``STAGELINE_*``."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stageline.errors import ConfigError

__all__ = ["Settings", "load_settings"]

CONFIG_FILE = "stageline.toml"


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
    lease_ttl: float = 30.0
    """Seconds a run's lease lives without renewal; it is renewed every third of that."""
    sinks: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    services: str | None = None
    """``module:callable`` making the services every advancing process gives its stages."""

    def run_dir(self, run_id: str) -> Path:
        """The run's output folder (posts, transcripts); ``run_id`` must be a valid run id."""
        from stageline.names import check_run_id, path_under

        return path_under(self.home / "runs", check_run_id(run_id))


def _find_root(start: Path) -> Path:
    for folder in (start, *start.parents):
        if (folder / CONFIG_FILE).is_file():
            return folder
    return start


def load_settings(cwd: Path | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read stageline.toml (searching upward from ``cwd``) and apply ``STAGELINE_*``."""
    env = dict(os.environ if env is None else env)
    root = _find_root((cwd or Path.cwd()).resolve())
    data: dict[str, Any] = {}
    path = root / CONFIG_FILE
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    section = data.get("stageline", data)
    home = Path(env.get("STAGELINE_HOME") or section.get("home", ".stageline"))
    if not home.is_absolute():
        home = root / home
    url = env.get("STAGELINE_DATABASE_URL") or section.get("database_url")
    if not url:
        url = f"sqlite:///{home / 'stageline.db'}"
    dirs = section.get("template_dirs", ["templates"])
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        raise ConfigError(f"{path}: template_dirs must be a list of folder names")
    try:
        ttl = float(env.get("STAGELINE_LEASE_TTL") or section.get("lease_ttl", 30.0))
    except ValueError as exc:
        raise ConfigError(f"STAGELINE_LEASE_TTL / lease_ttl must be a number: {exc}") from exc
    model = env.get("STAGELINE_MODEL") or section.get("model") or None
    sinks = data.get("sinks", section.get("sinks", []))
    services = env.get("STAGELINE_SERVICES") or section.get("services") or None
    if services is not None and not isinstance(services, str):
        raise ConfigError(f"{path}: services must be a string 'module:callable'")
    settings = Settings(
        root=root,
        home=home,
        database_url=url,
        model=model if model != "offline" else None,
        template_dirs=tuple(root / d for d in dirs),
        lease_ttl=ttl,
        sinks=tuple(sinks),
        services=services,
    )
    return settings


def with_overrides(settings: Settings, **changes: Any) -> Settings:
    """A copy of ``settings`` with some fields changed."""
    return replace(settings, **changes)

"""``load_settings`` for the commands, importing the configuration schema (pydantic) only when
a command runs: ``stageline --help`` never needs it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stageline.config import Settings

__all__ = ["load_settings"]


def load_settings() -> Settings:
    """``stageline.config.load_settings()``: stageline.toml and ``STAGELINE_*``."""
    from stageline.config import load_settings as load

    return load()

"""Shared fixtures: settings for a temporary project, and ledger backends by URL."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings, load_settings
from stageline.ledger import Backend, open_backend

BACKEND_URLS: dict[str, Callable[[Path], str]] = {
    "memory": lambda tmp: "memory://",
    "sqlite": lambda tmp: f"sqlite:///{tmp / 'ledger.db'}",
}
"""Every ledger backend the conformance suite runs against: add a URL, add a backend."""

if os.environ.get("STAGELINE_TEST_POSTGRES_URL"):
    BACKEND_URLS["postgres"] = lambda tmp: os.environ["STAGELINE_TEST_POSTGRES_URL"]


def make_settings(tmp_path: Path, url: str | None = None) -> Settings:
    """Settings for a project in ``tmp_path``, blind to the caller's environment."""
    home = tmp_path / ".stageline"
    env = {"STAGELINE_HOME": str(home)}
    env["STAGELINE_DATABASE_URL"] = url or f"sqlite:///{home / 'stageline.db'}"
    return load_settings(cwd=tmp_path, env=env)


@pytest.fixture
def settings_for(tmp_path: Path) -> Callable[[str], Settings]:
    """Settings for the project in ``tmp_path`` over the given database URL."""
    return lambda url: make_settings(tmp_path, url)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'stageline.db'}"


@pytest.fixture
def memory_settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, "memory://")


@pytest.fixture
def sqlite_settings(tmp_path: Path, sqlite_url: str) -> Settings:
    return make_settings(tmp_path, sqlite_url)


@pytest.fixture(params=sorted(BACKEND_URLS))
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return BACKEND_URLS[request.param](tmp_path)


@pytest.fixture
async def backend(backend_url: str) -> AsyncIterator[Backend]:
    opened = await open_backend(backend_url, checkpoint_serde())
    try:
        yield opened
    finally:
        await opened.aclose()

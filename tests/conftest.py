"""Shared fixtures: settings for a temporary project, and ledger backends by URL.

Postgres: ``STAGELINE_TEST_POSTGRES`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
names a server and a database to connect to for administration. A template database is
migrated once per session and each test gets a fresh ``CREATE DATABASE ... TEMPLATE`` copy.
Where ``CI=true`` an unreachable server fails the tests; elsewhere they are skipped.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from forge_fixtures import fake_github, git_remote  # noqa: F401 (fixtures: GitHub's side)
from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings, load_settings
from stageline.ledger import Backend, open_backend

pytest_plugins = ["suite_guards"]  # xdist workers, serial tests, a leak fails its own test

POSTGRES_ADMIN_URL = os.environ.get(
    "STAGELINE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test"
)
"""Where the Postgres tests make their databases (they never touch its own tables)."""

BACKEND_URLS: dict[str, Callable[[pytest.FixtureRequest, Path], str]] = {
    "memory": lambda request, tmp: "memory://",
    "sqlite": lambda request, tmp: f"sqlite:///{tmp / 'ledger.db'}",
    "postgres": lambda request, tmp: request.getfixturevalue("postgres_url"),
}
"""Every ledger backend the conformance suite runs against: add a URL, add a backend."""


def postgres_db_url(name: str) -> str:
    """The admin URL pointed at database ``name``."""
    return urlsplit(POSTGRES_ADMIN_URL)._replace(path=f"/{name}").geturl()


def _admin_connection() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True, connect_timeout=5)


def _drop_database(name: str) -> None:
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _test_db_name(kind: str) -> str:
    """``stageline_<kind>_<pid>_<hex>``: the pid lets a later session drop what a dead one left."""
    return f"stageline_{kind}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def _drop_leftovers(admin: psycopg.Connection[tuple[object, ...]]) -> None:
    """Drop test databases of sessions that died on this machine (a local server only)."""
    host = urlsplit(POSTGRES_ADMIN_URL).hostname or "localhost"
    if host not in ("127.0.0.1", "localhost", "::1"):
        return
    for (name,) in admin.execute(
        "SELECT datname FROM pg_database WHERE datname ~ '^stageline_(tpl|t|e)_[0-9]+_'"
    ).fetchall():
        pid = int(str(name).split("_")[2])
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except PermissionError:
            pass


@pytest.fixture(scope="session")
def postgres_template() -> Iterator[str]:
    """A database with stageline's tables, made once per session."""
    try:
        admin = _admin_connection()
    except psycopg.Error as exc:
        why = f"Postgres at {POSTGRES_ADMIN_URL} is unreachable ({exc}".splitlines()[0] + ")"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; the Postgres tests must run where CI=true")
        pytest.skip(f"{why}; set STAGELINE_TEST_POSTGRES to run the Postgres tests")
    name = _test_db_name("tpl")
    with admin:
        _drop_leftovers(admin)
        admin.execute(f'CREATE DATABASE "{name}"')

    async def migrate() -> None:
        opened = await open_backend(postgres_db_url(name), checkpoint_serde())
        await opened.aclose()

    try:
        # In a thread of its own: it may first be asked for while a test's browser (the sync
        # API of Playwright) runs an event loop in this one.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, migrate()).result()
        yield name
    finally:
        _drop_database(name)


@pytest.fixture
def postgres_admin(postgres_template: str) -> Callable[[], psycopg.Connection[tuple[object, ...]]]:
    """Opens an autocommit connection to the Postgres server, for what a test does as admin."""
    return _admin_connection


def _fresh_database(template: str) -> Iterator[str]:
    name = _test_db_name("t")
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    try:
        yield postgres_db_url(name)
    finally:
        _drop_database(name)


@pytest.fixture
def postgres_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database of its own for one test."""
    yield from _fresh_database(postgres_template)


@pytest.fixture(scope="module")
def postgres_module_url(postgres_template: str) -> Iterator[str]:
    """A fresh, migrated database shared by the tests of one module (one server over it)."""
    yield from _fresh_database(postgres_template)


@pytest.fixture
def postgres_empty_url(postgres_template: str) -> Iterator[str]:
    """A fresh database with no tables at all."""
    name = _test_db_name("e")
    with _admin_connection() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield postgres_db_url(name)
    finally:
        _drop_database(name)


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


@pytest.fixture
def postgres_settings(tmp_path: Path, postgres_url: str) -> Settings:
    return make_settings(tmp_path, postgres_url)


@pytest.fixture(params=sorted(BACKEND_URLS))
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return BACKEND_URLS[request.param](request, tmp_path)


@pytest.fixture(params=sorted(k for k in BACKEND_URLS if k != "memory"))
def shared_backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A backend several connections (or processes) can share: every one but memory://."""
    return BACKEND_URLS[request.param](request, tmp_path)


@pytest.fixture
async def backend(backend_url: str) -> AsyncIterator[Backend]:
    opened = await open_backend(backend_url, checkpoint_serde())
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def shared_backend(shared_backend_url: str) -> AsyncIterator[Backend]:
    """``backend`` on a database other connections can open too (SQLite file, Postgres)."""
    opened = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        yield opened
    finally:
        await opened.aclose()

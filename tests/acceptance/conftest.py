"""What the acceptance suites share: the ``stageline`` command as a child process, and the
helpers that queue runs for worker processes and read what became of them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import _procs
import psycopg
import pytest
from fake_slack import FakeSlack

from dashboard_browser import chromium, signed_in, watch  # noqa: F401 (fixtures: a browser)
from server_fixtures import serve_project, server  # noqa: F401 (fixtures: a real `stageline serve`)

CLI = [sys.executable, "-m", "stageline.cli"]
"""``stageline`` as a child process of this interpreter."""

FIXTURES = Path(__file__).parent.parent / "fixtures"

Cli = Callable[..., subprocess.CompletedProcess[str]]


def stageline_env(home: Path, **extra: str) -> dict[str, str]:
    """A child's environment (``_procs.cli_env``: the one implementation)."""
    return _procs.cli_env(home, **extra)


def run_stageline(
    cwd: Path, env: dict[str, str], *args: str, timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``stageline ARGS`` in ``cwd`` (``_procs.cli``); a traceback on stderr fails the test."""
    done = _procs.cli(list(args), cwd, env, timeout=timeout, stdin=stdin)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """The environment of ``cli``: the project is ``tmp_path``, its home ``tmp_path/home``."""
    return stageline_env(tmp_path / "home")


@pytest.fixture
def cli_process(tmp_path: Path, cli_env: dict[str, str]) -> Cli:
    """Runs ``stageline ARGS`` in ``tmp_path`` as a user would: a real subprocess.

    ``db=URL`` picks the database (default: the SQLite file under the home), ``timeout=``
    bounds the command, ``stdin=`` feeds it, and other keywords are environment variables.
    """

    def run(
        *args: str,
        db: str | None = None,
        timeout: float = 180,
        stdin: str | None = None,
        **extra: str,
    ) -> subprocess.CompletedProcess[str]:
        env = {**cli_env, **extra}
        if db:
            env["STAGELINE_DATABASE_URL"] = db
        return run_stageline(tmp_path, env, *args, timeout=timeout, stdin=stdin)

    return run


@pytest.fixture
def cli(cli_process: Cli) -> Cli:
    """``cli_process``, under the name most suites use (a suite may override it)."""
    return cli_process


@pytest.fixture
def flaky_template() -> str:
    """A template whose second node fails until ``ok.flag`` exists in the working folder."""
    return (FIXTURES / "flaky.py").read_text()


@pytest.fixture
def blog_waiting(cli: Cli) -> str:
    """Run ``blog1`` of ``blog_post``, waiting at the editor's gate."""
    done = cli("run", "blog_post", "-i", "topic=durable pipelines", "--run-id", "blog1")
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    return "blog1"


# -- worker processes ------------------------------------------------------------------------


@pytest.fixture
def worker_env(tmp_path: Path) -> Callable[..., dict[str, str]]:
    """``worker_env(url, **extra)``: the environment of worker processes over ``url``, writing
    their trail to ``tmp_path/trail.txt`` (see ``tests/fixtures/worker_nodes.py``), with
    retention off so no run is pruned mid-test."""

    def make(url: str, **extra: str) -> dict[str, str]:
        return stageline_env(
            tmp_path / ".stageline",
            STAGELINE_DATABASE_URL=url,
            STAGELINE_TEST_TRAIL=str(tmp_path / "trail.txt"),
            STAGELINE_RETENTION="off",
            **extra,
        )

    return make


async def _queue_runs(
    env: dict[str, str], ids: list[str], template: Path = FIXTURES / "worker_nodes.py"
) -> list[str]:
    from stageline.config import load_settings
    from stageline.runner import Runner
    from stageline.worker import defer_run, ensure_queue_schema, queue_app

    settings = load_settings(cwd=Path(env["STAGELINE_HOME"]).parent, env=env)
    await ensure_queue_schema(settings.database_url)
    app = queue_app(settings.database_url)
    async with Runner.open(settings) as runner, app.open_async():
        for i, run_id in enumerate(ids):
            await runner.create(str(template), {"seed": i}, run_id=run_id)
            await defer_run(app, run_id)
    return ids


@pytest.fixture
def queue_runs() -> Callable[..., Awaitable[list[str]]]:
    """``await queue_runs(env, ids)``: create runs of the worker fixture template (seed = index)
    and put each on the job queue for ``stageline worker`` processes."""
    return _queue_runs


def _run_statuses(url: str) -> dict[str, str]:
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
            rows = conn.execute("SELECT run_id, status FROM stageline_runs").fetchall()
    except psycopg.OperationalError:
        return {}  # the server is (still) down
    return {str(r): str(s) for r, s in rows}


def _unfinished(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT run_id, status, failure_phase, error, lease_holder "
            "FROM stageline_runs WHERE status <> 'succeeded'"
        ).fetchall()


@pytest.fixture
def run_statuses() -> Callable[[str], dict[str, str]]:
    """Run id -> status in the Postgres database at the URL ({} while the server is down)."""
    return _run_statuses


@pytest.fixture
def unfinished_runs() -> Callable[[str], list[tuple[object, ...]]]:
    """The runs at the URL that did not succeed, with why, for an assertion's message."""
    return _unfinished


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    """A fake Slack Web API on loopback (the chat tests); a module may keep one for longer."""
    fake = FakeSlack()
    yield fake
    fake.close()

"""A real ``stageline serve`` for tests: a temporary project, tokens made with the CLI, httpx.

Use the fixtures (``tests/acceptance/conftest.py`` registers them):

- ``server``: a server over a SQLite project, with tokens ``server.tokens["read"|"decide"|
  "admin"]`` (names ``reader``, ``decider``, ``admin``), ``server.client(scope)`` an httpx
  client carrying that token, ``server.cli(...)`` the CLI in the same project, ``server.kill()``
  and ``server.start()`` for restarts.
- ``serve_project``: a factory, ``serve_project(database_url=None, templates=(...), env={})``,
  for a server over Postgres, with extra template files or environment.

Templates: files from ``tests/fixtures`` named in ``templates`` are copied into the project's
``templates/`` folder, so they are found by name (``ten_nodes``, ``blocking``...).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SCOPES = {"read": "reader", "decide": "decider", "admin": "admin"}
"""The tokens every test server gets: scope -> token name."""
START_TIMEOUT = 60.0
HTTP_TIMEOUT = 60.0
"""How long a test's request may wait: httpx's default (5 s) fails requests on a loaded machine."""


def http_get(url: str, **options: Any) -> httpx.Response:
    """``httpx.get`` with the suite's timeout."""
    options.setdefault("timeout", HTTP_TIMEOUT)
    return httpx.get(url, **options)


def http_post(url: str, **options: Any) -> httpx.Response:
    """``httpx.post`` with the suite's timeout."""
    options.setdefault("timeout", HTTP_TIMEOUT)
    return httpx.post(url, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """A ``stageline serve`` subprocess over a project folder."""

    project: Path
    env: dict[str, str]
    port: int = field(default_factory=free_port)
    tokens: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cli(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """``stageline ARGS`` in the project, with the server's environment."""
        done = subprocess.run(
            [sys.executable, "-m", "stageline.cli", *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"stageline {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout}\n{done.stderr}"
            )
        return done

    def create_token(self, name: str, scope: str) -> str:
        """A token made by ``stageline token create`` (its last line of output)."""
        out = self.cli("token", "create", name, "--scope", scope).stdout
        return out.strip().splitlines()[-1]

    def headers(self, scope: str | None = "admin") -> dict[str, str]:
        return {} if scope is None else {"Authorization": f"Bearer {self.tokens[scope]}"}

    def client(self, scope: str | None = "admin", **options: Any) -> httpx.Client:
        """An httpx client for the server, with the token of ``scope`` (None: no token)."""
        options.setdefault("timeout", HTTP_TIMEOUT)
        return httpx.Client(base_url=self.url, headers=self.headers(scope), **options)

    def start(self, *, wait: bool = True) -> Server:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.log_path = self.project / f"serve-{int(time.time() * 1000)}.log"
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "stageline.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                ],
                cwd=self.project,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        assert self.proc is not None
        wait_answering(self.url, self.proc, self.log, "stageline serve", timeout)

    def kill(self, sig: int = signal.SIGKILL, timeout: float = 30) -> int:
        """Send ``sig`` (SIGKILL by default) and wait for the process to end."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout)

    def stop(self) -> int:
        """SIGTERM: a graceful shutdown (runs in flight drain)."""
        return self.kill(signal.SIGTERM)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


def wait_answering(
    url: str,
    proc: subprocess.Popen[bytes],
    log: Callable[[], str],
    what: str,
    timeout: float = START_TIMEOUT,
) -> None:
    """Until ``url``/ok answers 200; the server's ``log()`` in the failure if it exits or not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{what} exited {proc.returncode}:\n{log()}")
        try:
            if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{what} did not answer /ok in {timeout}s:\n{log()}")


def make_project(
    root: Path,
    *,
    database_url: str | None = None,
    templates: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> Server:
    """A project folder with the named fixture templates and tokens of every scope."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "templates").mkdir(exist_ok=True)
    for name in templates:
        shutil.copy(FIXTURES / name, root / "templates" / Path(name).name)
        for shared in FIXTURES.glob("_*.py"):  # what it loads beside itself (_trail_nodes.py)
            if shared.name in (FIXTURES / name).read_text():
                shutil.copy(shared, root / "templates" / shared.name)
    home = root / ".stageline"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    child_env.update(
        {
            "STAGELINE_HOME": str(home),
            "STAGELINE_DATABASE_URL": database_url or f"sqlite:///{home / 'stageline.db'}",
            "PYTHONPATH": os.pathsep.join(
                [
                    str(Path(__file__).parents[1] / "src"),
                    *filter(None, [os.environ.get("PYTHONPATH")]),
                ]
            ),
            "STAGELINE_LEASE_TTL": "5",
        }
    )
    child_env.update(env or {})
    server = Server(project=root, env=child_env)
    first, *rest = SCOPES.items()
    server.tokens[first[0]] = server.create_token(first[1], first[0])  # sets the database up
    # The others at once: each CLI process takes seconds to start on a busy machine.
    made = {
        scope: subprocess.Popen(
            [sys.executable, "-m", "stageline.cli", "token", "create", name, "--scope", scope],
            cwd=root,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for scope, name in rest
    }
    for scope, proc in made.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"token create {scope}: {out}{err}"
        server.tokens[scope] = out.strip().splitlines()[-1]
    return server


def _factory(base: Path, started: list[Server]) -> Callable[..., Server]:

    def make(
        *,
        database_url: str | None = None,
        templates: Iterable[str] = (),
        env: Mapping[str, str] | None = None,
        start: bool = True,
        name: str = "project",
    ) -> Server:
        server = make_project(base / name, database_url=database_url, templates=templates, env=env)
        started.append(server)
        return server.start() if start else server

    return make


@pytest.fixture
def serve_project(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Start servers: ``serve_project(database_url=None, templates=(), env=None, start=True)``;
    every one started is killed at the end of the test."""
    started: list[Server] = []
    yield _factory(tmp_path, started)
    for one in started:
        one.kill()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A running server over a SQLite project with the fixture templates ``ten_nodes`` and
    ``blocking``, shared by the tests of a module (starting one takes seconds): tests make
    their own runs and tokens, and leave its three tokens alone."""
    started: list[Server] = []
    yield _factory(tmp_path_factory.mktemp("served"), started)(
        templates=("ten_nodes.py", "blocking.py")
    )
    for one in started:
        one.kill()

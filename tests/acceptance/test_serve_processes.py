"""``stageline serve --workers N``'s supervisor, as an operator sees it: the connections of
clients that connect at once are spread over the processes, a process that dies is replaced, a
taken port is refused with a clear error, and no process outlives a supervisor killed outright.
Linux only (``/proc``), as the machines stageline runs on."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from server_fixtures import HTTP_TIMEOUT, Server, make_project

pytestmark = pytest.mark.timeout(240)
CONNECTIONS = 16
"""Clients connecting at once: all on one process of two by chance once in 30,000 tries."""


def _children(pid: int) -> list[int]:
    """The server processes the supervisor started (not multiprocessing's resource tracker)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                found.append(int(child))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _connections(pid: int, port: int, state: str = "01") -> int:
    """TCP sockets on ``port`` that process ``pid`` holds: established ones (``01``), or
    listening (``0A``)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    held = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, found, inode = fields[1], fields[3], fields[9]
        if found == state and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:
            held += 1
    return held


def _until(check: Callable[[], bool], what: str) -> None:
    """A hang guard, not a timing: ``check`` must come true within a minute."""
    for _ in range(600):
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"never came true: {what}")


@pytest.fixture
def two_processes(tmp_path: Path) -> Iterator[Server]:
    server = make_project(tmp_path / "project", env={"STAGELINE_SERVER_WORKERS": "2"})
    try:
        server.start()
        assert server.proc is not None
        pid, port = server.proc.pid, server.port
        _until(
            lambda: (
                len(kids := _children(pid)) == 2
                and all(_connections(kid, port, "0A") for kid in kids)
            ),
            "two server processes listening",
        )
        yield server
    finally:
        server.kill()


def test_clients_that_connect_at_once_are_spread_over_the_processes(two_processes: Server) -> None:
    """A burst of connections (an app's client pool starting): with one socket shared, the
    first process to wake accepted them all and kept them (keep-alive)."""
    assert two_processes.proc is not None
    burst = [
        socket.create_connection(("127.0.0.1", two_processes.port)) for _ in range(CONNECTIONS)
    ]
    try:
        children = _children(two_processes.proc.pid)

        def held() -> dict[int, int]:
            return {pid: _connections(pid, two_processes.port) for pid in children}

        _until(lambda: sum(held().values()) == CONNECTIONS, "every connection accepted")
        assert all(held().values()), f"one process holds every connection: {held()}"
    finally:
        for sock in burst:
            sock.close()
    assert two_processes.stop() == 0, two_processes.log()


def test_a_server_process_that_dies_is_replaced(two_processes: Server) -> None:
    assert two_processes.proc is not None
    supervisor = two_processes.proc.pid
    first, second = _children(supervisor)
    os.kill(first, signal.SIGKILL)
    _until(
        lambda: len(kids := _children(supervisor)) == 2 and first not in kids,
        "a new server process in place of the killed one",
    )
    assert second in _children(supervisor)
    _until(
        lambda: httpx.get(f"{two_processes.url}/ok", timeout=HTTP_TIMEOUT).status_code == 200,
        "the port answers",
    )
    assert "starting another" in two_processes.log()
    assert two_processes.stop() == 0, two_processes.log()


def test_no_server_process_outlives_a_killed_supervisor(two_processes: Server) -> None:
    assert two_processes.proc is not None
    children = _children(two_processes.proc.pid)
    two_processes.kill(signal.SIGKILL)
    _until(lambda: not any(_alive(pid) for pid in children), "the server processes exit")


def test_a_taken_port_is_refused_in_one_line(tmp_path: Path) -> None:
    server = make_project(tmp_path / "project")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "stageline.cli", "serve", "--workers", "2", "--port", str(port)],
            cwd=server.project,
            env=server.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 3, done.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr

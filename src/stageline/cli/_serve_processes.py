"""``stageline serve --workers N``: N server processes on one port, each listening on a socket
of its own (``SO_REUSEPORT``), so the kernel spreads new connections across them.

uvicorn's own supervisor shares one listening socket between its processes, and whichever
wakes first accepts every connection waiting (asyncio accepts up to a hundred at a time): a
client pool that connects at once (an app's SDK clients) landed on one process and stayed
there (keep-alive) while the others idled. With a socket each, the kernel hashes each
connection to one of them.

This supervisor starts the processes, starts one again if it dies, and stops them all on
``SIGTERM``, ``SIGINT`` (Ctrl-C) or ``SIGHUP``. Each process is a whole server over the one
database (``worker_app``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from types import FrameType
from typing import Any

__all__ = ["serve_processes"]

_log = logging.getLogger("uvicorn.error")
WATCH_EVERY = 0.5
"""Seconds between two looks at the processes (one that died is started again)."""
STOP_GRACE = 5.0
"""Seconds, beyond uvicorn's graceful shutdown, a process has to exit before it is killed."""


def _listener(host: str, port: int) -> socket.socket:
    """A socket bound to the port, its listening left to uvicorn (so connections reach this
    process only once it serves). ``TCP_NODELAY`` is inherited by the connections it accepts
    (uvicorn's sockets leave Nagle's algorithm on: a small answer then waits ~40 ms for the
    client's delayed ACK)."""
    family, address = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(address)
    return sock


def _address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    """The socket family and bind address of ``host`` (an IPv6 one may come in brackets)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return family, (host.strip("[]"), port)


def port_free(host: str, port: int) -> str | None:
    """Why the port cannot be served (another process listens on it), or None. Bound without
    ``SO_REUSEPORT``, so that even another stageline's processes count as taking it."""
    family, address = _address(host, port)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _orphaned(parent: int) -> None:
    """Stop this server (gracefully) once its supervisor is gone, killed or not: no process is
    left serving the port on its own."""
    while os.getppid() == parent:
        time.sleep(WATCH_EVERY)
    os.kill(os.getpid(), signal.SIGTERM)


def _serve_one(host: str, port: int, log_level: str, graceful: int, parent: int) -> None:
    """One server process (the target of each child)."""
    import uvicorn

    threading.Thread(target=_orphaned, args=(parent,), daemon=True).start()

    config = uvicorn.Config(
        "stageline.cli._serve:worker_app",
        factory=True,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=graceful,
        server_header=False,
    )
    sock = _listener(host, port)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()


def serve_processes(
    host: str, port: int, log_level: str, processes: int, *, graceful: int, startup_failure: int
) -> int:
    """Run ``processes`` servers until a signal stops them; returns the exit code:
    ``startup_failure`` when the port is taken or a process could not start (the database is
    unreachable, say: starting it again would not help), else 0."""
    import uvicorn

    uvicorn.Config("stageline.cli._serve:worker_app", log_level=log_level)  # its logging
    refused = port_free(host, port)
    if refused is not None:
        _log.error(refused)
        return startup_failure
    spawn = multiprocessing.get_context("spawn")
    stop = threading.Event()

    def start() -> Any:
        child = spawn.Process(
            target=_serve_one, args=(host, port, log_level, graceful, os.getpid())
        )
        child.start()
        return child

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stopping)
    scheme = "[%s]" if ":" in host else "%s"
    _log.info(
        "Started %d server processes on http://%s:%d (one socket each)",
        processes,
        scheme % host,
        port,
    )
    children = [start() for _ in range(processes)]
    code = 0
    try:
        while not stop.wait(WATCH_EVERY):
            for i, child in enumerate(children):
                if child.exitcode == startup_failure:
                    _log.error("a server process could not start; stopping the others")
                    code = startup_failure
                    stop.set()
                elif not child.is_alive():
                    _log.warning(
                        "server process %s ended (exit code %s); starting another",
                        child.pid,
                        child.exitcode,
                    )
                    children[i] = start()
    finally:
        for child in children:
            if child.is_alive():
                child.terminate()  # SIGTERM: uvicorn's graceful shutdown
        for child in children:
            child.join(graceful + STOP_GRACE)
            if child.is_alive():
                child.kill()
                child.join()
    return code

"""Real CLI processes: the environment of a child, one command run to its end, ``stageline
worker`` processes started and stopped, and, for the race tests, several held at a barrier and
released together. ``conftest.py``'s fixtures use these."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BARRIER = """
import sys
import time
from pathlib import Path

from stageline.cli._main import run_cli

ready, go = Path(sys.argv[1]), Path(sys.argv[2])
ready.touch()
while not go.exists():
    time.sleep(0.0005)
sys.exit(run_cli(sys.argv[3:]))
"""


def cli_env(home: Path, url: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a CLI child: this one's less ``STAGELINE_*`` (PYTHONPATH kept), its
    project's home and database, offline, UTF-8, wide columns. A ``PYTHONPATH`` in ``extra``
    goes before the inherited one (which finds this checkout's ``src``), never instead of it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    path = extra.pop("PYTHONPATH", None)
    env.update(
        STAGELINE_HOME=str(home),
        STAGELINE_MODEL="offline",
        PYTHONIOENCODING="utf-8",
        COLUMNS="200",
        **extra,
    )
    if path:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (path, env.get("PYTHONPATH")) if p)
    if url is not None:
        env["STAGELINE_DATABASE_URL"] = url
    return env


def cli(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 120, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``stageline ARGS`` to its end."""
    return subprocess.run(
        [sys.executable, "-m", "stageline.cli", *args],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=timeout,
    )


def together(
    commands: list[list[str]], cwd: Path, env: dict[str, str], timeout: float = 120
) -> list[subprocess.CompletedProcess[str]]:
    """Start one process per command, wait until all are ready, release them at once."""
    sync = cwd / f".sync-{time.monotonic_ns()}"
    sync.mkdir()
    script = sync / "barrier.py"
    script.write_text(BARRIER)
    go = sync / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(sync / f"ready.{i}"), str(go), *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, args in enumerate(commands)
    ]
    try:
        while not all((sync / f"ready.{i}").exists() for i in range(len(procs))):  # or timeout
            for proc in procs:
                if proc.poll() is not None:
                    raise AssertionError(f"a process stopped early: {proc.communicate()}")
            time.sleep(0.005)
        go.touch()
        done = []
        for proc, args in zip(procs, commands, strict=True):
            out, err = proc.communicate(timeout=timeout)
            done.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
        return done
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # reaps it and closes its pipes


def start_worker(cwd: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``stageline worker --concurrency 2`` in the background, its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "stageline.cli", "worker", "--concurrency", "2"],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_workers(
    procs: list[subprocess.Popen[bytes]], alive: list[subprocess.Popen[bytes]] | None = None
) -> None:
    """SIGTERM each of ``alive`` (default: all), then wait for every one (a kill after 60 s)."""
    for proc in procs if alive is None else alive:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

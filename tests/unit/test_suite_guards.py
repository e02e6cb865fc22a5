"""The suite's own guards (``tests/suite_guards.py``): a leak fails the test that leaks, serial
tests run last, and a serial test runs alone."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from suite_guards import SuiteLock

TESTS = Path(__file__).parent.parent

LEAKY = """
import pytest


def test_leaves_a_file_open(tmp_path):
    handle = open(tmp_path / "left-open.txt", "w")
    cycle = [handle]
    cycle.append(cycle)  # only the garbage collector frees it: after this test, unless asked


def test_fails_holding_a_file(tmp_path):
    handle = open(tmp_path / "held-open.txt", "w")  # its frame, kept by the failure, holds it
    raise AssertionError("fails before closing it")


def test_after_it():
    pass


@pytest.mark.serial
def test_serial():
    pass


def test_last_in_the_file():
    pass
"""


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A pytest session of its own over ``LEAKY`` with the suite's guards, in-process, and a
    lock of its own (its serial test must not wait for the test that runs it). No plugin is
    loaded but the guards: the installed ones (hypothesis, schemathesis, playwright...) cost
    seconds of start-up and are not what these tests are about."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n")
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["suite_guards"]\n')
    (tmp_path / "test_leaky.py").write_text(LEAKY)
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": path,
            "STAGELINE_TEST_LOCK": str(tmp_path / "lock"),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_file_left_open_fails_the_teardown_of_the_test_that_left_it(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-rA")
    assert done.returncode == 1, done.stdout + done.stderr
    errors = done.stdout.split("= ERRORS =")[1].split("= FAILURES =")[0]
    first, second = errors.split("ERROR at teardown of ")[1:]
    assert first.startswith("test_leaves_a_file_open") and "left-open.txt" in first, errors
    assert second.startswith("test_fails_holding_a_file") and "held-open.txt" in second, errors
    assert "unclosed file" in first and "unclosed file" in second, errors
    for later in ("test_after_it", "test_serial", "test_last_in_the_file"):
        assert f"PASSED test_leaky.py::{later}" in done.stdout, done.stdout
    assert "1 failed, 4 passed, 2 errors" in done.stdout, done.stdout


def test_serial_tests_are_collected_after_the_rest(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "--collect-only", "-q")
    names = [line.split("::")[1] for line in done.stdout.splitlines() if "::" in line]
    assert names == [
        "test_leaves_a_file_open",
        "test_fails_holding_a_file",
        "test_after_it",
        "test_last_in_the_file",
        "test_serial",
    ], done.stdout


def _taken(path: Path, mode: int) -> bool:
    """Whether a lock on ``path`` in ``mode`` would have to wait (another holds it)."""
    probe = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(probe, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(probe)  # closing drops a lock the probe got
    return False


@pytest.fixture
def locks(tmp_path: Path) -> Iterator[list[SuiteLock]]:
    """Three holders of one lock (as three processes would be: each its own open files)."""
    made = [SuiteLock(tmp_path / "suite.lock") for _ in range(3)]
    yield made
    for lock in made:
        lock.close()


def test_a_serial_test_waits_for_running_tests_and_no_new_one_starts_meanwhile(
    tmp_path: Path, locks: list[SuiteLock]
) -> None:
    running, serial, other = locks
    path = tmp_path / "suite.lock"
    running.shared()
    assert not _taken(path, fcntl.LOCK_SH)  # tests share it
    got = threading.Event()

    def run_serial() -> None:
        serial.exclusive()
        got.set()

    waiter = threading.Thread(target=run_serial)
    waiter.start()
    try:
        while not _taken(Path(f"{path}.gate"), fcntl.LOCK_SH):  # it waits at the gate...
            got.wait(0.01)
        assert not got.is_set()  # ...for the running test, which still holds the lock
        running.release()
        waiter.join(timeout=60)
        assert got.is_set()
        assert _taken(path, fcntl.LOCK_SH)  # alone: no other test runs beside it
        assert _taken(Path(f"{path}.gate"), fcntl.LOCK_SH)  # and none gets in line
    finally:
        serial.release()
        waiter.join(timeout=60)
    other.shared()  # once it is done, tests run again
    other.release()

"""How the suite runs side by side (pytest-xdist) and keeps each test's leaks its own.

- **Order**: the longest tests first (``LONGEST_FIRST``), so both workers end together.
- **Serial tests** (``@pytest.mark.serial``: they stop the shared Postgres server, or need the
  machine to themselves) run after the rest, and alone: every test holds a shared lock while
  it runs, a serial test an exclusive one. The lock is one file per machine, so it also keeps
  other pytest sessions here off the Postgres server while it is down. A serial test
  waiting for the lock stops new tests from starting (a gate), so it is not starved.
- **Leaks fail the test that leaks**: after a test's fixtures are torn down the garbage
  collector runs, so an unclosed file or socket it dropped warns (``ResourceWarning``, an error
  under ``filterwarnings = error``) at the teardown of that test, not at a later one's setup.
  (What an earlier test kept alive and dropped later shows at the next full collection;
  ``PYTHONTRACEMALLOC=20`` says where it was opened.)
- **Workers**: ``-n auto`` (the default) starts three for two CPUs, none for a command that names
  single tests; ``-n N`` or ``PYTEST_XDIST_AUTO_NUM_WORKERS`` choose otherwise, ``-n 0``
  runs in-process.
"""

from __future__ import annotations

import fcntl
import gc
import os
import sys
import tempfile
import traceback
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

SERIAL = "serial"


class SuiteLock:
    """A readers-writer lock over two files (``flock``): tests share it, serial ones own it.

    A writer first takes the gate, which readers pass through on their way in, so once a
    serial test waits no new test starts, and it runs as soon as the running ones end."""

    def __init__(self, path: Path) -> None:
        self._gate = os.open(f"{path}.gate", os.O_RDONLY | os.O_CREAT, 0o666)
        self._lock = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)

    def close(self) -> None:
        os.close(self._gate)
        os.close(self._lock)

    def shared(self) -> None:
        fcntl.flock(self._gate, fcntl.LOCK_SH)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)

    def exclusive(self) -> None:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        fcntl.flock(self._lock, fcntl.LOCK_EX)

    def release(self) -> None:
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        fcntl.flock(self._gate, fcntl.LOCK_UN)  # held only by a serial test; else a no-op


LOCK = Path(
    os.environ.get("STAGELINE_TEST_LOCK") or Path(tempfile.gettempdir()) / "stageline-tests.lock"
)
"""One per machine: what a serial test stops (the Postgres server) is the machine's."""

_lock_key = pytest.StashKey[SuiteLock]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{SERIAL}: stops a shared service or needs the machine to itself: last, alone"
    )
    config.stash[_lock_key] = SuiteLock(LOCK)


def pytest_unconfigure(config: pytest.Config) -> None:
    lock = config.stash.get(_lock_key, None)
    if lock is not None:
        lock.close()


LONGEST_FIRST = (
    "tests/acceptance/test_decision_races.py",
    "tests/acceptance/test_db_cli.py",
    "tests/acceptance/test_db_upgrade_release.py",
    "tests/acceptance/test_langgraph_json.py",
    "tests/acceptance/",
    "tests/integration/",
)
"""Where the longest tests are, longest first: the workers start on them and finish on the
short unit tests, so neither is left alone with a long test at the end (a test's place in the
order changes when it runs, never what it checks)."""


def _order(item: pytest.Item) -> tuple[bool, int]:
    """Serial tests last; before them the ``LONGEST_FIRST`` places in turn, then the rest."""
    serial = item.get_closest_marker(SERIAL) is not None
    place = next(
        (i for i, where in enumerate(LONGEST_FIRST) if item.nodeid.startswith(where)),
        len(LONGEST_FIRST),
    )
    return serial, place


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Serial tests last, the longest first (a stable sort: each group keeps its order)."""
    items.sort(key=_order)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The lock around setup, call and teardown; outside pytest-timeout's guard, so time spent
    waiting for a serial test is not counted against a test's own timeout."""
    lock = item.config.stash[_lock_key]
    if item.get_closest_marker(SERIAL) is not None:
        lock.exclusive()
    else:
        lock.shared()
    try:
        return (yield)
    finally:
        lock.release()


def _describe(unraisable: sys.UnraisableHookArgs) -> str:
    """What ``sys.unraisablehook`` got, as text (keeping the object would resurrect it)."""
    what = f"{unraisable.err_msg or 'Exception ignored in'}: {unraisable.object!r}"
    error = "".join(traceback.format_exception_only(unraisable.exc_type, unraisable.exc_value))
    made = tracemalloc.get_object_traceback(unraisable.object)
    where = (
        "allocated at (most recent call first):\n" + "\n".join(made.format(most_recent_first=True))
        if made is not None
        else "(PYTHONTRACEMALLOC=20 shows where it was allocated)"
    )
    return f"{what}\n{error}{where}"


FULL_COLLECTION_EVERY = 100
"""Tests between full collections. In between only what is new since the last test is looked
at (older objects are frozen: ``gc.freeze``); a full collection of the ~230,000 objects of a
worker costs ~0.2 s of CPU, the young ones a few ms."""

_tests_key = pytest.StashKey[int]()


def _collect_garbage(config: pytest.Config) -> list[str]:
    """Collect what the test dropped and return what was left open, then freeze the survivors
    (so the next test's collection skips them); every ``FULL_COLLECTION_EVERY`` tests, all."""
    tests = config.stash.get(_tests_key, 0)
    config.stash[_tests_key] = tests + 1
    if tests % FULL_COLLECTION_EVERY == FULL_COLLECTION_EVERY - 1:
        gc.unfreeze()
    leaks: list[str] = []
    previous = sys.unraisablehook
    sys.unraisablehook = lambda unraisable: leaks.append(_describe(unraisable))
    try:
        # pytest keeps a failed test's exception (and through it the test's frames) until the
        # next test's call: drop it now, so what the frames held open is found here.
        for name in ("last_exc", "last_type", "last_value", "last_traceback"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()
    finally:
        sys.unraisablehook = previous
    gc.freeze()
    return leaks


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    """Once the test's fixtures are torn down, collect its garbage: a file or socket it left
    open warns now (an error, under ``filterwarnings = error``) and fails this test's
    teardown, instead of surfacing at a later test's setup as an unraisable exception."""
    result = yield
    leaks = _collect_garbage(item.config)
    if leaks:
        pytest.fail("left unclosed after this test:\n" + "\n".join(leaks), pytrace=False)
    return result


WORKERS_PER_CPU = 1.5
"""Three workers for two CPUs: much of a test's time is spent waiting for its subprocesses (the
CLI, servers, a browser, Postgres), so with a worker per CPU the CPUs were often idle
(the whole suite here: 887 s with 2 workers, 695 s with 3, both green on a quiet machine)."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (the default, in pyproject.toml): 1.5 workers per CPU, or none (in-process)
    when the command names single tests (``file::test``), which workers would only slow."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    if config.args and all("::" in arg for arg in config.args):
        return 0
    return max(1, round(WORKERS_PER_CPU * len(os.sched_getaffinity(0))))

"""A synchronous facade over the async ``Runner``, for apps that are not async.

``connect()`` opens one ``Runner`` on an event loop of its own, in a background thread, and
every method hands its call to that loop and waits for the answer: the runtime stays async and
there is one implementation of everything. Runs started with ``wait=False`` advance on that
loop while the app goes on; ``close()`` stops them after their current step (they end
``queued``, and any process can resume them).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Coroutine, Mapping
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar, Unpack

from stageline.config import Settings, load_settings
from stageline.errors import UsageError
from stageline.ledger import Run, RunStatus, Wait
from stageline.runner._human import DecisionOptions
from stageline.runner._runner import Runner
from stageline.runner._snapshots import CheckpointInfo
from stageline.runner._support import RunSummary

__all__ = ["Client", "connect"]

T = TypeVar("T")
POLL = 0.1
"""Seconds between two looks at the ledger while ``wait`` waits on a run another process
advances."""
_LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)
_URL_SCHEMES = ("sqlite:", "postgres:", "postgresql:", "postgresql+", "memory:")


def _settings_for(target: str | Path | Settings | None) -> Settings:
    if isinstance(target, Settings):
        return target
    if target is None:
        return load_settings()
    text = str(target)
    if text.startswith(_URL_SCHEMES):
        return replace(load_settings(), database_url=text)
    path = Path(text).expanduser()
    if path.is_dir():
        return load_settings(cwd=path)
    if path.suffix in (".db", ".sqlite", ".sqlite3"):
        return replace(load_settings(), database_url=f"sqlite:///{path.resolve()}")
    raise UsageError(
        f"connect({text!r}): not a project folder, a .db file or a database URL "
        "(sqlite:///PATH, postgresql://..., memory://)"
    )


def connect(target: str | Path | Settings | None = None) -> Client:
    """A ``Client`` for the project in the working directory (``None``), a project folder, a
    SQLite file, a database URL or ``Settings``; close it (or use it as a context manager)."""
    return Client(_settings_for(target))


class Client:
    """Start, wait for, decide, answer, list, read and fork runs, synchronously."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="stageline-client", daemon=True
        )
        self._thread.start()
        self._tasks: dict[str, asyncio.Task[RunSummary]] = {}
        self._stack = contextlib.AsyncExitStack()
        try:
            self._runner: Runner = self._call(
                self._stack.enter_async_context(Runner.open(settings))
            )
        except BaseException:
            self._stop_loop()
            raise
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------------

    def _call(self, work: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if getattr(self, "_closed", False):
            work.close()
            raise UsageError("this stageline client is closed")
        future: Future[T] = asyncio.run_coroutine_threadsafe(work, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def _in_background(self, run_id: str, work: Coroutine[Any, Any, RunSummary]) -> None:
        async def schedule() -> None:
            task = asyncio.ensure_future(work)
            self._tasks[run_id] = task
            task.add_done_callback(lambda _: self._tasks.pop(run_id, None))

        self._call(schedule())

    def close(self) -> None:
        """Stop background advances after their current step, close the runner and the loop."""
        if getattr(self, "_closed", True):
            return

        async def shut() -> None:
            self._runner.drain("client closed")
            if self._tasks:
                await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            await self._stack.aclose()

        try:
            self._call(shut())
        finally:
            self._closed = True
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def runner(self) -> Runner:
        """The async runner underneath (use it only from coroutines given to this loop)."""
        return self._runner

    # -- runs -------------------------------------------------------------------------------

    def start(
        self,
        template: str,
        inputs: Mapping[str, Any] | None = None,
        *,
        wait: bool = False,
        run_id: str | None = None,
        services: Mapping[str, Any] | None = None,
        deadlines: Mapping[str, Any] | None = None,
        budget: Mapping[str, Any] | None = None,
    ) -> RunSummary:
        """Start a run. ``wait=True`` returns once it ends or waits for a person; else at once,
        the run advancing in the background (``wait(run_id)`` for its outcome)."""
        given = dict(inputs or {})
        if wait:
            return self._call(
                self._runner.start(
                    template,
                    given,
                    run_id=run_id,
                    services=services,
                    deadlines=deadlines,
                    budget=budget,
                )
            )
        run = self._call(
            self._runner.create(template, given, run_id=run_id, deadlines=deadlines, budget=budget)
        )
        self._in_background(run.run_id, self._runner.resume(run.run_id, services=services))
        return self.get(run.run_id)

    def wait(self, run_id: str, timeout: float | None = None) -> RunSummary:
        """Block until the run is no longer queued or running (it ended, failed or waits for a
        person); ``TimeoutError`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout

        async def until_settled() -> RunSummary:
            task = self._tasks.get(run_id)
            if task is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)
            while True:
                run = await self._runner.ledger.get_run(run_id)
                if run.status not in _LIVE:
                    return await self._runner.status(run_id)
                await asyncio.sleep(POLL)

        try:
            return self._call(
                until_settled(), None if deadline is None else max(0.0, deadline - time.monotonic())
            )
        except TimeoutError:
            raise TimeoutError(f"run {run_id} is still running after {timeout}s") from None

    def get(self, run_id: str) -> RunSummary:
        """The run: its ledger row, records, state, decisions and questions, lineage."""
        return self._call(self._runner.status(run_id))

    def runs(
        self,
        *,
        status: str | RunStatus | None = None,
        template: str | None = None,
        limit: int = 100,
    ) -> list[Run]:
        """Runs, newest first."""
        return self._call(
            self._runner.ledger.list_runs(
                status=str(RunStatus(status)) if status else None, template=template, limit=limit
            )
        )

    def pending(self, run_id: str | None = None) -> list[Wait]:
        """Gates and question sets waiting for a person (of one run)."""
        return self._call(self._runner.pending(run_id))

    def cancel(self, run_id: str) -> Run:
        return self._call(self._runner.cancel(run_id))

    def resume(self, run_id: str, *, force: bool = False) -> RunSummary:
        return self._call(self._runner.resume(run_id, force=force))

    def retry(self, run_id: str, *, force: bool = False) -> RunSummary:
        return self._call(self._runner.retry(run_id, force=force))

    # -- people -----------------------------------------------------------------------------

    def approve(
        self, run_id: str, *, note: str | None = None, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Approve the gate the run waits at; returns once the run ends or waits again (the
        options bind the decision as ``Runner.approve``'s do)."""
        return self._call(self._runner.approve(run_id, note=note, **options))

    def reject(
        self, run_id: str, *, note: str | None = None, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Reject at the gate the run waits at (see ``Runner.reject``)."""
        return self._call(self._runner.reject(run_id, note=note, **options))

    def changes(self, run_id: str, *, note: str, **options: Unpack[DecisionOptions]) -> RunSummary:
        """Send the run back to the gate's ``changes_to`` node with ``note`` as feedback."""
        return self._call(self._runner.request_changes(run_id, note=note, **options))

    def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        actor: str | None = None,
        question_id: str | None = None,
    ) -> RunSummary:
        """Answer the question set the run waits on (as ``stageline answer`` does)."""
        return self._call(
            self._runner.answer(run_id, answers, actor=actor, question_id=question_id)
        )

    def respond(
        self, run_id: str, value: Any, *, actor: str | None = None, wait_id: str | None = None
    ) -> RunSummary:
        """Answer the interrupt the graph made itself (as ``stageline respond`` does): ``value``
        is what its ``interrupt()`` returns."""
        return self._call(self._runner.respond(run_id, value, actor=actor, wait_id=wait_id))

    # -- history ----------------------------------------------------------------------------

    def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run, oldest first."""
        return self._call(self._runner.history(run_id))

    def update_state(
        self,
        run_id: str,
        values: Mapping[str, Any],
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str | None = None,
    ) -> RunSummary:
        """Change a failed run's state (see ``Runner.update_state``)."""
        return self._call(
            self._runner.update_state(
                run_id, values, checkpoint_id=checkpoint_id, as_node=as_node, actor=actor
            )
        )

    def fork(
        self,
        run_id: str,
        *,
        at_step: int | None = None,
        checkpoint_id: str | None = None,
        changes: Mapping[str, Any] | None = None,
        fork_id: str | None = None,
        wait: bool = True,
    ) -> RunSummary:
        """A new run from one of ``run_id``'s checkpoints (see ``Runner.fork``); ``wait=False``
        returns at once, the fork advancing in the background."""
        made = self._call(
            self._runner.fork(
                run_id,
                at_step=at_step,
                checkpoint_id=checkpoint_id,
                changes=changes,
                fork_id=fork_id,
                advance=wait,
            )
        )
        if not wait:
            self._in_background(made.run.run_id, self._runner.resume(made.run.run_id))
        return made

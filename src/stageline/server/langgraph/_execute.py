"""LangGraph API runs: what one asks the runner to do, and following it to its end.

A run on an empty thread creates the stageline run (its inputs and context checked at once:
422) and has the server's advancer advance it; a run with ``command={"resume": ...}`` on an
interrupted thread decides its gate or answers its question set through the runner's own
``approve``, ``reject``, ``request_changes`` or ``answer`` (or ``respond``, for an interrupt the
graph made itself: the resume value is its answer), with the token's name as actor, exactly as
the CLI does; a run with neither on a failed thread retries it; one on a finished thread has
nothing to do and succeeds at once, the thread unchanged (as LangGraph's: nothing is next), and
input there is refused (409: a finished run cannot change). Each is checked before it is
accepted, so that a bad request is refused with its reason and leaves no API run behind.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import HTTPException
from starlette.requests import HTTPConnection

from stageline.errors import RunNotFound, StagelineError
from stageline.ledger import ApiRun, ApiRunStatus, Assistant, Run, RunStatus, Wait, WaitKind
from stageline.runner import (
    Runner,
    RunSummary,
    check_inbox_answer,
    ci_wait_refused,
    live_stream,
    run_context,
)
from stageline.server._advancer import Advancer
from stageline.server.langgraph._assistants import find_assistant
from stageline.server.langgraph._events import EventLog
from stageline.server.langgraph._inbox import inbox_resume
from stageline.server.langgraph._lookup import unprocessable
from stageline.server.langgraph._mapping import api_status_of, assistant_of, thread_status
from stageline.server.langgraph._models import RunCreate
from stageline.stages import validate_answers

__all__ = ["NOTHING", "ApiRuns", "plan", "thread_busy"]

_log = logging.getLogger("stageline.server")

Work = Callable[[], Awaitable[RunSummary | None]]


async def NOTHING() -> None:
    """The work of a run on a finished thread: none (it succeeds, the thread unchanged)."""


JOIN_POLL = 0.2
"""Seconds between two looks at a run this server does not advance itself (join)."""
KEPT_LOGS = 100
"""How many API runs' live events the server keeps (the latest), for ``Last-Event-ID``."""


class ApiRuns:
    """The API runs this server follows, so that wait, join and stream can wait for them."""

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._threads: dict[str, str] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._starts: dict[str, str | None] = {}
        self._modes: dict[str, list[str]] = {}
        self._logs: OrderedDict[str, EventLog] = OrderedDict()

    @classmethod
    def of(cls, request: HTTPConnection) -> ApiRuns:
        found = getattr(request.app.state, "langgraph_runs", None)
        if found is None:
            found = cls()
            request.app.state.langgraph_runs = found
        return found

    def lock(self, thread_id: str) -> asyncio.Lock:
        """Held while a run is accepted on the thread, so two cannot both be."""
        return self._locks.setdefault(thread_id, asyncio.Lock())

    def busy(self, thread_id: str) -> bool:
        api_run_id = self._threads.get(thread_id)
        task = self._tasks.get(api_run_id) if api_run_id else None
        return task is not None and not task.done()

    def task(self, api_run_id: str) -> asyncio.Task[None] | None:
        return self._tasks.get(api_run_id)

    def start_of(self, api_run_id: str) -> str | None:
        """The checkpoint an API run this server follows started from (None: the beginning)."""
        return self._starts.get(api_run_id)

    def modes_of(self, api_run_id: str) -> list[str]:
        """The stream modes an API run was started with (``values``, LangGraph's default)."""
        return self._modes.get(api_run_id, ["values"])

    def log_of(self, api_run_id: str) -> EventLog | None:
        """The live events of an API run this server advances or advanced lately."""
        return self._logs.get(api_run_id)

    def launch(
        self,
        runner: Runner,
        api_run: ApiRun,
        work: Work,
        start: str | None = None,
        modes: list[str] | None = None,
        subgraphs: bool = False,
    ) -> asyncio.Task[None]:
        """Carry out ``work`` for ``api_run`` (from checkpoint ``start``) in the background,
        recording how it ended; what its graph streams in ``modes`` goes to its event log."""
        ledger = runner.ledger
        key = api_run.api_run_id
        log = EventLog(modes or ["values"], subgraphs)
        self._logs[key] = log
        while len(self._logs) > KEPT_LOGS:
            self._logs.popitem(last=False)

        async def follow() -> None:
            try:
                await carry_out()
            finally:
                log.close()

        async def carry_out() -> None:
            status, error = ApiRunStatus.ERROR, None
            try:
                # Not written "running" first (a commit per API run): while its task goes on,
                # this process says so, and another one reads it off the run (``status``).
                with live_stream(log.stream):
                    summary = await work()
                run = summary.run if summary is not None else await _at_rest(runner, api_run)
                status = ApiRunStatus.SUCCESS if work is NOTHING else api_status_of(run)
                if status is ApiRunStatus.PENDING:  # drained at shutdown: it goes on later
                    status = ApiRunStatus.RUNNING
                error = run.error if status is ApiRunStatus.ERROR else None
            except StagelineError as exc:
                error = str(exc)
            except Exception as exc:
                _log.exception("API run %s of thread %s failed", key, api_run.run_id)
                error = f"internal error ({type(exc).__name__}); the server log has the details"
            try:
                await ledger.set_api_run_status(key, status, error)
            except StagelineError:
                _log.warning("could not record how API run %s ended", key, exc_info=True)

        task = asyncio.create_task(follow(), name=f"api run {key}")
        self._tasks[key] = task
        self._threads[api_run.run_id] = key
        self._starts[key] = start
        self._modes[key] = modes or ["values"]

        def forget(done: asyncio.Task[None]) -> None:
            if self._tasks.get(key) is done:
                del self._tasks[key]
                self._starts.pop(key, None)
                self._modes.pop(key, None)
            if self._threads.get(api_run.run_id) == key:
                del self._threads[api_run.run_id]

        task.add_done_callback(forget)
        return task

    async def status(self, runner: Runner, api_run: ApiRun) -> ApiRunStatus:
        """The API run's status; one nobody here follows (another server process advances it,
        or the server restarted) is read off its run, once it has taken effect there."""
        if api_run.status.done:
            return api_run.status
        if api_run.api_run_id in self._tasks:
            return ApiRunStatus.RUNNING
        newest = (await runner.ledger.api_runs(api_run.run_id) or [api_run])[0]
        if newest.api_run_id != api_run.api_run_id:  # a later one took over the thread
            return ApiRunStatus.SUCCESS
        try:
            run = await runner.ledger.get_run(api_run.run_id)
        except StagelineError:
            return ApiRunStatus.ERROR
        if run.status is not RunStatus.RUNNING and _not_yet(runner, api_run, run):
            return api_run.status  # its process has not moved the run yet (a resume, a retry)
        found = api_status_of(run)
        return ApiRunStatus.RUNNING if found is ApiRunStatus.PENDING else found

    async def busy_anywhere(self, runner: Runner, thread_id: str) -> bool:
        """Whether an API run goes on on the thread, in this server process or another one
        behind the same database (``serve --workers``)."""
        if self.busy(thread_id):
            return True
        newest = await runner.ledger.api_runs(thread_id)
        return bool(newest) and not (await self.status(runner, newest[0])).done

    async def advanced(self, runner: Runner, api_run: ApiRun) -> bool:
        """Whether a process advances the API run's thread now: this one (its task), or
        another one behind the same database (its run is running, under a lease), which then
        records how the API run ended."""
        if api_run.api_run_id in self._tasks:
            return True
        run = await runner.ledger.get_run(api_run.run_id)
        return run.status is RunStatus.RUNNING and (run.lease_expires_at or 0) > time.time()

    async def follower(self, runner: Runner, api_run: ApiRun) -> asyncio.Future[None] | None:
        """What ends when the API run does: its task here, or (another process advances it) a
        watch on the ledger; None when it has ended."""
        task = self._tasks.get(api_run.api_run_id)
        if task is not None:
            return task
        if (await self.status(runner, api_run)).done:
            return None
        return asyncio.ensure_future(self._watch(runner, api_run, 3600.0))

    async def join(self, runner: Runner, api_run: ApiRun, timeout: float = 3600.0) -> None:
        """Wait until the API run has ended (bounded by ``timeout`` seconds)."""
        task = self._tasks.get(api_run.api_run_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout)
            return
        await self._watch(runner, api_run, timeout)

    async def _watch(self, runner: Runner, api_run: ApiRun, timeout: float) -> None:
        """Poll the ledger until the API run has ended (another process records it)."""
        deadline = time.monotonic() + timeout
        current = api_run
        while not (await self.status(runner, current)).done and time.monotonic() < deadline:
            await asyncio.sleep(JOIN_POLL)
            current = await runner.ledger.api_run(api_run.api_run_id) or current


async def _at_rest(runner: Runner, api_run: ApiRun) -> Run:
    """The thread's run once no process advances it: another server process behind the same
    database may have taken it up first (a queued run it adopted); this API run ends with it."""
    deadline = time.monotonic() + 3600.0
    run = await runner.ledger.get_run(api_run.run_id)
    while run.status is RunStatus.RUNNING and time.monotonic() < deadline:
        await asyncio.sleep(JOIN_POLL)
        run = await runner.ledger.get_run(api_run.run_id)
    return run


def _not_yet(runner: Runner, api_run: ApiRun, run: Run) -> bool:
    """Whether the run has not changed since the API run was accepted, and the process that
    accepted it may still be about to move it (a resume or retry is decided in its task): its
    lease time has not passed. Past that, that process is taken for dead."""
    return (
        not api_run.status.done
        and run.updated_at < api_run.created_at
        and time.time() - api_run.created_at < runner.settings.lease_ttl
    )


async def thread_busy(request: HTTPConnection, runner: Runner, thread_id: str) -> bool:
    """Whether an API run of this server, or a live process, advances the thread's run."""
    if ApiRuns.of(request).busy(thread_id):
        return True
    try:
        run = await runner.ledger.get_run(thread_id)
    except RunNotFound:
        return False
    return run.status is RunStatus.RUNNING and (run.lease_expires_at or 0) > time.time()


async def plan(
    runner: Runner, advancer: Advancer, body: RunCreate, thread_id: str, run: Run | None, actor: str
) -> Work:
    """Check what ``body`` asks of the thread and return the work that does it; a run made
    for an empty thread is created here (queued), so that its inputs are checked at once."""
    found = await find_assistant(runner, body.assistant_id)
    assistant = found.graph_id  # the template its runs are of
    context = {**found.context, **(body.context or {})} or None
    command = body.command
    if command is not None and (command.update is not None or command.goto is not None):
        if run is not None:  # on an interrupted thread: 409, naming what decides it
            await runner.check_no_wait(run, "command.update and command.goto cannot move it")
        raise HTTPException(
            422,
            "command.update and command.goto are not supported; change "
            "a thread's state with threads.update_state",
        )
    resume = command.resume if command is not None else None
    if resume is not None and body.input:
        raise HTTPException(
            422, "give input (to start a thread) or command (to resume it), not both"
        )
    if run is None:
        if resume is not None:
            raise HTTPException(
                409,
                f"thread {thread_id} has not started; there is nothing to "
                "resume (start it with input)",
            )
        with unprocessable():
            await runner.create(assistant, body.input or {}, run_id=thread_id, context=context)
        await _started_by(runner, thread_id, found)
        return lambda: advancer.advance(thread_id)
    if assistant_of(run) != assistant:
        raise HTTPException(
            409, f"thread {thread_id} runs template {assistant_of(run)!r}, not {assistant!r}"
        )
    if body.context and context != run_context(run.inputs):
        raise HTTPException(
            409,
            f"thread {thread_id} keeps the context its first run was given; a later run cannot "
            "change it (start a new thread for another context)",
        )
    said = f"thread {thread_id} is {thread_status(run)} (its run is {run.status})"
    if run.status.terminal:
        if body.input:
            raise HTTPException(
                409,
                f"{said}; a finished run cannot change (stageline records one ending per "
                "run), so its thread takes no new input: copy it with threads.copy, or start "
                "a new thread",
            )
        if resume is not None and body.strict_resume:
            raise HTTPException(409, f"{said}; no interrupt waits for this resume")
        # As LangGraph: nothing is next on a finished thread, so the run ends at once (a
        # resume with nothing waiting is ignored) and the thread stays as it is.
        return NOTHING
    if resume is not None:
        if run.status is not RunStatus.WAITING:
            raise HTTPException(409, f"{said}; only an interrupted thread can be resumed")
        return await _resume(runner, advancer, run, resume, actor)
    if run.status is RunStatus.WAITING:
        raise HTTPException(409, f"{said}: resume it with command={{'resume': ...}}")
    if body.input:
        raise HTTPException(
            409,
            f"{said}; a thread takes input only when it starts (copy it "
            "with threads.copy, or start a new thread)",
        )
    if run.status is RunStatus.FAILED:
        return lambda: advancer.run(runner.retry(thread_id))
    if run.status in (RunStatus.QUEUED, RunStatus.STOPPED):  # a stopped run continues
        return lambda: advancer.advance(thread_id)
    raise HTTPException(409, f"{said}; there is nothing to run")


async def _started_by(runner: Runner, thread_id: str, found: Assistant) -> None:
    """Note on the thread which assistant, at which version, started its run (LangGraph's
    threads carry ``assistant_id`` and ``graph_id`` in their metadata). A built-in assistant's
    run says so itself (its template is the assistant): no write on that common path."""
    if found.assistant_id == found.graph_id:
        return
    meta = await runner.ledger.thread_meta(thread_id)
    await runner.ledger.set_thread_metadata(
        thread_id,
        {
            **(meta.metadata if meta else {}),
            "graph_id": found.graph_id,
            "assistant_id": found.assistant_id,
            "assistant_version": found.version,
        },
    )


def _chosen(pending: list[Wait], resume: Any) -> tuple[Wait, Any]:
    """The interrupt a resume is for: keyed by interrupt id, or the only one waiting."""
    ids = {w.interrupt_id: w for w in pending}
    if isinstance(resume, Mapping) and resume and all(k in ids for k in resume):
        if len(resume) > 1:
            raise HTTPException(422, "resume one interrupt at a time")
        key = next(iter(resume))
        return ids[key], resume[key]
    if len(pending) > 1:
        raise HTTPException(
            422,
            f"{len(pending)} interrupts wait ({', '.join(ids)}); key the "
            'resume by interrupt id: {"<id>": value}',
        )
    return pending[0], resume


_GATE_FORMS = (
    'resume a gate with "approve", "reject" or {"decision": "approve" | '
    '"reject" | "changes" | "takeover", "note": "..."} (takeover: park gates only)'
)


def _gate_decision(value: Any) -> tuple[str, str | None]:
    if isinstance(value, str):
        decision, note = value, None
    elif isinstance(value, Mapping) and isinstance(value.get("decision"), str):
        decision, note = value["decision"], value.get("note")
        if note is not None and not isinstance(note, str):
            raise HTTPException(422, "resume.note must be a string")
    else:
        raise HTTPException(422, f"{_GATE_FORMS}; got {type(value).__name__}")
    if decision not in ("approve", "reject", "changes", "takeover"):
        raise HTTPException(422, f"{_GATE_FORMS}; got decision {decision!r}")
    if decision == "changes" and not (note or "").strip():
        raise HTTPException(422, "a request for changes needs a note saying what to change")
    return decision, note


async def _refuse_ci(runner: Runner, run_id: str) -> None:
    """409 naming the rule when the thread waits on CI: only the forge completes that."""
    for wait in await runner.ledger.pending_waits(run_id=run_id):
        if wait.kind is WaitKind.CI:
            raise HTTPException(409, str(ci_wait_refused(run_id, wait)))


async def _resume(runner: Runner, advancer: Advancer, run: Run, resume: Any, actor: str) -> Work:
    run_id = run.run_id
    pending = await runner.pending(run_id)
    if not pending:
        await _refuse_ci(runner, run_id)
        raise HTTPException(409, f"thread {run_id} waits on nothing any more")
    wait, value = _chosen(pending, resume)
    value = inbox_resume(wait, value)  # an Agent Inbox response: the decision or answers
    if wait.kind is WaitKind.GATE:
        decision, note = _gate_decision(value)
        if decision == "changes" and wait.payload.get("changes_to") is None:
            raise HTTPException(409, f"gate {wait.name} takes no changes; approve or reject")
        if decision == "changes" and wait.payload.get("changes_left") == 0:
            raise HTTPException(409, f"gate {wait.name} has no rounds of changes left")
        if decision == "takeover" and not wait.payload.get("park"):
            raise HTTPException(409, f"gate {wait.name} is not a park gate; approve or reject")
        options: dict[str, Any] = {"gate": wait.name, "actor": actor, "attempt": wait.attempt}
        if decision == "approve":
            return lambda: advancer.run(runner.approve(run_id, note=note, **options))
        if decision == "reject":
            return lambda: advancer.run(runner.reject(run_id, note=note, **options))
        if decision == "takeover":
            return lambda: advancer.run(runner.take_over(run_id, note=note, **options))
        return lambda: advancer.run(runner.request_changes(run_id, note=note or "", **options))
    if wait.kind is WaitKind.INTERRUPT:  # the graph's own interrupt(): the value as it is
        if value is None:
            raise HTTPException(422, "resume an interrupt with a value, not null")
        if wait.payload.get("human"):
            with unprocessable():
                check_inbox_answer(wait.payload.get("inbox"), value)
        return lambda: advancer.run(
            runner.respond(run_id, value, wait_id=wait.wait_id, actor=actor)
        )
    if not isinstance(value, Mapping):
        raise HTTPException(
            422,
            "resume a question set with a mapping of question id -> "
            f"answer; got {type(value).__name__}",
        )
    questions = wait.payload.get("question_set", {}).get("questions", [])
    with unprocessable():
        validate_answers(questions, value)
    answers = dict(value)
    return lambda: advancer.run(
        runner.answer(run_id, answers, question_id=wait.wait_id, actor=actor)
    )

"""Finding what a LangGraph request names: an assistant (template), a thread (run), a state."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from fastapi import HTTPException
from langgraph.errors import InvalidUpdateError

from stageline.errors import InputError, RunNotFound, StagelineError, UsageError
from stageline.ledger import Run, ThreadMeta
from stageline.names import is_run_id
from stageline.runner import Runner
from stageline.templates import list_templates

__all__ = ["assistant_names", "find_thread", "known_assistant", "snapshot", "unprocessable"]


def assistant_names(runner: Runner) -> list[str]:
    return [i.name for i in list_templates(runner.settings.template_dirs)]


def known_assistant(runner: Runner, assistant_id: str) -> str:
    """The template an assistant id names; 404 for anything else (never a path)."""
    names = assistant_names(runner)
    if assistant_id not in names:
        raise HTTPException(
            404,
            f"assistant {assistant_id!r} not found; the assistants are the "
            f"templates: {', '.join(names)}",
        )
    return assistant_id


def _short(name: str) -> str:
    return repr(name) if len(name) <= 80 else repr(name[:77] + "...")


async def find_thread(runner: Runner, thread_id: str) -> tuple[Run | None, ThreadMeta | None]:
    """The thread's run (None while it has none) and metadata row; 404 if it has neither."""
    if not is_run_id(thread_id):
        raise HTTPException(404, f"thread {_short(thread_id)} not found")
    meta = await runner.ledger.thread_meta(thread_id)
    try:
        run: Run | None = await runner.ledger.get_run(thread_id)
    except RunNotFound:
        run = None
    if run is None and meta is None:
        raise HTTPException(404, f"thread {_short(thread_id)} not found")
    return run, meta


def config_of(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if checkpoint_id:
        conf.update(checkpoint_ns="", checkpoint_id=checkpoint_id)
    return {"configurable": conf}


async def snapshot(runner: Runner, run: Run | None, checkpoint_id: str | None = None) -> Any:
    """LangGraph's ``StateSnapshot`` of the run (at ``checkpoint_id``); None without a run or
    when its template cannot be loaded; 404 for a checkpoint the run does not have."""
    if run is None:
        return None
    try:
        graph = runner.graph(run.template)
        found = await graph.aget_state(config_of(run.run_id, checkpoint_id))
    except InvalidUpdateError:  # fan-in writes that clash: there is no consistent state
        return None
    except StagelineError:
        if checkpoint_id:
            raise
        return None
    if checkpoint_id and found.created_at is None:  # LangGraph echoes an unknown id back
        raise HTTPException(404, f"thread {run.run_id} has no checkpoint {_short(checkpoint_id)}")
    return found


@contextlib.contextmanager
def unprocessable() -> Iterator[None]:
    """Bad input found by the runner (an unknown state key, an answer that does not fit) is
    422, as LangGraph's server answers; not-found errors keep their 404."""
    try:
        yield
    except (InputError, UsageError) as exc:
        if exc.http_status == 404:
            raise
        raise HTTPException(422, str(exc)) from exc

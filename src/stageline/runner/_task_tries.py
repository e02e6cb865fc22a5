"""Each try of a plain node's task, seen through a LangChain callback handler.

LangGraph's ``tasks`` stream announces a task once and its result once: a node whose
``RetryPolicy`` carried it through failures looks like one try. Every try runs the task's
runnable again, and LangChain's callbacks see each run start and end: the run of a task is the
outermost one whose ``langgraph_checkpoint_ns`` metadata ends in ``node:task id``. ``TaskTries``
keeps, per task id, when each try began and ended and how it failed; ``TaskRecords`` turns the
tries before the last into failed records of their own when the task ends.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler

__all__ = ["TaskTries", "Try"]


@dataclass(kw_only=True)
class Try:
    """One run of a task's node."""

    started: float
    finished: float | None = None
    error: BaseException | None = None


class TaskTries(BaseCallbackHandler):
    """Collects the tries of every task of one advance (all subgraphs included)."""

    run_inline = True
    """Called where the run happens (the event loop, or the thread of a sync subgraph), in
    order, before the task's result reaches the stream."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._namespaces: dict[UUID, str] = {}
        """Run id -> checkpoint namespace, of the chain runs in flight inside tasks."""
        self._running: dict[UUID, Try] = {}
        """Run id -> the try it is, of the task runs in flight."""
        self._tries: dict[str, list[Try]] = {}
        """Task id -> its tries so far, oldest first."""

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        namespace = (metadata or {}).get("langgraph_checkpoint_ns")
        node = (metadata or {}).get("langgraph_node")
        if not isinstance(namespace, str) or not isinstance(node, str):
            return
        head, _, task_id = namespace.rpartition("|")[2].partition(":")
        with self._lock:
            outer = self._namespaces.get(parent_run_id) if parent_run_id else None
            self._namespaces[run_id] = namespace
            if head == node and task_id and outer != namespace:  # the task's own run
                made = Try(started=time.time())
                self._running[run_id] = made
                self._tries.setdefault(task_id, []).append(made)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, None)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self._ended(run_id, error)

    def _ended(self, run_id: UUID, error: BaseException | None) -> None:
        with self._lock:
            self._namespaces.pop(run_id, None)
            made = self._running.pop(run_id, None)
        if made is not None:
            made.finished, made.error = time.time(), error

    def take(self, task_id: str) -> list[Try]:
        """The tries of ``task_id`` seen since the last ``take`` (oldest first)."""
        with self._lock:
            return self._tries.pop(task_id, [])

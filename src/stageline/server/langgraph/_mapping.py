"""How stageline's nouns look to a LangGraph SDK client: assistants, threads, states, runs.

An assistant is a template (``assistant_id`` = ``graph_id`` = the template's name); a thread is
a run (the thread id is the run id); a LangGraph run is one advance of it (``ApiRun``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stageline.ledger import ApiRun, ApiRunStatus, Run, RunStatus, ThreadMeta
from stageline.server.langgraph._inbox import human_view
from stageline.stages import RESERVED_KEYS

__all__ = [
    "THREAD_STATUS",
    "api_run_json",
    "api_status_of",
    "assistant_of",
    "checkpoint_json",
    "interrupt_json",
    "iso",
    "jsonable",
    "matches",
    "runs_of_thread_status",
    "state_json",
    "thread_json",
    "thread_status",
]

THREAD_STATUS: dict[RunStatus, str] = {
    RunStatus.QUEUED: "busy",
    RunStatus.RUNNING: "busy",
    RunStatus.WAITING: "interrupted",
    RunStatus.SUCCEEDED: "idle",
    RunStatus.FAILED: "error",
    RunStatus.CANCELLED: "idle",
    RunStatus.REJECTED: "idle",
    RunStatus.TAKEN_OVER: "idle",
    RunStatus.PARKED: "interrupted",
    # Nothing runs and nothing waits for a person: a new run on the thread (no input) continues
    # it. Not "interrupted", which LangGraph clients read as "resume me with a Command".
    RunStatus.STOPPED: "idle",
}
"""A run's status as a thread's (``idle``, ``busy``, ``interrupted``, ``error``)."""

_API_STATUS: dict[RunStatus, ApiRunStatus] = {
    RunStatus.QUEUED: ApiRunStatus.PENDING,
    RunStatus.RUNNING: ApiRunStatus.RUNNING,
    # A run that stopped at an interrupt did its work: LangGraph calls it a success (the
    # thread is "interrupted"); its own "interrupted" means cut short (a cancel).
    RunStatus.WAITING: ApiRunStatus.SUCCESS,
    RunStatus.SUCCEEDED: ApiRunStatus.SUCCESS,
    RunStatus.FAILED: ApiRunStatus.ERROR,
    RunStatus.CANCELLED: ApiRunStatus.INTERRUPTED,
    RunStatus.REJECTED: ApiRunStatus.SUCCESS,
    RunStatus.TAKEN_OVER: ApiRunStatus.SUCCESS,
    RunStatus.PARKED: ApiRunStatus.SUCCESS,
    RunStatus.STOPPED: ApiRunStatus.INTERRUPTED,  # as LangGraph's run cut short (a cancel)
}


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: a pydantic object (a LangChain message) as its fields, as
    LangGraph's server sends it; anything else JSON cannot hold as its string."""
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json")
        except Exception:  # a model that cannot describe itself: its string
            return str(value)
    return str(value)


def iso(stamp: float | str | None) -> str | None:
    if stamp is None or isinstance(stamp, str):
        return stamp
    return datetime.fromtimestamp(stamp, UTC).isoformat()


def assistant_of(run: Run) -> str:
    """The assistant (template name) of a run started from a name or a template file."""
    return (
        Path(run.template).stem if ("/" in run.template or "\\" in run.template) else (run.template)
    )


def thread_status(run: Run | None, busy: bool = False) -> str:
    if busy:
        return "busy"
    return "idle" if run is None else THREAD_STATUS[run.status]


def runs_of_thread_status(status: str) -> list[RunStatus]:
    """The run statuses a thread status stands for."""
    return [s for s, t in THREAD_STATUS.items() if t == status]


def api_status_of(run: Run) -> ApiRunStatus:
    """What an API run's status is, seen from where its run is now."""
    return _API_STATUS[run.status]


def matches(found: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether ``found`` holds every key of ``wanted`` with an equal value (nested: contains)."""
    for key, value in wanted.items():
        if key not in found:
            return False
        have = found[key]
        if isinstance(value, Mapping) and isinstance(have, Mapping):
            if not matches(have, value):
                return False
        elif have != value:
            return False
    return True


def thread_metadata(run: Run | None, meta: ThreadMeta | None) -> dict[str, Any]:
    data = dict(meta.metadata) if meta else {}
    if run is not None:
        data.setdefault("graph_id", assistant_of(run))
        data.setdefault("assistant_id", assistant_of(run))
    return data


def interrupt_json(item: Any) -> dict[str, Any]:
    """An ``Interrupt``; a gate's or question set's value also as a ``HumanInterrupt``."""
    return {"value": human_view(jsonable(item.value)), "id": item.id}


def public_values(values: Any) -> dict[str, Any]:
    data = dict(values) if isinstance(values, Mapping) else {}
    return dict(jsonable({k: v for k, v in data.items() if k not in RESERVED_KEYS}))


def thread_json(
    thread_id: str,
    run: Run | None,
    meta: ThreadMeta | None,
    snapshot: Any | None,
    *,
    busy: bool = False,
) -> dict[str, Any]:
    """A LangGraph ``Thread``."""
    created = meta.created_at if meta else (run.created_at if run else 0.0)
    updated = max(
        x for x in (run.updated_at if run else 0.0, meta.updated_at if meta else 0.0, created)
    )
    interrupts: dict[str, list[dict[str, Any]]] = {}
    if snapshot is not None:
        for task in snapshot.tasks:
            if task.interrupts:
                interrupts[task.id] = [interrupt_json(i) for i in task.interrupts]
    state_at = snapshot.created_at if snapshot is not None else None
    shown: dict[str, Any] = {
        "thread_id": thread_id,
        "created_at": iso(created),
        "updated_at": iso(updated),
        "state_updated_at": state_at or iso(updated),
        "metadata": jsonable(thread_metadata(run, meta)),
        "status": thread_status(run, busy),
        "config": _thread_config(thread_id, run),
        "values": None,
    }
    if run is None:  # as LangGraph's: no values yet, and no error or interrupts keys
        return shown
    return shown | {
        "values": public_values(snapshot.values) if snapshot is not None else {},
        "error": run.error if run.status is RunStatus.FAILED else None,
        "interrupts": interrupts,
    }


def _thread_config(thread_id: str, run: Run | None) -> dict[str, Any]:
    """The config a thread's runs run with, as LangGraph keeps it on the thread."""
    if run is None:
        return {}
    name = assistant_of(run)
    return {"configurable": {"thread_id": thread_id, "graph_id": name, "assistant_id": name}}


def checkpoint_json(thread_id: str, config: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not config:
        return None
    conf = config.get("configurable", {})
    return {
        "thread_id": thread_id,
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "checkpoint_map": None,
    }


def state_json(thread_id: str, snapshot: Any | None) -> dict[str, Any]:
    """A LangGraph ``ThreadState`` from a ``StateSnapshot`` (None: an empty thread)."""
    if snapshot is None or (
        not snapshot.values
        and not snapshot.next
        and not snapshot.config.get("configurable", {}).get("checkpoint_id")
    ):
        return {
            "values": {},
            "next": [],
            "tasks": [],
            "interrupts": [],
            "metadata": {},
            "created_at": None,
            "checkpoint_id": None,
            "parent_checkpoint_id": None,
            "parent_checkpoint": None,
            "checkpoint": {
                "thread_id": thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": None,
                "checkpoint_map": None,
            },
        }
    tasks = [
        {
            "id": task.id,
            "name": task.name,
            "path": jsonable(list(getattr(task, "path", ()))),
            "error": None if task.error is None else f"{type(task.error).__name__}: {task.error}",
            "interrupts": [interrupt_json(i) for i in task.interrupts],
            "checkpoint": None,
            "state": None,
            "result": jsonable(task.result) if getattr(task, "result", None) is not None else None,
        }
        for task in snapshot.tasks
    ]
    checkpoint = checkpoint_json(thread_id, snapshot.config)
    parent = checkpoint_json(thread_id, snapshot.parent_config)
    return {
        "values": public_values(snapshot.values),
        "next": list(snapshot.next),
        "checkpoint": checkpoint,
        "checkpoint_id": checkpoint["checkpoint_id"] if checkpoint else None,
        "parent_checkpoint_id": parent["checkpoint_id"] if parent else None,
        "metadata": jsonable(dict(snapshot.metadata or {})),
        "created_at": snapshot.created_at,
        "parent_checkpoint": parent,
        "tasks": tasks,
        "interrupts": [interrupt_json(i) for i in snapshot.interrupts],
    }


def api_run_json(run: ApiRun, status: ApiRunStatus | None = None) -> dict[str, Any]:
    """A LangGraph ``Run``."""
    return {
        "run_id": run.api_run_id,
        "thread_id": run.run_id,
        "assistant_id": run.assistant_id,
        "created_at": iso(run.created_at),
        "updated_at": iso(run.updated_at),
        "status": str(status or run.status),
        "metadata": jsonable(run.metadata),
        "multitask_strategy": "reject",
        "kwargs": {},
        **({"error": run.error} if run.error else {}),
    }
